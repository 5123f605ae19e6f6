"""The rubric: loaded from ``rubric/*.yaml`` (the authority) and rendered to markdown for the docs site."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from d2kit import paths

RUBRIC_DIR = paths.RUBRIC_DIR


@dataclass(frozen=True)
class Credit:
    """What earns full, partial and no credit: the same three levels everywhere in the rubric."""

    full: str
    partial: str
    none: str


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    points: float
    credit: Credit
    why: str


@dataclass(frozen=True)
class SecondQuestion:
    """What the interviewer asks once the follow-up is answered, and what a strong answer adds."""

    question: str
    strong_adds: str


@dataclass(frozen=True)
class FollowUp:
    number: int
    id: str
    topic: str
    question: str
    probe: str
    credited_in: str
    points: float
    credit: Credit
    in_two_lines: tuple[str, ...]  # the answer as the cheat sheet gives it
    second_question: SecondQuestion


@dataclass(frozen=True)
class LevelBar:
    """What a hire and a no-hire look like at one level."""

    hire: str
    no_hire: str


@dataclass(frozen=True)
class Calibration:
    senior: LevelBar
    staff: LevelBar
    hire_phrases: tuple[str, ...]
    no_hire_phrases: tuple[str, ...]


@dataclass(frozen=True)
class FailureLeg:
    name: str
    asks: str


@dataclass(frozen=True)
class Criterion:
    id: str
    rank: int
    title: str
    points: float
    measures: str
    credit: Credit
    checks: tuple[Check, ...]
    calibration: Calibration
    legs: tuple[FailureLeg, ...] = ()  # failure_legs only: the three legs every failure needs


@dataclass(frozen=True)
class Clarification:
    id: str
    question: str
    example: str
    credit: Credit


@dataclass(frozen=True)
class Section:
    number: int
    title: str
    asks: str
    credit: Credit


@dataclass(frozen=True)
class Phase:
    start: float
    end: float
    name: str
    activity: str
    sections: tuple[int, ...]


@dataclass(frozen=True)
class ProcessCheck:
    id: str
    title: str
    credit: Credit
    tool_sees: str


@dataclass(frozen=True)
class DeepDiveDeadline:
    minute: float
    section: int
    warning: str


@dataclass(frozen=True)
class ProcessRubric:
    title: str
    intro: str
    phases: tuple[Phase, ...]
    deep_dive_deadline: DeepDiveDeadline
    checks: tuple[ProcessCheck, ...]

    @property
    def minutes(self) -> float:
        return self.phases[-1].end


@dataclass(frozen=True)
class DesignRubric:
    round_id: str
    round_title: str
    design_name: str
    minutes: int
    prompt: str
    hard_parts: tuple[str, ...]
    produce: tuple[str, ...]
    authority: str
    criteria: tuple[Criterion, ...]
    clarifications: tuple[Clarification, ...]
    sections: tuple[Section, ...]
    follow_ups: tuple[FollowUp, ...]
    scorer_limits: str

    def criterion(self, criterion_id: str) -> Criterion:
        return next(c for c in self.criteria if c.id == criterion_id)

    def follow_ups_for(self, criterion_id: str) -> tuple[FollowUp, ...]:
        return tuple(f for f in self.follow_ups if f.credited_in == criterion_id)

    def total_points(self) -> float:
        return sum(c.points for c in self.criteria)


@dataclass(frozen=True)
class DiagramRubricCheck:
    id: str
    points: float
    full: str
    none: str  # "" where the rubric leaves it implicit
    partial: str = ""  # only agreement has a partial level


@dataclass(frozen=True)
class DiagramCriterion:
    id: str
    title: str
    points: float
    checks: tuple[DiagramRubricCheck, ...]


@dataclass(frozen=True)
class DiagramRubric:
    title: str
    points: float
    intro: str
    criteria: tuple[DiagramCriterion, ...]
    bands: tuple[tuple[float, str], ...]  # (lowest total, label), highest first

    def band(self, total: float) -> str:
        return next(label for lowest, label in self.bands if total >= lowest)


def _credit(raw: dict) -> Credit:
    return Credit(full=raw["full"], partial=raw["partial"], none=raw["none"])


def _calibration(raw: dict) -> Calibration:
    return Calibration(
        senior=LevelBar(hire=raw["senior"]["hire"], no_hire=raw["senior"]["no_hire"]),
        staff=LevelBar(hire=raw["staff"]["hire"], no_hire=raw["staff"]["no_hire"]),
        hire_phrases=tuple(raw["signals"]["hire"]),
        no_hire_phrases=tuple(raw["signals"]["no_hire"]),
    )


# libyaml's parser where PyYAML has it (its wheels do): every `d2kit score` parses the rubric, and the pure-Python
# parser took about 0.2 s of a 1.5 s run -- reading each file twice (here and for the pasted-text check) as long again.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def read_yaml(path: Path) -> dict:
    """A rubric file, parsed once per process (the scorer and the pasted-text check both read them)."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_YAML_LOADER)  # a safe loader (C or Python)


