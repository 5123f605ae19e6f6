"""The round as it happened: every save of the attempt and of the drawing, on the practice clock.

``d2kit practice`` polls the two files' modification stamps on every tick of its timer and appends a save
(words per section for the document, live elements for the drawing) to ``attempt-d2.round.json`` next to
the attempt. Polling, not a file-system watcher: the timer already ticks once a second, a save is stamped
on the practice clock (which tests accelerate) rather than the wall clock, and a stat per tick behaves the
same on Linux and macOS. At time-up the document's text is kept, so words typed afterwards are not credited.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from d2kit.scoring.document import parse
from d2kit.scoring.scene import SceneError, live_elements

RECORD_SUFFIX = ".round.json"
DIGIT = re.compile(r"\d")
DELIVERY = re.compile(r"at[- ]least[- ]once|at[- ]most[- ]once|exactly[- ]once", re.I)
SCALE_SECTION = 2


class RecordError(ValueError):
    """A round record that cannot be read; the message names the file and the problem."""


@dataclass(frozen=True)
class Save:
    minute: float  # on the round's clock, scaled to the seed's 45-minute budget
    file: str  # "document" | "diagram"
    words: dict[str, int] = field(default_factory=dict)  # section number -> words (document saves)
    scale_numbers: bool = False  # section 2 holds a number
    delivery_guarantee: bool = False  # at-least-once / at-most-once / exactly-once is written somewhere
    elements: int = 0  # live elements (diagram saves)


@dataclass
class RoundRecord:
    budget_minutes: float  # the seed's budget (45): every minute below is on this scale
    round_minutes: float  # how long the practised round was (`--minutes`)
    saves: list[Save] = field(default_factory=list)
    ended_minute: float | None = None  # None: the round has not ended (or crashed)
    finished: bool = False  # False: stopped early with Ctrl-C
    text_at_time_up: str | None = None

    def document_saves(self) -> list[Save]:
        return [s for s in self.saves if s.file == "document"]

    def diagram_saves(self) -> list[Save]:
        return [s for s in self.saves if s.file == "diagram"]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, ensure_ascii=False)


def record_path(attempt: Path) -> Path:
    return attempt.with_name(attempt.stem + RECORD_SUFFIX)


def load_record(attempt: Path) -> RoundRecord | None:
    """The record next to ``attempt``, or None when the attempt was not practised with the kit."""
    path = record_path(attempt)
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        saves = [Save(**s) for s in raw.pop("saves")]
        return RoundRecord(**raw, saves=saves)
    except (json.JSONDecodeError, TypeError, KeyError, AttributeError) as error:
        raise RecordError(f"{path}: not a round record the kit wrote ({error})") from error


def document_save(text: str, minute: float) -> Save:
    doc = parse(text)
    words = {str(n): s.words for n, s in sorted(doc.sections.items())}
    scale = doc.sections.get(SCALE_SECTION)
    scale_text = " ".join(u.text for u in scale.units) if scale else ""
    content = " ".join(u.text for u in doc.content_units())
    return Save(round(minute, 2), "document", words=words, scale_numbers=bool(DIGIT.search(scale_text)),
                delivery_guarantee=bool(DELIVERY.search(content)))


def diagram_save(path: Path, minute: float) -> Save:
    try:
        count = len(live_elements(json.loads(path.read_text(encoding="utf-8")), str(path)))
    except (SceneError, ValueError):  # a half-written save: still a save, of nothing readable yet
        count = 0
    return Save(round(minute, 2), "diagram", elements=count)


class Recorder:
    """Polls the attempt and the drawing; appends a save whenever either changed, and writes the record."""

    def __init__(self, attempt: Path, diagram: Path, round_minutes: float, budget_minutes: float) -> None:
        self.attempt = attempt
        self.diagram = diagram
        self.path = record_path(attempt)
        self.record = RoundRecord(budget_minutes=budget_minutes, round_minutes=round_minutes)
        self.scale = budget_minutes / (60 * round_minutes)  # practice seconds -> budget minutes
        self.stamps: dict[Path, tuple[int, int] | None] = {attempt: self._stamp(attempt),
                                                           diagram: self._stamp(diagram)}
        # A change seen once is pending until a later poll sees the same stamp: an editor's save (truncate, then
        # write) caught in between would otherwise be two saves. It keeps the minute it was first seen.
        self.pending: dict[Path, tuple[tuple[int, int], float]] = {}
        self._write()

    @staticmethod
    def _stamp(path: Path) -> tuple[int, int] | None:
        try:
            stat = path.stat()
        except FileNotFoundError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def poll(self, elapsed_seconds: float, settle: bool = True) -> list[Save]:
        """Saves finished since the last poll; ``settle=False`` (the round's end) takes a pending change as is."""
        minute = elapsed_seconds * self.scale
        new = []
        for path, make in ((self.attempt, lambda at: document_save(self.attempt.read_text(encoding="utf-8"), at)),
                           (self.diagram, lambda at: diagram_save(self.diagram, at))):
            stamp = self._stamp(path)
            if stamp is None or stamp == self.stamps[path]:
                self.pending.pop(path, None)
                continue
            seen_stamp, first_seen = self.pending.get(path, (None, minute))
            if settle and stamp != seen_stamp:  # still being written, or just written: look again next poll
                self.pending[path] = (stamp, first_seen)
                continue
            new.append(make(first_seen))
            self.stamps[path] = stamp
            self.pending.pop(path, None)
        if new:
            self.record.saves.extend(new)
            self._write()
        return new

    def end(self, elapsed_seconds: float, finished: bool) -> RoundRecord:
        self.poll(elapsed_seconds, settle=False)
        self.record.ended_minute = round(elapsed_seconds * self.scale, 2)
        self.record.finished = finished
        self.record.text_at_time_up = self.attempt.read_text(encoding="utf-8") if self.attempt.exists() else ""
        self._write()
        return self.record

    def _write(self) -> None:
        self.path.write_text(self.record.to_json(), encoding="utf-8")
