"""Part 3: grade the drawing from its Excalidraw scene, as a reviewer reads it.

Every check quotes the element labels it credited, and a check that fails lists the labels it looked at,
so the candidate can see why "Scheduler" alone is not "more than one scheduler". Words are open (see
``components``). The checks are the ones in ``rubric/part3-diagram.yaml``; their points come from there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from d2kit.scoring import components as vocabulary
from d2kit.scoring.document import Document
from d2kit.scoring.evidence import credit_level
from d2kit.scoring.export_check import ExportCheck, check_export
from d2kit.scoring.rubric import DiagramRubric, DiagramRubricCheck, load_diagram_rubric
from d2kit.scoring.scene import Arrow, Scene, SceneError, Shape, load_scene

LEASE = re.compile(r"\blease|heartbeat|visibility[- ]timeout|\bexpir|\bttl\b|time ?out|\brenew", re.I)
FENCING = re.compile(r"\bfenc|\bepoch\b|\bgeneration\b|\b(lease|attempt|claim|run) ?(token|version|no\b|number)|"
                     r"\btoken\b.{0,30}\b(check|match|compar|verif|reject|refus|stale|>|=)|"
                     r"\b(check|verif|compar|reject|refus|stale)\w*.{0,30}\btoken", re.I)
TOKEN = re.compile(r"\btoken\b", re.I)  # on an arrow a worker writes or completes with: the fencing token
SINGLE_DISPATCH = re.compile(r"\bunique|skip locked|for update|\bconditional|compare[- ]and[- ]swap|\bcas\b|"
                             r"\belect|leader (lease|lock)|\bpartition|\bowner|\bshard|idempoten|dedup|"
                             r"occurrence (key|id)|on conflict|\bclaim|\(job(_id)?, ?\w*(fire|time|run)|"
                             r"exactly one|once per|\block\b|\blocks\b|advisory", re.I)
COMPLETION = re.compile(r"complet|result|\bdone\b|\back\b|heartbeat|status|report|finish|succe|outcome|record|"
                        r"\brenew|\bmark|\bcommit|\bwrite", re.I)
CLAIM = re.compile(r"claim|poll|pull|fetch|\btake|dequeue|\blease|\bget\b|receiv|consum|subscri|acquir|\block|"
                   r"select|dispatch|deliver|assign|push|\bsend|\bwork\b|\btasks?\b|\bjobs?\b", re.I)
AGREEMENT_PARTIAL_LIMIT = 2  # up to this many components in only one of drawing and section 5: partial


@dataclass
class DiagramCheckScore:
    id: str
    criterion: str
    points: float
    max_points: float
    evidence: list[str]  # element labels, as drawn
    missing: list[str]  # what was not found, naming the labels that were looked at
    why: str  # the rubric's "none" text: why it matters

    @property
    def level(self) -> str:
        return credit_level(self.points, self.max_points)


@dataclass
class DiagramGrade:
    scene: str
    points: float
    max_points: float
    band: str
    checks: list[DiagramCheckScore] = field(default_factory=list)
    only_in_drawing: list[str] = field(default_factory=list)
    only_in_section_5: list[str] = field(default_factory=list)
    remarks: list[str] = field(default_factory=list)  # how ambiguous elements were read
    export: ExportCheck | None = None
    problem: str = ""  # why nothing could be graded (no scene, not a scene, empty canvas)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["export"] = self.export.to_dict() if self.export else None
        for check, raw in zip(self.checks, data["checks"], strict=True):
            raw["level"] = check.level
        return data


class _Reading:
    """The scene seen through the vocabulary: which shapes are which component, and the links between them."""

    def __init__(self, scene: Scene) -> None:
        self.scene = scene
        self.kinds = {s: self._kinds(s) for s in scene.shapes}

    def _below(self, shape: Shape) -> set[str]:
        """What a box names, or else what all the boxes drawn inside it name: a box around workers is the pool."""
        own = vocabulary.components_in(shape.name)
        if own:
            return own
        inside = set().union(*(self._below(child) for child in shape.children))
        return inside if len(inside) == 1 else set()

    def _kinds(self, shape: Shape) -> set[str]:
        kinds = self._below(shape)
        if kinds or shape.parent is None:
            return kinds
        return self._kinds(shape.parent)  # a plain box drawn inside "Workers" is a worker

    def shapes(self, kind: str) -> list[Shape]:
        return [s for s in self.scene.shapes if kind in self.kinds[s]]

    def instances(self, kind: str) -> list[Shape]:
        """Boxes of a kind, counting a container of them once through its members (not as one more)."""
        return [s for s in self.shapes(kind) if not any(kind in self.kinds[c] for c in s.children)]

    def is_(self, shape: Shape | None, kinds: Iterable[str]) -> bool:
        return shape is not None and bool(self.kinds[shape] & set(kinds))

    def links(self, kinds_a: Iterable[str], kinds_b: Iterable[str]) -> list[tuple[Arrow, Shape, Shape]]:
        """Arrows with one end in kinds_a and the other in kinds_b, as (arrow, the a end, the b end)."""
        found = []
        for arrow in self.scene.arrows:
            if self.is_(arrow.start, kinds_a) and self.is_(arrow.end, kinds_b):
                found.append((arrow, arrow.start, arrow.end))
            elif self.is_(arrow.end, kinds_a) and self.is_(arrow.start, kinds_b):
                found.append((arrow, arrow.end, arrow.start))
        return found

    def looked_at(self) -> str:
        labels = [s.describe() for s in self.scene.shapes if s.label]
        shown = ", ".join(labels[:12]) + (f" and {len(labels) - 12} more" if len(labels) > 12 else "")
        return f"labels looked at: {shown}" if labels else "no shape on the canvas has a label"

    def texts_matching(self, regex: re.Pattern) -> list[str]:
        found = [f"box {s.describe()}" for s in self.scene.shapes if regex.search(s.label)]
        found += [f"arrow {a.describe()}" for a in self.scene.arrows if regex.search(a.label)]
        return found + [f"note '{n}'" for n in self.scene.notes if regex.search(n)]


def _directions(arrow: Arrow) -> list[tuple[Shape | None, Shape | None]]:
    """(from, to) pairs an arrow reads as: one by its head, or both ways for two heads or a line without any."""
    if arrow.head_at_end != arrow.head_at_start:
        return [(arrow.start, arrow.end)] if arrow.head_at_end else [(arrow.end, arrow.start)]
    return [(arrow.start, arrow.end), (arrow.end, arrow.start)]


def _flows_from_to(r: _Reading, tail: Iterable[str], head: Iterable[str]) -> list[Arrow]:
    return [arrow for arrow in r.scene.arrows
            if any(r.is_(t, tail) and r.is_(h, head) for t, h in _directions(arrow))]


def _leaves_worker(r: _Reading, arrow: Arrow) -> bool:
    """The arrow goes from a worker to something that is not a worker."""
    return any(r.is_(t, ["worker"]) and h is not None and not r.is_(h, ["worker"]) for t, h in _directions(arrow))


Result = tuple[list[str], list[str]]  # (evidence, missing): no evidence means no credit


def _more_than_one(kind: str, also_means_several: Callable[[str], bool], synonyms: str,
                   several_words: str) -> Callable[[_Reading], Result]:
    """Two boxes of the kind, or one box whose label says there are several (or a standby)."""
    def check(r: _Reading) -> Result:
        boxes = r.shapes(kind)
        if len(r.instances(kind)) >= 2:
            return [s.describe() for s in boxes], []
        several = [s.describe() for s in boxes if also_means_several(s.label)]
        if several:
            return several, []
        if boxes:
            return [], [f"one {kind}, {boxes[0].describe()}, and no {several_words} on it"]
        return [], [f"no {kind} ({synonyms}) on the drawing ({r.looked_at()})"]

    return check


def _durable_store(r: _Reading) -> Result:
    stores = r.shapes("store")
    return ([s.describe() for s in stores], []) if stores else (
        [], [f"no database, log or key-value store ({r.looked_at()})"])


def _dispatch_path(r: _Reading) -> Result:
    carriers = _work_links(r)
    if carriers:
        return [arrow.describe() for arrow in carriers], []
    queues = r.shapes("queue")
    if queues and r.shapes("worker"):
        return [], [f"{queues[0].describe()} is drawn but no arrow joins it to a worker"]
    return [], ["no queue or claim from the store hands work to a worker (an arrow straight from the scheduler "
                "is a push with nothing durable in between)"]


def _work_links(r: _Reading) -> list[Arrow]:
    """Arrows between a worker and the store or a queue that hand it work: not a worker's result alone."""
    links = []
    for arrow, worker, _ in r.links(["worker"], ["queue", "store"]):
        away_only = all(t is worker for t, _ in _directions(arrow))
        if not (away_only and COMPLETION.search(arrow.label) and not CLAIM.search(arrow.label)):
            links.append(arrow)
    return links


