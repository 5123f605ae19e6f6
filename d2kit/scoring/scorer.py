"""Score an attempt against Part 2 of the rubric: every point with the lines that earned it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from d2kit.scoring import (
    altitude,
    arithmetic,
    calibrated_total,
    concepts,
    contradictions,
    credibility,
    failures,
    pasted,
    redaction,
    tradeoffs,
    wrong_answers,
)
from d2kit.scoring.calibration import accuracy_line
from d2kit.scoring.document import Document, parse
from d2kit.scoring.evidence import Evidence, Finding, credit_level
from d2kit.scoring.rubric import DesignRubric, load_design_rubric

# One detector per rubric check id and per hidden follow-up id (tests hold the two lists equal).
DETECTORS: dict[str, Callable[[Document], Finding]] = {
    "clarifications": concepts.clarifications,
    "delivery_semantics": concepts.delivery_semantics,
    "failure_triads": failures.triads,
    "failure_coverage": failures.coverage,
    "calculations": arithmetic.derivations,
    "dimensions": arithmetic.dimensions,
    "assumptions": arithmetic.assumptions,
    "rejections": tradeoffs.rejections,
    "sections_present": altitude.sections_present,
    "prose_not_names": altitude.prose_not_names,
    "time_on_hard_parts": altitude.time_on_hard_parts,
    "not_too_low": altitude.not_too_low,
    "lease_fencing": concepts.lease_fencing,
    "replica_double_fire": concepts.replica_double_fire,
    "catch_up": concepts.catch_up,
    "tenant_isolation": concepts.tenant_isolation,
    "proof_of_execution": concepts.proof_of_execution,
    "storage_limits": concepts.storage_limits,
    "clocks": concepts.clocks,
}


# The checks that judge the numbers themselves: they read every derivation, right or wrong.
ARITHMETIC_CHECKS = frozenset({"calculations", "dimensions", "assumptions", "storage_limits"})


@dataclass(frozen=True)
class Flaws:
    """What the attempt gets wrong, found once and charged to the checks it spoils."""
    wrong_answers: list[wrong_answers.Charge]
    contradictions: list[contradictions.Contradiction]
    unfenced: bool = False  # leases, no fencing number checked, no late write refused (concepts.unfenced_redispatch)

    @cached_property  # read by every check: found once
    def credibility(self) -> credibility.Credibility:
        costliest = min((c.wrong for c in self.wrong_answers), key=lambda w: w.alone, default=None)
        flawed = [c.wrong.check for c in self.wrong_answers] + [c.mechanism.check for c in self.contradictions]
        if not flawed and self.unfenced:
            return credibility.UNFENCED
        return credibility.assess(flawed, (costliest.alone, costliest.name) if costliest else (1.0, ""))


@dataclass
class CheckScore:
    id: str
    title: str
    points: float
    max_points: float
    evidence: list[Evidence]
    missing: list[str]
    why: str
    follow_up: int | None = None

    @property
    def level(self) -> str:
        return credit_level(self.points, self.max_points)


@dataclass
class CriterionScore:
    id: str
    rank: int
    title: str
    max_points: float
    checks: list[CheckScore]

    @property
    def points(self) -> float:
        return round(sum(c.points for c in self.checks), 1)


@dataclass
class ScoreReport:
    attempt: str
    criteria: list[CriterionScore]
    notice: str
    accuracy: str = ""  # the recorded held-out error: what the total is worth
    max_total: float = 100
    pasted: list[Evidence] = field(default_factory=list)  # sentences copied from the kit's texts: not scored
    credibility: str = ""  # why the design's checks were discounted, when they were
    extra: dict = field(default_factory=dict)

    @property
    def raw_total(self) -> float:
        """The rubric's points added up, as the candidate can add them."""
        return round(sum(c.points for c in self.criteria), 1)

    @property
    def total(self) -> float:
        """What is reported: the raw points through the one map fitted on out-of-sample scorings."""
        return calibrated_total.calibrated(self.raw_total)

    @property
    def calibration(self) -> str:
        return calibrated_total.explanation(self.raw_total)

    def follow_ups(self) -> list[CheckScore]:
        return sorted((k for c in self.criteria for k in c.checks if k.follow_up), key=lambda k: k.follow_up or 0)

    def to_dict(self) -> dict:
        return {
            "attempt": self.attempt,
            "total": self.total,
            "raw_total": self.raw_total,
            "calibration": self.calibration,
            "max_total": self.max_total,
            "notice": self.notice,
            "accuracy": self.accuracy,
            "criteria": [
                {"id": c.id, "rank": c.rank, "title": c.title, "points": c.points, "max_points": c.max_points,
                 "checks": [_check_dict(k) for k in c.checks]}
                for c in self.criteria
            ],
            "follow_ups": [
                {"number": k.follow_up, "id": k.id, "topic": k.title, "pre_empted": k.level, "points": k.points,
                 "max_points": k.max_points, "lines": [e.line for e in k.evidence if e.line]}
                for k in self.follow_ups()
            ],
            "pasted": [asdict(e) for e in self.pasted],
            "credibility": self.credibility,
            **self.extra,
        }