def _read(name: str) -> dict:
    path = RUBRIC_DIR / name
    if not path.exists():
        raise FileNotFoundError(f"rubric data not found at {path} (run from a clone of the kit)")
    return read_yaml(path)


@cache
def load_design_rubric() -> DesignRubric:
    raw = _read("part2-design.yaml")
    round_ = raw["round"]
    return DesignRubric(
        round_id=round_["id"],
        round_title=round_["title"],
        design_name=round_["design_name"],
        minutes=round_["minutes"],
        prompt=round_["prompt"].strip(),
        hard_parts=tuple(round_["hard_parts"]),
        produce=tuple(round_["produce"]),
        authority=raw["authority"],
        criteria=tuple(
            Criterion(
                id=c["id"], rank=c["rank"], title=c["title"], points=c["points"], measures=c["measures"],
                credit=_credit(c),
                checks=tuple(
                    Check(id=k["id"], title=k["title"], points=k["points"], credit=_credit(k), why=k["why"])
                    for k in c["checks"]
                ),
                calibration=_calibration(c["calibration"]),
                legs=tuple(FailureLeg(name=leg["name"], asks=leg["asks"]) for leg in c.get("legs", ())),
            )
            for c in raw["criteria"]
        ),
        clarifications=tuple(
            Clarification(id=c["id"], question=c["question"], example=c["example"], credit=_credit(c))
            for c in raw["clarifications"]
        ),
        sections=tuple(
            Section(number=s["number"], title=s["title"], asks=s["asks"], credit=_credit(s))
            for s in raw["sections"]
        ),
        follow_ups=tuple(
            FollowUp(
                number=f["number"], id=f["id"], topic=f["topic"], question=f["question"].strip(),
                probe=f["probe"].strip(), credited_in=f["credited_in"], points=f["points"], credit=_credit(f),
                in_two_lines=tuple(f["in_two_lines"]),
                second_question=SecondQuestion(question=f["second_question"]["question"].strip(),
                                               strong_adds=f["second_question"]["strong_adds"].strip()),
            )
            for f in raw["follow_ups"]
        ),
        scorer_limits=raw["scorer_limits"],
    )


@cache
def load_process_rubric() -> ProcessRubric:
    raw = _read("part1-process.yaml")
    deadline = raw["deep_dive_deadline"]
    return ProcessRubric(
        title=raw["title"],
        intro=raw["intro"],
        phases=tuple(
            Phase(start=p["start"], end=p["end"], name=p["name"], activity=p["activity"],
                  sections=tuple(p["sections"]))
            for p in raw["phases"]
        ),
        deep_dive_deadline=DeepDiveDeadline(
            minute=deadline["minute"], section=deadline["section"], warning=deadline["warning"].strip()
        ),
        checks=tuple(
            ProcessCheck(id=c["id"], title=c["title"], credit=_credit(c), tool_sees=c["tool_sees"])
            for c in raw["checks"]
        ),
    )