def _submit_flow(r: _Reading) -> Result:
    """A client/API box reaches a store in at most three arrows, not through a worker."""
    stores = set(r.shapes("store"))
    for client in r.shapes("client"):
        frontier, seen, path = [(client, [])], {client}, None
        for _ in range(3):
            next_frontier = []
            for shape, arrows in frontier:
                for arrow in r.scene.arrows:
                    other = arrow.end if arrow.start is shape else arrow.start if arrow.end is shape else None
                    if other is None or other in seen or r.is_(other, ["worker"]):
                        continue
                    if other in stores:
                        path = arrows + [arrow]
                        break
                    seen.add(other)
                    next_frontier.append((other, arrows + [arrow]))
                if path:
                    break
            if path:
                return [a.describe() for a in path], []
            frontier = next_frontier
    if not r.shapes("client"):
        return [], [f"no client, user or API box where a job is submitted ({r.looked_at()})"]
    return [], ["no arrow path from the client/API to the store"]


def _scheduler_store_flow(r: _Reading) -> Result:
    links = r.links(["scheduler"], ["store"])
    if links:
        return [arrow.describe() for arrow, _, _ in links], []
    return [], ["no arrow between a scheduler and the store" + _missing_ends(r, "scheduler", "store")]


def _worker_dispatch_flow(r: _Reading) -> Result:
    links = _work_links(r)
    if links:
        return [arrow.describe() for arrow in links], []
    return [], ["no arrow by which a worker claims or receives work from the store or a queue"
                + _missing_ends(r, "worker", "store")]