def _check_dict(check: CheckScore) -> dict:
    return {"id": check.id, "title": check.title, "points": check.points, "max_points": check.max_points,
            "level": check.level, "follow_up": check.follow_up, "evidence": [asdict(e) for e in check.evidence],
            "missing": check.missing, "why": check.why}


def _score_check(doc: Document, flaws: Flaws, check_id: str, title: str, max_points: float,
                 why: str, follow_up: int | None = None) -> CheckScore:
    found = DETECTORS[check_id](doc)
    finding = wrong_answers.charge(check_id, found, flaws.wrong_answers)
    finding = contradictions.charge(check_id, finding, flaws.contradictions)
    trust = flaws.credibility
    if trust.applies_to(check_id) and finding.fraction:
        # A check charged for a wrong answer or a contradiction pays once: its charge, or the discount the same answers
        # bring on the design's other checks, whichever costs more, never both.
        charged = finding is not found  # each charge returns a new Finding
        fraction = min(finding.fraction, found.fraction * trust.factor) if charged else finding.fraction * trust.factor
        if fraction < finding.fraction:
            finding = Finding(fraction, finding.evidence, [trust.note()] + finding.missing)
    points = round(finding.fraction * max_points, 1)
    return CheckScore(check_id, title, points, max_points, finding.evidence,
                      finding.missing if points < max_points else [], why, follow_up)


def score_text(text: str, *, attempt: str = "<text>",
               rubric: DesignRubric | None = None, not_copied_from: frozenset[str] = frozenset()) -> ScoreReport:
    """``not_copied_from`` names kit texts (pasted.SOURCES) that ``text`` is the original of, not a copy."""
    rubric = rubric or load_design_rubric()
    kit_texts = pasted.originals(not_copied_from)
    own_text, copied = redaction.remove_sentences(text, kit_texts.is_copied)
    doc = parse(own_text)
    flaws = Flaws(wrong_answers.charges(doc), contradictions.find(doc),
                  concepts.unfenced_redispatch(doc))
    # A wrong answer costs its check's points and earns nothing anywhere else.
    own_text = redaction.remove_sentences(own_text, lambda s: any(c.covers(s) for c in flaws.wrong_answers))[0]
    doc = parse(own_text)
    # So does a wrong derivation when most are wrong; the arithmetic checks read it to say what it should have been.
    wrong_step = arithmetic.is_wrong_step_of_mostly_wrong(doc)
    believed = parse(redaction.remove_sentences(own_text, wrong_step)[0]) if wrong_step else doc
    criteria = []
    for criterion in rubric.criteria:
        checks = [_score_check(doc if k.id in ARITHMETIC_CHECKS else believed, flaws, k.id, k.title, k.points, k.why)
                  for k in criterion.checks]
        checks += [_score_check(doc if f.id in ARITHMETIC_CHECKS else believed, flaws, f.id,
                                f"Follow-up {f.number}: {f.topic}", f.points, f.probe, f.number)
                   for f in rubric.follow_ups_for(criterion.id)]
        criteria.append(CriterionScore(criterion.id, criterion.rank, criterion.title, criterion.points, checks))
    return ScoreReport(
        attempt=attempt,
        criteria=criteria,
        notice=" ".join(rubric.authority.split()),
        accuracy=accuracy_line(),
        max_total=rubric.total_points(),
        pasted=copied,
        credibility=flaws.credibility.note() if flaws.credibility.factor < 1 else "",
    )


def score_file(path: Path) -> ScoreReport:
    return score_text(path.read_text(encoding="utf-8"), attempt=str(path))
