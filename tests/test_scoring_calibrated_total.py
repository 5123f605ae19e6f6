"""The reported total's one map (d2kit/scoring/calibrated_total.py): fitted on retired held-out scorings only."""

from __future__ import annotations

import json

from d2kit.scoring import calibrated_total
from d2kit.scoring.calibration import RESULTS_PATH
from d2kit.scoring.report import render_markdown
from d2kit.scoring.scorer import score_text

PAIRS = calibrated_total.history_pairs(json.loads(RESULTS_PATH.read_text(encoding="utf-8")))


def test_the_committed_parameters_are_what_the_recent_history_fits():
    assert len(PAIRS) >= 422
    recent = calibrated_total.recent(PAIRS)
    assert len({name for name, *_ in recent}) == calibrated_total.RECENT_SETS
    assert calibrated_total.fit(recent) == (calibrated_total.SHRINK_AT, calibrated_total.SHRINK_BY)
    signed = sum(score - (low + high) / 2 for _, score, low, high in recent) / len(recent)
    assert round(signed, 1) == calibrated_total.HISTORY_MEAN_SIGNED_ERROR


def test_fitted_in_time_order_the_recent_window_beats_the_raw_points_and_the_whole_history():
    in_band, error, raw_in_band, raw_error, judged = calibrated_total.forward_check(PAIRS)
    assert judged >= 352 and in_band > raw_in_band and error < raw_error, (in_band, error, raw_in_band, raw_error)
    assert in_band >= calibrated_total.forward_check(PAIRS, window=None)[0]


def test_the_map_is_monotone_and_leaves_the_top_tier_and_zero_alone():
    raw = [x / 2 for x in range(0, 201)]
    for at, by in ((calibrated_total.SHRINK_AT, calibrated_total.SHRINK_BY), (35.0, 7.0), (25.0, 6.0)):
        totals = [calibrated_total.calibrated(x, at, by) for x in raw]
        assert totals == sorted(totals)
        assert all(calibrated_total.calibrated(x, at, by) == x for x in (0, 78, 85.5, 100))
        assert calibrated_total.calibrated(at, at, by) == at - by
    assert calibrated_total.calibrated(60, 35.0, 7.0) < 60


def test_the_report_shows_the_total_and_the_raw_points_it_came_from(monkeypatch):
    # The committed map may lower nothing (it is fitted on the recent sets); a map that moves is set here.
    monkeypatch.setattr(calibrated_total, "SHRINK_AT", 35.0)
    monkeypatch.setattr(calibrated_total, "SHRINK_BY", 7.0)
    report = score_text("## 1. Requirements\n\nJobs run at least once; the worker holds a lease the database "
                        "renews, and a fencing token the store checks rejects a stale writer.\n")
    assert report.raw_total == round(sum(c.points for c in report.criteria), 1) > 0
    assert report.total == calibrated_total.calibrated(report.raw_total) < report.raw_total
    said = f"calibrated from {report.raw_total:g} raw rubric points"
    assert said in report.calibration and said in render_markdown(report).lower()
    assert report.to_dict()["raw_total"] == report.raw_total


def test_a_map_that_lowers_nothing_leaves_the_total_and_says_nothing(monkeypatch):
    monkeypatch.setattr(calibrated_total, "SHRINK_BY", 0.0)
    assert calibrated_total.calibrated(50.0) == 50.0 and calibrated_total.explanation(50.0) == ""


def test_the_map_is_fitted_on_raw_points_where_a_set_recorded_them():
    # A set scored through the map records its shown total as ``score``; fitting on that would shrink twice.
    before = {"score": 40.0, "band": [30, 46]}
    through = {"score": 33.0, "raw": 40.0, "band": [30, 46]}
    results = {"history": [{"set": name, "halves": {"heldout": {"results": [result]}}}
                           for name, result in (("before the map", before), ("through the map", through))]}
    assert calibrated_total.history_pairs(results) == [("before the map", 40.0, 30, 46),
                                                       ("through the map", 40.0, 30, 46)]
