"""Sample attempts published on the site, and the hand check of what the scorer says about each.

``rubric/samples.yaml`` names the attempts (from the calibration's tuning half, written for the purpose by a
helper who read only the prompt and the rubric), what the interviewer would probe next in each, and, per
rubric line, what the scorer gave when a person last read it -- ``scored``: its points and the lines it quoted
-- with that person's verdict: ``hand`` (full, partial or none: what the line deserves), ``quotes`` (right,
wrong, or none when nothing was quoted) and a ``note`` wherever the two disagree.

When the scorer changes, :func:`differences` lists every line whose points or quoted lines are no longer the
ones that were checked: ``d2kit score --samples`` prints them, and tests/test_samples.py fails until someone
has read them again and updated the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from d2kit.scoring.calibration import CALIBRATION_DIR
from d2kit.scoring.evidence import credit_level
from d2kit.scoring.rubric import RUBRIC_DIR
from d2kit.scoring.scorer import CheckScore, ScoreReport, score_file

SAMPLES_FILE = RUBRIC_DIR / "samples.yaml"
ATTEMPTS_DIR = CALIBRATION_DIR / "tuning"
LEVELS = ("full", "partial", "none")
QUOTES = ("right", "wrong", "none")


@dataclass(frozen=True)
class HandCheck:
    points: float               # what the scorer gave when this was checked
    lines: tuple[int, ...]      # the lines it quoted then
    hand: str                   # what the line deserves, read by hand
    quotes: str                 # do the quoted lines show what was credited?
    note: str = ""

    def disagrees(self, max_points: float) -> bool:
        return self.hand != credit_level(self.points, max_points) or self.quotes == "wrong"


@dataclass(frozen=True)
class Probe:
    follow_up: int
    text: str


@dataclass(frozen=True)
class Sample:
    slug: str
    attempt: str
    title: str
    band: tuple[float, float]    # fixed by the attempt's writer before anything was scored
    realistic_45min: bool
    writer_reason: str
    probes: tuple[Probe, ...]
    checks: dict[str, HandCheck]

    @property
    def path(self) -> Path:
        return ATTEMPTS_DIR / self.attempt


def _hand_check(check_id: str, raw: dict) -> HandCheck:
    points, lines = raw["scored"]
    if raw["hand"] not in LEVELS or raw["quotes"] not in QUOTES:
        raise ValueError(f"{check_id}: hand must be one of {LEVELS}, quotes one of {QUOTES}")
    return HandCheck(float(points), tuple(lines), raw["hand"], raw["quotes"], " ".join(raw.get("note", "").split()))


@cache
def load_samples() -> tuple[Sample, ...]:
    raw = yaml.safe_load(SAMPLES_FILE.read_text(encoding="utf-8"))
    bands = yaml.safe_load((ATTEMPTS_DIR / "bands.yaml").read_text(encoding="utf-8"))["attempts"]
    samples = []
    for s in raw["samples"]:
        written = bands[s["attempt"]]
        samples.append(Sample(
            slug=s["slug"], attempt=s["attempt"], title=s["title"], band=tuple(written["band"]),
            realistic_45min=written["realistic_45min"], writer_reason=" ".join(written["reason"].split()),
            probes=tuple(Probe(p["follow_up"], " ".join(p["text"].split())) for p in s["probe_next"]),
            checks={check_id: _hand_check(check_id, c) for check_id, c in s["checks"].items()}))
    return tuple(samples)


def sample(slug: str) -> Sample:
    return next(s for s in load_samples() if s.slug == slug)


@cache
def scored(slug: str) -> ScoreReport:
    return score_file(sample(slug).path)


def checks_of(report: ScoreReport) -> list[CheckScore]:
    return [k for c in report.criteria for k in c.checks]


def _now(check: CheckScore) -> str:
    quoted = "; ".join(f"L{e.line}: {e.text}" for e in check.evidence) or "nothing quoted"
    return f"now {check.points:g}/{check.max_points:g}, lines {[e.line for e in check.evidence]} ({quoted})"


def differences(one: Sample, report: ScoreReport) -> list[str]:
    """Each rubric line where the scorer's points or quoted lines differ from the hand-checked record."""
    found = []
    current = {k.id: k for k in checks_of(report)}
    for check_id in sorted(set(current) - set(one.checks)):
        found.append(f"{one.slug} {check_id}: never checked by hand; {_now(current[check_id])}")
    for check_id in sorted(set(one.checks) - set(current)):
        found.append(f"{one.slug} {check_id}: checked by hand, but the scorer no longer has this line")
    for check_id, hand in one.checks.items():
        check = current.get(check_id)
        if check is None:
            continue
        lines = tuple(e.line for e in check.evidence)
        if (check.points, lines) != (hand.points, hand.lines):
            found.append(f"{one.slug} {check_id}: checked at {hand.points:g} with lines {list(hand.lines)}; "
                         + _now(check))
    return found


def all_differences() -> list[str]:
    return [line for s in load_samples() for line in differences(s, scored(s.slug))]


def report_differences() -> int:
    """``d2kit score --samples``: print every difference; 1 if there are any (read those lines again)."""
    found = all_differences()
    for line in found:
        print(line)
    if found:
        print(f"\n{len(found)} rubric lines differ from the hand check in {SAMPLES_FILE.relative_to(RUBRIC_DIR.parent)}"
              ": read each against its attempt, then update its scored/hand/quotes/note.")
        return 1
    print(f"The scorer agrees with every hand-checked line in {len(load_samples())} sample attempts.")
    return 0
