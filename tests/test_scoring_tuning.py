"""The tuning half of the calibration set (rubric/calibration/SPLIT.md): bands fixed before any scoring.

These are the figures the scorer may be changed while looking at; the held-out half, scored once by
the lead, is what the total's "±N points" line reports. The floors below are regression guards: a
change that makes the tuning half worse fails here before anyone looks at the held-out half.
"""

from __future__ import annotations

import re

import pytest
import yaml

from d2kit.scoring.calibration import CALIBRATION_DIR, measure, score_half

TUNING = CALIBRATION_DIR / "tuning"
ATTEMPTS = yaml.safe_load((TUNING / "bands.yaml").read_text(encoding="utf-8"))["attempts"]


@pytest.fixture(scope="module")
def reports():
    return score_half(TUNING)


@pytest.fixture(scope="module")
def figures(reports):
    return measure(TUNING, reports=reports)


def _of_class(name: str) -> list[str]:
    return [attempt for attempt, entry in ATTEMPTS.items() if entry["class"] == name]


# Floors at what the scorer reached after the twenty-third change (rubric/calibration/SPLIT.md): 333 of 406 in band,
# mean error 4.9 (after the twenty-second: 303 of 374, 5.0; 332 of 406 and 5.0 once v23 and v24 were folded in);
# 348 of 422 and 4.9 once held-out v25 (one miss) was folded in; after the twenty-fourth: 348 of 422, 4.8 (349 but for
# the one attempt its (b)-rule cost the whole half, h18-07, under the lead's two-group rule: see SPLIT.md); 357 of 438
# and 5.0 once held-out v26 (seven misses) was folded in; after the twenty-fifth: 359 of 438, 4.9 (two (a)-rules, no
# (b)-rule, so no attempt is owed to the two-group rule).
MOST_MISSES = 79
MOST_MEAN_ERROR = 4.9  # the figure is rounded to one decimal


def test_the_tuning_half_ranks_and_lands_near_its_bands(figures):
    assert figures.attempts == len(ATTEMPTS) >= 30
    assert figures.spearman_rho >= 0.95, figures.spearman_rho
    assert figures.mean_error <= MOST_MEAN_ERROR, figures.mean_error
    misses = [(r.name, r.score, r.band) for r in figures.results if not r.in_band]
    assert figures.in_band >= figures.attempts - MOST_MISSES, misses


@pytest.mark.parametrize(("attempt_class", "low", "high"), [
    ("incoherent-keywords", 0, 30),
    ("incoherent-keyword-dense", 0, 30),
    ("incoherent-tables", 0, 30),
    ("keyword-salad", 0, 30),
    ("keyword-salad-contradictory", 0, 30),
    ("keyword-dense-wrong", 0, 30),
    ("pasted-prompt", 0, 10),
    ("prompt-paste", 0, 10),
    ("prompt-echo", 0, 10),
    ("excellent-plain", 75, 100),
    ("plain-words-excellent", 75, 100),
    ("strong-plain-vocabulary", 75, 100),
    ("name-dropping", 0, 30),
    ("buzzword-list", 0, 30),
])
def test_each_failure_class_lands_where_the_issue_says(attempt_class: str, low: float, high: float, figures):
    scores = {r.name: r.score for r in figures.results}
    assert _of_class(attempt_class), f"no tuning attempt of class {attempt_class}"
    for name in _of_class(attempt_class):
        assert low <= scores[name] <= high, (name, scores[name])


@pytest.mark.parametrize("name", sorted(ATTEMPTS))
def test_every_quote_is_on_the_line_it_names(name: str, reports):
    lines = (TUNING / name).read_text(encoding="utf-8").splitlines()
    report = reports[name]
    for check in (k for c in report.criteria for k in c.checks):
        assert check.points == 0 or check.evidence, f"{check.id}: points without evidence"
        for evidence in check.evidence:
            if evidence.line:
                quoted = set(re.findall(r"\w+", evidence.text.lower()))
                assert quoted & set(re.findall(r"\w+", lines[evidence.line - 1].lower())), (check.id, evidence)
