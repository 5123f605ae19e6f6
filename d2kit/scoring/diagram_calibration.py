"""Score a half of the diagram calibration set against the bands its author fixed before any scoring.

``python -m d2kit.scoring.diagram_calibration tuning`` prints the tuning half (as often as wanted).
``python -m d2kit.scoring.diagram_calibration heldout --record`` scores the held-out half and writes
``rubric/calibration/diagrams/heldout-results.yaml``: it refuses to run twice, because a held-out half that
is scored, looked at and scored again is a tuning half.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime

import yaml

from d2kit.scoring.calibration_split import DIAGRAMS_DIR, SEED
from d2kit.scoring.diagram import DiagramGrade, grade_file
from d2kit.scoring.document import parse

RESULTS = DIAGRAMS_DIR / "heldout-results.yaml"


@dataclass(frozen=True)
class Outcome:
    name: str
    low: float
    high: float
    grade: DiagramGrade
    expect_missing: tuple[str, ...]

    @property
    def in_band(self) -> bool:
        return self.low <= self.grade.points <= self.high

    @property
    def error(self) -> float:
        """Distance from the band's midpoint."""
        return abs(self.grade.points - (self.low + self.high) / 2)

    @property
    def unexpected(self) -> list[str]:
        """Checks the author expected missing that were credited, and the reverse."""
        missing = {c.id for c in self.grade.checks if c.level == "none"} if self.grade.checks else {"all"}
        if "all" in missing:
            return []
        credited_wrongly = [f"credited {k}" for k in self.expect_missing if k not in missing]
        return credited_wrongly + [f"missed {k}" for k in sorted(missing - set(self.expect_missing))]


def score_half(half: str) -> list[Outcome]:
    directory = DIAGRAMS_DIR / half
    bands = yaml.safe_load((directory / "bands.yaml").read_text(encoding="utf-8"))["diagrams"]
    outcomes = []
    for name, band in bands.items():
        scene = directory / name
        section_5 = scene.with_name(name.removesuffix(".excalidraw") + ".section5.md")
        doc = parse(section_5.read_text(encoding="utf-8")) if section_5.exists() else None
        low, high = band["band"]
        outcomes.append(Outcome(name, low, high, grade_file(scene, doc), tuple(band.get("expect_missing") or ())))
    return outcomes


def summary(outcomes: list[Outcome]) -> dict:
    return {
        "in_band": sum(o.in_band for o in outcomes),
        "diagrams": len(outcomes),
        "mean_error": round(sum(o.error for o in outcomes) / len(outcomes), 2),
        "worst_error": round(max(o.error for o in outcomes), 2),
        "per_diagram": [{"diagram": o.name, "band": [o.low, o.high], "score": o.grade.points, "in_band": o.in_band,
                         "error": round(o.error, 2), "checks_unlike_the_author": o.unexpected} for o in outcomes],
    }


def record_heldout() -> dict:
    if RESULTS.exists():
        raise SystemExit(f"{RESULTS} exists: the held-out half is scored once")
    result = {"half": "heldout", "seed": SEED, "scored_at": datetime.now(UTC).isoformat(timespec="seconds"),
              **summary(score_half("heldout"))}
    RESULTS.write_text(yaml.safe_dump(result, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return result


def load_results() -> dict | None:
    return yaml.safe_load(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else None


def render_results_markdown() -> str:
    """The held-out result for the docs, rendered from the results file (never typed)."""
    result = load_results()
    out = ["### How the diagram grader was calibrated", "",
           "Sixteen drawings were written apart from the grader, by someone who never read its code, each with a "
           "band fixed before scoring. They were split once with a fixed seed into eight to tune on and eight "
           "held out; the held-out half was scored once, after the last change to the grader.", ""]
    if result is None:
        return "\n".join(out + ["*The held-out half has not been scored yet.*", ""])
    out += [f"**Held out: {result['in_band']} of {result['diagrams']} in band**, mean distance from the band's "
            f"midpoint {result['mean_error']:g}, worst {result['worst_error']:g} (seed {result['seed']}, scored "
            f"{result['scored_at']}).", "", "| Drawing | Band | Score | In band | Checks unlike the author's |",
            "|---|---|---|---|---|"]
    for row in result["per_diagram"]:
        low, high = row["band"]
        out.append(f"| {row['diagram']} | {low:g}–{high:g} | {row['score']:g} | {'yes' if row['in_band'] else 'no'} "
                   f"| {', '.join(row['checks_unlike_the_author']) or '—'} |")
    return "\n".join(out) + "\n"


def _print(result: dict) -> None:
    for row in result["per_diagram"]:
        mark = "ok " if row["in_band"] else "OUT"
        unlike = "; ".join(row["checks_unlike_the_author"])
        print(f"{mark} {row['score']:5g}  band {row['band']}  {row['diagram']}  {unlike}")
    print(f"in band {result['in_band']}/{result['diagrams']}, mean error {result['mean_error']}, "
          f"worst {result['worst_error']}")


if __name__ == "__main__":
    half = sys.argv[1] if len(sys.argv) > 1 else "tuning"
    if half == "heldout" and "--record" not in sys.argv:
        raise SystemExit("the held-out half is scored only with --record, once")
    _print(record_heldout() if half == "heldout" else summary(score_half(half)))