@cache
def load_diagram_rubric() -> DiagramRubric:
    """Part 3. A criterion without checks (agreement) is its own single check, with a partial level."""
    raw = _read("part3-diagram.yaml")
    criteria = []
    for c in raw["criteria"]:
        checks = c.get("checks") or [{key: c[key] for key in ("id", "points", "full", "partial", "none")}]
        criteria.append(DiagramCriterion(
            id=c["id"], title=c["title"], points=c["points"],
            checks=tuple(DiagramRubricCheck(id=k["id"], points=k["points"], full=" ".join(k["full"].split()),
                                            none=" ".join(k.get("none", "").split()),
                                            partial=" ".join(k.get("partial", "").split())) for k in checks)))
    rubric = DiagramRubric(title=raw["title"], points=raw["points"], intro=" ".join(raw["intro"].split()),
                           criteria=tuple(criteria),
                           bands=tuple(sorted(((b["min"], b["label"]) for b in raw["bands"]), reverse=True)))
    for criterion in rubric.criteria:
        if abs(sum(k.points for k in criterion.checks) - criterion.points) > 1e-9:
            raise ValueError(f"part3-diagram.yaml: the checks of {criterion.id} do not add up to its points")
    if abs(sum(c.points for c in rubric.criteria) - rubric.points) > 1e-9:
        raise ValueError("part3-diagram.yaml: the criteria do not add up to its points")
    return rubric


# --------------------------------------------------------------------------------------------------
# Markdown for the docs site (mkdocs-material: tables, admonitions and pymdownx.details for ???).
# --------------------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _points(value: float) -> str:
    return f"{value:g}"


def _credit_table(rows: list[tuple[str, Credit]], first_header: str) -> list[str]:
    out = [f"| {first_header} | Full credit | Partial credit | No credit |", "|---|---|---|---|"]
    out += [f"| {_cell(name)} | {_cell(c.full)} | {_cell(c.partial)} | {_cell(c.none)} |" for name, c in rows]
    return out


def _credit_list(credit: Credit) -> list[str]:
    return [f"- **Full credit:** {_cell(credit.full)}", f"- **Partial credit:** {_cell(credit.partial)}",
            f"- **No credit:** {_cell(credit.none)}"]


def _indent(lines: list[str]) -> list[str]:
    return [("    " + line) if line else "" for line in lines]


def _render_process(process: ProcessRubric) -> list[str]:
    out = [f"## {process.title}", "", " ".join(process.intro.split()), "", "### Time budget", ""]
    out += ["| Minutes | Phase | Activity | Sections |", "|---|---|---|---|"]
    for p in process.phases:
        sections = ", ".join(str(s) for s in p.sections)
        out.append(f"| {_points(p.start)}–{_points(p.end)} | {p.name} | {_cell(p.activity)} | {sections} |")
    deadline = process.deep_dive_deadline
    out += ["", f'!!! danger "Minute {_points(deadline.minute)}"', "", f"    {_cell(deadline.warning)}", ""]
    out += ["### What you score yourself", ""]
    out += _credit_table([(c.title, c.credit) for c in process.checks], "Check")
    out += ["", '!!! info "What a tool can see of the process"', ""]
    out += [f"    - **{c.title}**: {_cell(c.tool_sees)}" for c in process.checks]
    return out + [""]


