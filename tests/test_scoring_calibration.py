"""The calibration set: each attempt lands in its band, tiers rank in order, evidence points at real lines."""

from __future__ import annotations

import pytest
import yaml

from d2kit.scoring.prose import words
from d2kit.scoring.rubric import RUBRIC_DIR
from d2kit.scoring.scorer import score_file

CALIBRATION = RUBRIC_DIR / "calibration"
BANDS = yaml.safe_load((CALIBRATION / "bands.yaml").read_text(encoding="utf-8"))
ATTEMPTS = BANDS["attempts"]


@pytest.fixture(scope="module")
def scores() -> dict[str, float]:
    return {name: score_file(CALIBRATION / name).total for name in ATTEMPTS}


def test_every_calibration_attempt_has_a_band():
    assert sorted(p.name for p in CALIBRATION.glob("*.md") if p.name != "SPLIT.md") == sorted(ATTEMPTS)
    assert len(ATTEMPTS) >= 6
    assert {a["tier"] for a in ATTEMPTS.values()} == set(BANDS["tiers"])


@pytest.mark.parametrize("name", sorted(ATTEMPTS))
def test_attempt_scores_inside_its_band(name: str, scores: dict[str, float]):
    low, high = ATTEMPTS[name]["band"]
    assert low <= scores[name] <= high, f"{name}: {scores[name]} not in [{low}, {high}]"


def test_tiers_rank_in_order(scores: dict[str, float]):
    tiers = BANDS["tiers"]
    for better, worse in zip(tiers, tiers[1:], strict=False):
        lowest_better = min(scores[n] for n, a in ATTEMPTS.items() if a["tier"] == better)
        highest_worse = max(scores[n] for n, a in ATTEMPTS.items() if a["tier"] == worse)
        assert lowest_better > highest_worse, (better, worse, scores)


def test_excellent_design_reaches_90():
    assert score_file(CALIBRATION / "excellent.md").total >= 90


@pytest.mark.parametrize("name", sorted(ATTEMPTS))
def test_every_point_has_evidence_quoting_the_line_it_names(name: str):
    lines = (CALIBRATION / name).read_text(encoding="utf-8").splitlines()
    report = score_file(CALIBRATION / name)
    for criterion in report.criteria:
        for check in criterion.checks:
            assert check.points == 0 or check.evidence, f"{check.id}: points without evidence"
            for evidence in check.evidence:
                if evidence.line == 0:  # a whole-document measure
                    continue
                quoted = {w.lower() for w in words(evidence.text)}
                on_line = {w.lower() for w in words(lines[evidence.line - 1])}
                assert quoted & on_line, (check.id, evidence)


def test_weak_attempts_fail_for_their_own_reason():
    def check(name: str, check_id: str) -> float:
        report = score_file(CALIBRATION / name)
        return next(k.points for c in report.criteria for k in c.checks if k.id == check_id)

    assert check("weak-it-retries.md", "failure_triads") == 0
    assert check("weak-no-numbers.md", "calculations") == 0
    assert check("weak-no-numbers.md", "assumptions") == 0
    assert check("weak-name-dropper.md", "rejections") <= 2
    assert check("weak-rest-surface.md", "time_on_hard_parts") == 0
    assert check("excellent.md", "failure_triads") >= 15