def _completion_flow(r: _Reading) -> Result:
    # A result or heartbeat may go back through a service (an API, the scheduler) rather than straight to the store.
    labelled = [arrow for arrow in r.scene.arrows if COMPLETION.search(arrow.label) and _leaves_worker(r, arrow)]
    # An arrow from a worker into the store says "writes back" too, unless its label says it only claims.
    direct = [arrow for arrow in _flows_from_to(r, ["worker"], ["store"])
              if not (CLAIM.search(arrow.label) and not COMPLETION.search(arrow.label))]
    found = list(dict.fromkeys(labelled + direct))
    if found:
        return [a.describe() for a in found], []
    return [], ["nothing goes back from a worker to the store: no arrow pointing from a worker to the store, and "
                "no result/complete/heartbeat arrow from a worker"]


def _fencing(r: _Reading) -> Result:
    found = r.texts_matching(FENCING)
    found += [f"arrow {a.describe()}" for a in r.scene.arrows if TOKEN.search(a.label) and _leaves_worker(r, a)]
    if found:
        return list(dict.fromkeys(found)), []
    return [], [f"no fencing token, generation or epoch is labelled, and no arrow a worker writes or completes with "
                f"carries a token ({r.looked_at()})"]


def _missing_ends(r: _Reading, a: str, b: str) -> str:
    absent = [vocabulary.READABLE[k] for k in (a, b) if not r.shapes(k)]
    return f" (no {' and no '.join(absent)} on the drawing)" if absent else ""


def _labelled(regex: re.Pattern, what: str) -> Callable[[_Reading], Result]:
    def check(r: _Reading) -> Result:
        found = r.texts_matching(regex)
        return (found, []) if found else ([], [f"no label on the drawing names {what} ({r.looked_at()})"])

    return check


