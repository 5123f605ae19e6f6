"""The reported total: the rubric's raw points, shrunk by how far this scorer ran high on attempts it never saw.

Every retired held-out set was scored once by the scorer of its time, on text that scorer had never read; those
342 (raw score, band) pairs (``history`` in rubric/calibration/results.json, sets v1-v21) are the only out-of-sample
evidence of how the scorer errs. On them it ran high: +4.2 points on average, +5.6 between 20 and 60 points, and
about 1 point low on the top tier (bands from 78 up), which it already ranked and placed well.

So the reported total is one monotone, piecewise-linear map of the raw points, applied once at the end: unchanged
at 0 and from ``UNCHANGED_FROM`` up; lowered by ``SHRINK_BY`` points at ``SHRINK_AT`` raw points; linear between.
``UNCHANGED_FROM`` is chosen, not fitted: it is the top tier's lowest band edge, so no top-tier total moves.
``SHRINK_AT`` and ``SHRINK_BY`` were fitted on the 342 pairs by :func:`fit` (most attempts in band, then least mean
error; plain grid search, no libraries). Leave-one-set-out over the 21 sets (fit on 20, score the 21st, summed):
218 of 342 in band against 210 for the raw points, mean error 7.59 against 8.05 (rubric/calibration/SPLIT.md,
"Held-out v21 folded into tuning": refitted then, 25/6.0 where v1-v20 gave 35/7.0, both 227 of 342 in band);
tests/test_scoring_calibrated_total.py refits both from results.json and checks them.
"""

from __future__ import annotations

from collections.abc import Iterable

SHRINK_AT = 25.0
SHRINK_BY = 6.0
UNCHANGED_FROM = 78.0
# Mean signed error of the raw total on the 342 history pairs: what the output tells the candidate.
HISTORY_MEAN_SIGNED_ERROR = 4.2

# (set, score, band low, band high): one retired held-out scoring.
Pair = tuple[str, float, float, float]


def calibrated(raw: float, shrink_at: float = SHRINK_AT, shrink_by: float = SHRINK_BY) -> float:
    """The reported total for ``raw`` rubric points (monotone while ``shrink_by`` < both knots' distances)."""
    if raw <= 0 or raw >= UNCHANGED_FROM:
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


def judge(pairs: Iterable[Pair], shrink_at: float = SHRINK_AT, shrink_by: float = SHRINK_BY,
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


def leave_one_set_out(pairs: list[Pair]) -> tuple[int, float, int, float]:
    """Fit on all sets but one, judge the one left out, summed over the sets: (in band, mean error) mapped, then raw."""
    in_band = error = 0.0
    for left_out in dict.fromkeys(p[0] for p in pairs):
        test = [p for p in pairs if p[0] == left_out]
        fold_in_band, fold_error = judge(test, *fit([p for p in pairs if p[0] != left_out]))
        in_band, error = in_band + fold_in_band, error + fold_error
    raw_in_band, raw_error = judge(pairs, mapped=False)
    return int(in_band), round(error / len(pairs), 2), raw_in_band, round(raw_error / len(pairs), 2)


def summary_line(results: dict | None) -> str:
    """The map, and what leaving each retired set out says it is worth: a line of ``d2kit score --calibration``."""
    said = (f"the raw rubric points, lowered by up to {SHRINK_BY:g} at {SHRINK_AT:g}, unchanged from "
            f"{UNCHANGED_FROM:g} up (d2kit/scoring/calibrated_total.py)")
    pairs = history_pairs(results or {})
    if not pairs:
        return said
    in_band, error, raw_in_band, raw_error = leave_one_set_out(pairs)
    sets = len({p[0] for p in pairs})
    return (f"{said}; fitted on {sets} retired held-out sets, leaving each out in turn: {in_band} of {len(pairs)} "
            f"in band, mean error {error:g} (raw points: {raw_in_band}, {raw_error:g})")
