"""Part 1 from the round record: what the candidate did, minute by minute, against the seed's budget.

Time between two saves is spent on what the later save changed: the sections whose words moved (in
proportion to how many words moved), or the drawing. That is an estimate of where attention went, measured
only at saves, and it is shown as such. Without a record nothing here is guessed: Part 1 is "not observed".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from d2kit.scoring.document import parse
from d2kit.scoring.practice import DEEP_DIVE_STARTED_WORDS  # the timer's minute-25 warning uses the same line
from d2kit.scoring.round_record import RoundRecord, Save
from d2kit.scoring.rubric import ProcessRubric, load_process_rubric

DIAGRAM_ROW = "diagram"
HARD_SECTIONS = ("6", "7")
PLUMBING_SECTIONS = ("3", "5", DIAGRAM_ROW)
NOT_OBSERVED = ("not observed: this attempt has no practice record (attempt-d2.round.json), so the process was "
                "not watched. Run `d2kit practice` to have it measured.")


@dataclass(frozen=True)
class Span:
    row: str  # a section number, or "diagram"
    start: float  # budget minutes
    end: float


@dataclass
class ProcessCheckResult:
    id: str
    title: str
    level: str  # "full" | "partial" | "none"
    observed: str


@dataclass
class ProcessObservation:
    observed: bool
    note: str = ""
    checks: list[ProcessCheckResult] = field(default_factory=list)
    scale_numbers_minute: float | None = None
    delivery_guarantee_minute: float | None = None
    deep_dive_minute: float | None = None
    diagram_last_changed_minute: float | None = None
    diagram_changed_after_deadline: bool = False
    minutes_on_hard_sections: float = 0.0  # sections 6-7
    minutes_on_plumbing: float = 0.0  # sections 3 and 5, and the drawing
    section_9_before_time_up: bool = False
    words_after_time_up: dict[str, int] = field(default_factory=dict)  # section -> words not credited
    spans: list[Span] = field(default_factory=list)
    ended_minute: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _first(saves: list[Save], flag: str) -> float | None:
    return next((s.minute for s in saves if getattr(s, flag)), None)


def activity_spans(record: RoundRecord) -> list[Span]:
    """Each interval between saves, attributed to what the closing save changed."""
    spans: list[Span] = []
    previous_minute = 0.0
    previous_words: dict[str, int] = {}
    for save in sorted(record.saves, key=lambda s: s.minute):
        if save.file == DIAGRAM_ROW:
            spans.append(Span(DIAGRAM_ROW, previous_minute, save.minute))
        else:
            moved = {n: abs(w - previous_words.get(n, 0)) for n, w in save.words.items()}
            total = sum(moved.values())
            cursor = previous_minute
            for section, words in sorted(moved.items(), key=lambda item: int(item[0])):
                if words:
                    length = (save.minute - previous_minute) * words / total
                    spans.append(Span(section, cursor, cursor + length))
                    cursor += length
            previous_words = save.words
        previous_minute = save.minute
    return [s for s in spans if s.end > s.start]


def _minutes(spans: list[Span], rows: tuple[str, ...]) -> float:
    return round(sum(s.end - s.start for s in spans if s.row in rows), 1)


def observe(record: RoundRecord | None, current_text: str | None = None,
            process: ProcessRubric | None = None) -> ProcessObservation:
    if record is None:
        return ProcessObservation(observed=False, note=NOT_OBSERVED)
    process = process or load_process_rubric()
    deadline = process.deep_dive_deadline.minute
    end = record.ended_minute if record.ended_minute is not None else record.budget_minutes
    in_time = [s for s in record.saves if s.minute <= end]
    documents = [s for s in in_time if s.file == "document"]
    diagrams = [s for s in in_time if s.file == DIAGRAM_ROW]
    spans = activity_spans(RoundRecord(record.budget_minutes, record.round_minutes, in_time))
    deep_dive = next((s.minute for s in documents if s.words.get("6", 0) >= DEEP_DIVE_STARTED_WORDS), None)
    last_drawn = diagrams[-1].minute if diagrams else None
    at_time_up = parse(record.text_at_time_up or "")
    observation = ProcessObservation(
        observed=True,
        scale_numbers_minute=_first(documents, "scale_numbers"),
        delivery_guarantee_minute=_first(documents, "delivery_guarantee"),
        deep_dive_minute=deep_dive,
        diagram_last_changed_minute=last_drawn,
        diagram_changed_after_deadline=last_drawn is not None and last_drawn > deadline,
        minutes_on_hard_sections=_minutes(spans, HARD_SECTIONS),
        minutes_on_plumbing=_minutes(spans, PLUMBING_SECTIONS),
        section_9_before_time_up=9 in at_time_up.sections and at_time_up.sections[9].words > 0,
        words_after_time_up=_words_after(record, current_text),
        spans=spans,
        ended_minute=end,
    )
    observation.checks = _checks(observation, process)
    if not record.finished:
        observation.note = f"the round was stopped early, at minute {end:g}"
    return observation


def _words_after(record: RoundRecord, current_text: str | None) -> dict[str, int]:
    if current_text is None or record.text_at_time_up is None:
        return {}
    before = parse(record.text_at_time_up).sections
    after = parse(current_text).sections
    added = {str(n): s.words - (before[n].words if n in before else 0) for n, s in after.items()}
    return {n: w for n, w in added.items() if w > 0}


def _minute(value: float | None) -> str:
    return f"minute {value:.1f}" if value is not None else "never"


def _checks(o: ProcessObservation, process: ProcessRubric) -> list[ProcessCheckResult]:
    clarify_end = process.phases[0].end
    deadline = process.deep_dive_deadline.minute
    deep_dive_phase = next(p for p in process.phases if process.deep_dive_deadline.section in p.sections)
    titles = {c.id: c.title for c in process.checks}
    clarified = [o.scale_numbers_minute, o.delivery_guarantee_minute]
    if all(m is not None and m <= clarify_end for m in clarified):
        clarify_level = "full"
    elif any(m is not None for m in clarified):
        clarify_level = "partial"
    else:
        clarify_level = "none"
    if o.diagram_changed_after_deadline or o.deep_dive_minute is None or o.deep_dive_minute > deadline:
        budget_level = "none"
    elif o.deep_dive_minute <= deep_dive_phase.start:
        budget_level = "full"
    else:
        budget_level = "partial"
    drawn = o.diagram_last_changed_minute is not None
    diagram_level = "none" if not drawn else "partial" if o.diagram_changed_after_deadline else "full"
    return [
        ProcessCheckResult("clarified_first", titles["clarified_first"], clarify_level,
                           f"scale numbers in section 2: {_minute(o.scale_numbers_minute)}; the delivery "
                           f"guarantee: {_minute(o.delivery_guarantee_minute)} (phase 1 ends at minute "
                           f"{clarify_end:g})"),
        ProcessCheckResult("time_budget", titles["time_budget"], budget_level,
                           f"deep dive (section 6, {DEEP_DIVE_STARTED_WORDS}+ words) begun: "
                           f"{_minute(o.deep_dive_minute)}; {o.minutes_on_hard_sections:g} min on sections 6–7 "
                           f"against {o.minutes_on_plumbing:g} min on sections 3, 5 and the drawing"),
        ProcessCheckResult("diagram", titles["diagram"], diagram_level,
                           "no save of attempt-d2.excalidraw during the round" if not drawn else
                           f"the drawing last changed at {_minute(o.diagram_last_changed_minute)}"
                           + (f": after minute {deadline:g}, still drawing boxes" if o.diagram_changed_after_deadline
                              else "")),
    ]
