"""How right the scorer is on calibration attempts whose bands were fixed before anything was scored.

Each half of rubric/calibration/ (tuning/, heldout/) holds attempts and a bands.yaml. For a half we
report the attempts in band, the Spearman rank correlation with the band midpoints, and the mean and
worst absolute error against those midpoints; for the held-out half also how far apart the same content scored
in five layouts (layouts.py). ``--record`` writes the figures to results.json, which the rubric page renders and
the score report reads for its "±N points" line.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from d2kit.scoring import calibrated_total, layouts
from d2kit.scoring.rubric import RUBRIC_DIR

CALIBRATION_DIR = RUBRIC_DIR / "calibration"
HALVES = ("tuning", "heldout")
HALF_TITLES = {"tuning": "tuning", "heldout": "held-out"}
RESULTS_PATH = CALIBRATION_DIR / "results.json"


@dataclass(frozen=True)
class AttemptResult:
    name: str
    score: float  # the reported (calibrated) total
    band: tuple[float, float]
    raw: float  # the raw rubric points it came from: what calibrated_total's map is refitted on once retired

    @property
    def midpoint(self) -> float:
        return (self.band[0] + self.band[1]) / 2

    @property
    def in_band(self) -> bool:
        return self.band[0] <= self.score <= self.band[1]

    @property
    def error(self) -> float:
        return abs(self.score - self.midpoint)


@dataclass(frozen=True)
class HalfFigures:
    half: str
    attempts: int
    in_band: int
    spearman_rho: float
    mean_error: float
    worst_error: float
    results: tuple[AttemptResult, ...]
    layout_spread: layouts.LayoutSpread | None = None  # measured on the held-out half only (tuning: a test does it)

    def summary(self) -> dict:
        figures = asdict(self)
        figures["results"] = [{"name": r.name, "score": r.score, "band": list(r.band), "raw": r.raw}
                              for r in self.results]
        return figures


def _ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing the mean of the ranks they span."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(first: list[float], second: list[float]) -> float:
    """Pearson correlation of the ranks; 0 when either side has no spread."""
    a, b = _ranks(first), _ranks(second)
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    covariance = sum((x - mean_a) * (y - mean_b) for x, y in zip(a, b, strict=True))
    spread = (sum((x - mean_a) ** 2 for x in a) * sum((y - mean_b) ** 2 for y in b)) ** 0.5
    return covariance / spread if spread else 0.0


def load_bands(half_dir: Path) -> dict[str, tuple[float, float]]:
    attempts = yaml.safe_load((half_dir / "bands.yaml").read_text(encoding="utf-8")).get("attempts") or {}
    return {name: tuple(entry["band"]) for name, entry in attempts.items()}


def score_half(half_dir: Path) -> dict:
    """Each attempt's report, by file name."""
    from d2kit.scoring.scorer import score_file  # the scorer reads this module's results for its report

    return {name: score_file(half_dir / name) for name in sorted(load_bands(half_dir))}


def measure(half_dir: Path, with_layouts: bool = False, reports: dict | None = None) -> HalfFigures:
    """The half's figures; ``reports`` (from :func:`score_half`) saves scoring it again."""
    bands = sorted(load_bands(half_dir).items())
    reports = reports or score_half(half_dir)
    results = tuple(AttemptResult(name, reports[name].total, band, reports[name].raw_total) for name, band in bands)
    errors = [r.error for r in results]
    return HalfFigures(
        half=half_dir.name,
        attempts=len(results),
        in_band=sum(r.in_band for r in results),
        spearman_rho=round(spearman([r.score for r in results], [r.midpoint for r in results]), 3),
        mean_error=round(sum(errors) / len(errors), 1),
        worst_error=round(max(errors), 1),
        results=results,
        layout_spread=layouts.spread([(half_dir / name).read_text(encoding="utf-8") for name, _ in bands])
        if with_layouts else None,
    )


def present_halves(root: Path | None = None) -> dict[str, Path]:
    """The halves whose bands.yaml lists at least one attempt (an empty one is a placeholder for a new set)."""
    root = root or CALIBRATION_DIR
    return {half: root / half for half in HALVES
            if (root / half / "bands.yaml").is_file() and load_bands(root / half)}


def measure_all(root: Path | None = None) -> dict[str, HalfFigures | None]:
    present = present_halves(root)
    return {half: measure(present[half], with_layouts=half == "heldout") if half in present else None
            for half in HALVES}