def _render_design(design: DesignRubric) -> list[str]:
    out = [f"## Part 2 — Design rounds: {design.round_id}, {design.round_title.lower()}", ""]
    out += ['!!! note "The rubric is the authority"', "", f"    {_cell(design.authority)}", ""]
    out += ["### The five things being measured", "", "In descending order of weight; 100 points in all.", ""]
    out += ["| # | Criterion | Points |", "|---|---|---|"]
    out += [f"| {c.rank} | [{c.title}](#{c.id.replace('_', '-')}) | {_points(c.points)} |" for c in design.criteria]
    out.append("")
    for c in design.criteria:
        out += [f"### {c.rank}. {c.title} — {_points(c.points)} points {{ #{c.id.replace('_', '-')} }}", ""]
        out += [_cell(c.measures), ""]
        out += _credit_list(c.credit)
        out += ["", "| Check | Points | Full credit | Partial credit | No credit |", "|---|---|---|---|---|"]
        for k in c.checks:
            out.append(f"| {_cell(k.title)} | {_points(k.points)} | {_cell(k.credit.full)} | "
                       f"{_cell(k.credit.partial)} | {_cell(k.credit.none)} |")
        for f in design.follow_ups_for(c.id):
            out.append(f"| Hidden follow-up {f.number} pre-empted | {_points(f.points)} | "
                       f"see the hidden follow-ups | | |")
        out.append("")
    out += ["### The clarifying questions", "", "Say them out loud before designing, and write the answers "
            "in section 1.", ""]
    out += ["| Question | Example answer | Full credit | Partial credit | No credit |", "|---|---|---|---|---|"]
    out += [f"| {_cell(q.question)} | {_cell(q.example)} | {_cell(q.credit.full)} | {_cell(q.credit.partial)} | "
            f"{_cell(q.credit.none)} |" for q in design.clarifications]
    out += ["", "### The nine sections of the template", ""]
    out += _credit_table([(f"{s.number}. {s.title} — {s.asks}", s.credit) for s in design.sections], "Section")
    out += ["", "### Hidden follow-ups", ""]
    out += ['??? warning "Open only after your 45 minutes are up"', ""]
    body: list[str] = ["The rubric awards points for having pre-empted these in the written document "
                       "without being asked.", ""]
    for f in design.follow_ups:
        body += [f"**{f.number}. {f.topic}** ({_points(f.points)} points, counted in "
                 f"*{design.criterion(f.credited_in).title}*)", "", f"> {_cell(f.question)}", "",
                 _cell(f.probe), ""]
        body += _credit_list(f.credit)
        body.append("")
    out += _indent(body)
    out += ['!!! info "What the automatic scorer can and cannot see"', "", f"    {_cell(design.scorer_limits)}", ""]
    return out


def _render_diagram(diagram: DiagramRubric) -> list[str]:
    out = [f"## {diagram.title} — {_points(diagram.points)} points", "", diagram.intro, ""]
    out += ["Graded from the Excalidraw scene (`attempt-d2.excalidraw`), shown beside the document's 100 points "
            "and never added to them.", ""]
    out += ["| Criterion | Check | Points | Full credit | Partial credit | No credit |", "|---|---|---|---|---|---|"]
    for criterion in diagram.criteria:
        for check in criterion.checks:
            out.append(f"| {_cell(criterion.title)} | {check.id.replace('_', ' ')} | {_points(check.points)} | "
                       f"{_cell(check.full)} | {_cell(check.partial)} | {_cell(check.none)} |")
    out += ["", "| Total | Band |", "|---|---|"]
    out += [f"| {_points(lowest)}+ | {_cell(label)} |" for lowest, label in diagram.bands]
    out += ["", '!!! info "How the drawing is read"', ""]
    out += _indent([
        "- A box's label is the text bound to it, free text placed inside it, or text grouped with it; a frame's "
        "name labels the frame; text grouped with several boxes labels the group; a box drawn inside another "
        "(or a frame's member) is part of it.",
        "- An arrow joins the boxes its ends are bound to. An end that is not bound is read as touching the "
        "nearest box within 60 px, and the report says so; a line without heads joins both ways.",
        "- Words are open: executor, runner, agent and worker are one component; DB, Postgres, store and "
        "Redis are a store; planner, dispatcher, controller and scheduler are one. Class-diagram member lines "
        "(`- id: UUID`) do not name a box.",
        "- Every point quotes the labels that earned it; every miss lists the labels that were looked at.",
        "- Agreement compares the components and the named technologies of section 5 with the drawing's.",
        "- The PNG (or SVG) next to the scene must be its export: the scene's size at some export scale, the "
        "same text for an SVG, and not older than the scene.",
    ])
    return out + [""]


def render_rubric_markdown() -> str:
    """The whole rubric (Parts 1, 2 and 3) as mkdocs-material markdown.

    Uses tables, ``!!!`` admonitions and a collapsible ``???`` block, so the site needs the
    ``admonition``, ``pymdownx.details``, ``attr_list`` and ``tables`` extensions.
    """
    lines = ["# Rubric", ""]
    lines += _render_process(load_process_rubric())
    lines += _render_design(load_design_rubric())
    lines += _render_diagram(load_diagram_rubric())
    return "\n".join(lines).rstrip() + "\n"