CHECKS: dict[str, Callable[[_Reading], Result]] = {
    "replicated_scheduler": _more_than_one(
        "scheduler", lambda label: vocabulary.is_multiple(label) or vocabulary.has_standby(label),
        "dispatcher, planner, controller", "replica, standby or 'x N'"),
    "durable_store": _durable_store,
    "worker_fleet": _more_than_one("worker", vocabulary.is_multiple, "executor, runner, agent",
                                   "'x N', pool or fleet"),
    "dispatch_path": _dispatch_path,
    "submit_flow": _submit_flow,
    "scheduler_store_flow": _scheduler_store_flow,
    "worker_dispatch_flow": _worker_dispatch_flow,
    "completion_flow": _completion_flow,
    "lease_visible": _labelled(LEASE, "a lease, heartbeat or expiry"),
    "fencing_visible": _fencing,
    "single_dispatch_visible": _labelled(SINGLE_DISPATCH, "what stops a double dispatch (unique key, claim, "
                                                          "SKIP LOCKED, leader lease, partition owner)"),
}


def section_5_text(doc: Document | None) -> str:
    if doc is None:
        return ""
    units = [u.text for u in doc.section_units(5) if u.kind != "heading"]
    code = ["\n".join(line.text for line in block.lines) for block in doc.code_blocks if block.section == 5]
    return "\n".join(units + code)


def _agreement(reading: _Reading, section_5: str,
               spec: DiagramRubricCheck) -> tuple[DiagramCheckScore, list[str], list[str]]:
    drawn = {k for s in reading.scene.shapes for k in reading.kinds[s]}
    written = vocabulary.components_in(section_5)
    drawn_names = vocabulary.technologies_in(" ".join(s.label for s in reading.scene.shapes))
    written_names = vocabulary.technologies_in(section_5)
    only_drawn = sorted([vocabulary.READABLE[k] for k in drawn - written] + sorted(drawn_names - written_names))
    only_written = sorted([vocabulary.READABLE[k] for k in written - drawn] + sorted(written_names - drawn_names))
    mismatches = len(only_drawn) + len(only_written)
    evidence = [f"both show the {vocabulary.READABLE[k]}" for k in sorted(drawn & written)]
    missing = [f"drawn but not in section 5: {name}" for name in only_drawn]
    missing += [f"in section 5 but not drawn: {name}" for name in only_written]
    if not section_5.strip():
        share, missing = 0.0, ["section 5 of the document is empty: the drawing has nothing to agree with"]
    elif not drawn:
        share = 0.0
        missing.append(f"no component on the drawing is recognisable ({reading.looked_at()})")
    else:
        share = 1.0 if mismatches == 0 else 0.5 if mismatches <= AGREEMENT_PARTIAL_LIMIT else 0.0
    return (DiagramCheckScore(spec.id, spec.id, round(share * spec.points, 1), spec.points, evidence, missing,
                              spec.none), only_drawn, only_written)


def grade_scene(scene: Scene, doc: Document | None, *, source: str = "scene",
                rubric: DiagramRubric | None = None) -> DiagramGrade:
    rubric = rubric or load_diagram_rubric()
    if scene.is_empty:
        return DiagramGrade(source, 0, rubric.points, rubric.band(0), problem="the canvas is empty")
    reading = _Reading(scene)
    checks: list[DiagramCheckScore] = []
    only_drawn: list[str] = []
    only_written: list[str] = []
    for criterion in rubric.criteria:
        for spec in criterion.checks:
            if spec.id == "agreement":
                check, only_drawn, only_written = _agreement(reading, section_5_text(doc), spec)
                checks.append(check)
                continue
            evidence, missing = CHECKS[spec.id](reading)
            points = spec.points if evidence else 0.0
            checks.append(DiagramCheckScore(spec.id, criterion.id, points, spec.points, evidence, missing,
                                            spec.none or spec.full))
    total = round(sum(c.points for c in checks), 1)
    return DiagramGrade(source, total, rubric.points, rubric.band(total), checks, only_drawn, only_written,
                        scene.remarks)


def grade_file(scene_path: Path, doc: Document | None, image: Path | None = None) -> DiagramGrade:
    """Grade a scene file; a missing or broken file is a grade of zero that says why, never a traceback."""
    rubric = load_diagram_rubric()
    try:
        scene = load_scene(scene_path)
    except SceneError as error:
        return DiagramGrade(str(scene_path), 0, rubric.points, rubric.band(0), problem=str(error))
    grade = grade_scene(scene, doc, source=str(scene_path), rubric=rubric)
    grade.export = check_export(scene_path, image) if image is not None else None
    return grade