def commit() -> str | None:
    """The commit checked out here (HEAD), or None outside a git checkout."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=CALIBRATION_DIR, capture_output=True, text=True,
                              check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def record(figures: dict[str, HalfFigures | None], path: Path | None = None) -> Path:
    """Write the figures, keeping the ``history`` of retired held-out sets that were recorded before."""
    path = path or RESULTS_PATH
    payload = {
        "commit": commit(),
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "halves": {half: f.summary() if f else None for half, f in figures.items()},
    }
    if history := (load_results(path) or {}).get("history"):
        payload["history"] = history
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return path


def load_results(path: Path | None = None) -> dict | None:
    path = path or RESULTS_PATH
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def accuracy_line(path: Path | None = None) -> str:
    """What the total is worth, from the recorded held-out figures: never from the tuning half."""
    results = load_results(path)
    heldout = (results or {}).get("halves", {}).get("heldout")
    if not heldout:
        return "held-out accuracy not yet recorded"
    return (f"±{heldout['mean_error']:g} points on attempts it was not tuned on "
            f"(worst {heldout['worst_error']:g}, {heldout['in_band']} of {heldout['attempts']} in band)")


def figures_lines(figures: dict[str, HalfFigures | None]) -> list[str]:
    lines = []
    for half, f in figures.items():
        title = HALF_TITLES[half]
        if f is None:
            lines.append(f"{title}: no attempts yet")
            continue
        lines.append(f"{title}: {f.in_band} of {f.attempts} in band, Spearman ρ = {f.spearman_rho:.2f}, "
                     f"mean error {f.mean_error:g}, worst error {f.worst_error:g} (points against band midpoints)")
        if f.layout_spread:
            said = _spread_said(asdict(f.layout_spread))
            lines.append(f"{title}, same content in {len(layouts.LAYOUTS)} layouts: {said}")
    return lines + [f"reported total: {calibrated_total.summary_line(load_results())}"]


def _spread_said(spread: dict) -> str:
    return (f"{spread['within_tolerance']} of {spread['attempts']} attempts with lists within {spread['tolerance']} "
            f"points, worst spread {spread['worst_spread']:g}")


def render_results_markdown(path: Path | None = None) -> str:
    """The rubric page's accuracy section, rendered from results.json (never typed by hand)."""
    results = load_results(path)
    out = ["## How accurate the scorer is", ""]
    if results is None:
        return "\n".join(out + ["Not yet recorded (`d2kit score --calibration --record`).", ""])
    out += [f"Recorded {results['recorded_at']} at commit `{(results.get('commit') or 'unknown')[:10]}` by "
            "`d2kit score --calibration --record`. Bands were fixed before anything was scored; the held-out "
            "half is never tuned against.", "",
            "| Half | Attempts | In band | Spearman ρ | Mean error | Worst error |", "|---|---|---|---|---|---|"]
    for half in HALVES:
        f = results["halves"].get(half)
        if f is None:
            out.append(f"| {HALF_TITLES[half]} | no attempts yet | | | | |")
        else:
            out.append(f"| {HALF_TITLES[half]} | {f['attempts']} | {f['in_band']} | {f['spearman_rho']:.2f} | "
                       f"{f['mean_error']:g} | {f['worst_error']:g} |")
    spread = (results["halves"].get("heldout") or {}).get("layout_spread")
    if spread:
        out += ["", f"The same held-out content in {len(layouts.LAYOUTS)} layouts ({', '.join(layouts.LAYOUTS)}; "
                "each list item rewritten mechanically, the words unchanged): "
                f"{_spread_said(spread)}."]
    out += ["", f"The reported total is {calibrated_total.summary_line(results)}."]
    if results.get("history"):
        out += ["", "Retired held-out sets, each scored once and then folded into tuning "
                "(`rubric/calibration/SPLIT.md` says why):", "",
                "| Set | Scored | Commit | Attempts | In band | Spearman ρ | Mean error | Worst error |",
                "|---|---|---|---|---|---|---|---|"]
        for retired in results["history"]:
            f = retired["halves"]["heldout"]
            out.append(f"| {retired['set']} | {retired['recorded_at'][:10]} | `{retired['commit'][:10]}` | "
                       f"{f['attempts']} | {f['in_band']} | {f['spearman_rho']:.2f} | {f['mean_error']:g} | "
                       f"{f['worst_error']:g} |")
    return "\n".join(out) + "\n"
