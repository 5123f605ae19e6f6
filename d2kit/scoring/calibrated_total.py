"""The reported total: the rubric's raw points, shrunk by how far this scorer ran high on attempts it never saw.

Every retired held-out set was scored once by the scorer of its time, on text that scorer had never read; those
(raw score, band) pairs (``history`` in rubric/calibration/results.json, sets v1-v26, 422 pairs) are the only
out-of-sample evidence of how the scorer errs. The early scorers ran high (+6 to +10 points on several of v1-v12);
the scorer has been changed after every set, and the last four sets (v23-v26) ran −0.4 on average (low, not high).

So the reported total is one monotone, piecewise-linear map of the raw points, applied once at the end: unchanged
at 0 and from ``UNCHANGED_FROM`` up; lowered by ``SHRINK_BY`` points at ``SHRINK_AT`` raw points; linear between.
``UNCHANGED_FROM`` is chosen, not fitted: it is the top tier's lowest band edge, so no top-tier total moves.
``SHRINK_AT`` and ``SHRINK_BY`` are fitted by :func:`fit` (most attempts in band, then least mean error; plain grid
search, no libraries) on the ``RECENT_SETS`` most recent sets only, because old sets describe old scorers. Checked in
time order (:func:`forward_check`: fit on the sets before each set, judge that set; sets v5-v26, 352 pairs), fitting
on the last 4 put 242 in band (mean error 7.21), the last 2, 3, 5 or 6 sets 240, 240, 238, 237, every set before it
234 (7.25), and the raw points 232 (7.41): a small edge, chosen by the same rule as the fit (rubric/calibration/
SPLIT.md, "Held-out v22 folded into tuning"; re-run at each fold since). Fitted on v23-v26 the map
lowers nothing (``SHRINK_BY`` 0): the total is the raw points until a later set shows the scorer running high again.
tests/test_scoring_calibrated_total.py refits from results.json and checks the constants.
"""

from __future__ import annotations

from collections.abc import Iterable

RECENT_SETS = 4
SHRINK_AT = 10.0
SHRINK_BY = 0.0
UNCHANGED_FROM = 78.0
# Mean signed error of the raw total on the recent sets' pairs: what the output tells the candidate when the map moves.
HISTORY_MEAN_SIGNED_ERROR = -0.4

# (set, score, band low, band high): one retired held-out scoring.
Pair = tuple[str, float, float, float]


def calibrated(raw: float, shrink_at: float | None = None, shrink_by: float | None = None) -> float:
    """The reported total for ``raw`` rubric points (monotone while ``shrink_by`` < both knots' distances); the
    committed parameters unless others are given."""
    shrink_at = SHRINK_AT if shrink_at is None else shrink_at
    shrink_by = SHRINK_BY if shrink_by is None else shrink_by
    if raw <= 0 or raw >= UNCHANGED_FROM or shrink_by == 0:
        return raw
    if raw < shrink_at:
        return round(raw - shrink_by * raw / shrink_at, 1)
    return round(raw - shrink_by * (UNCHANGED_FROM - raw) / (UNCHANGED_FROM - shrink_at), 1)


def explanation(raw: float) -> str:
    """How the shown total came from the points the candidate can add up, or "" when it did not move."""
    total = calibrated(raw)
    if total == raw:
        return ""
    return (f"calibrated from {raw:g} raw rubric points: on attempts it had never seen this scorer scored "
            f"{HISTORY_MEAN_SIGNED_ERROR:g} points high on average, so totals under {UNCHANGED_FROM:g} are lowered "
            f"(by up to {SHRINK_BY:g} at {SHRINK_AT:g})")


def history_pairs(results: dict) -> list[Pair]:
    """Every retired held-out set's one scoring, from results.json, in raw points (the map is fitted on raw points;
    sets retired before the map existed recorded only ``score``, which was raw then)."""
    return [(retired["set"], r.get("raw", r["score"]), *r["band"]) for retired in results.get("history", [])
            for r in retired["halves"]["heldout"].get("results", [])]


def judge(pairs: Iterable[Pair], shrink_at: float | None = None, shrink_by: float | None = None,
          mapped: bool = True) -> tuple[int, float]:
    """(attempts in band, summed absolute error against band midpoints) with the map applied, or without."""
    in_band, error = 0, 0.0
    for _, score, low, high in pairs:
        total = calibrated(score, shrink_at, shrink_by) if mapped else score
        in_band += low <= total <= high
        error += abs(total - (low + high) / 2)
    return in_band, error


def fit(pairs: list[Pair]) -> tuple[float, float]:
    """(shrink_at, shrink_by) with the most pairs in band, then the least error; 5-point knots, half-point shrinks."""
    grid = [(float(at), by / 2) for at in range(10, int(UNCHANGED_FROM) - 4, 5) for by in range(0, 41)
            if by / 2 < min(at, UNCHANGED_FROM - at)]

    def worse(params: tuple[float, float]) -> tuple[int, float]:
        in_band, error = judge(pairs, *params)
        return -in_band, round(error, 6)
    return min(grid, key=worse)


def _set_names(pairs: list[Pair]) -> list[str]:
    """The sets, in the order they were retired (history keeps that order)."""
    return list(dict.fromkeys(p[0] for p in pairs))


def recent(pairs: list[Pair], sets: int = RECENT_SETS) -> list[Pair]:
    """The pairs of the ``sets`` most recently retired sets."""
    names = _set_names(pairs)[-sets:]
    return [p for p in pairs if p[0] in names]


def forward_check(pairs: list[Pair], window: int | None = RECENT_SETS,
                  first: int = RECENT_SETS) -> tuple[int, float, int, float, int]:
    """In time order, from the ``first``-th set on: fit on the ``window`` sets before each set (all before it when
    None) and judge that set, summed: (in band, mean error) mapped, then raw, and how many pairs were judged."""
    names = _set_names(pairs)
    in_band = raw_in_band = judged = 0
    error = raw_error = 0.0
    for i in range(first, len(names)):
        before = [p for p in pairs if p[0] in names[:i]]
        test = [p for p in pairs if p[0] == names[i]]
        fold_in_band, fold_error = judge(test, *fit(before if window is None else recent(before, window)))
        fold_raw_in_band, fold_raw_error = judge(test, mapped=False)
        in_band, error = in_band + fold_in_band, error + fold_error
        raw_in_band, raw_error, judged = raw_in_band + fold_raw_in_band, raw_error + fold_raw_error, judged + len(test)
    if not judged:
        return 0, 0.0, 0, 0.0, 0
    return in_band, round(error / judged, 2), raw_in_band, round(raw_error / judged, 2), judged


def summary_line(results: dict | None) -> str:
    """The map, and what fitting it in time order says it is worth: a line of ``d2kit score --calibration``."""
    said = (f"the raw rubric points, lowered by up to {SHRINK_BY:g} at {SHRINK_AT:g}, unchanged from "
            f"{UNCHANGED_FROM:g} up" if SHRINK_BY else "the raw rubric points (the map lowers nothing)")
    said += f"; fitted on the {RECENT_SETS} most recent retired held-out sets (d2kit/scoring/calibrated_total.py)"
    pairs = history_pairs(results or {})
    in_band, error, raw_in_band, raw_error, judged = forward_check(pairs)
    if not judged:
        return said
    return (f"{said}; checked in time order (fitted on the {RECENT_SETS} sets before each set, judged on it): "
            f"{in_band} of {judged} in band, mean error {error:g} (raw points: {raw_in_band}, {raw_error:g})")
