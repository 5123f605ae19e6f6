"""Every scored attempt, one JSON line each (document, diagram and, when practised, the process), and a PNG
of progress over attempts on the document and the diagram.

Stored in ``$D2KIT_HOME/history.jsonl`` (default ``~/.d2kit``), so a candidate's history survives
re-cloning the kit and tests can point it at a temporary directory.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from d2kit.scoring.process import Span
from d2kit.scoring.round_grade import RoundGrade


def home() -> Path:
    return Path(os.environ.get("D2KIT_HOME") or Path.home() / ".d2kit")


def history_path() -> Path:
    return home() / "history.jsonl"


@dataclass(frozen=True)
class HistoryRecord:
    recorded_at: str  # ISO 8601, UTC
    attempt: str
    sha256: str  # of the attempt's text: re-scoring the same file is visible as such
    mode: str  # "score" | "self" | "practice"
    duration_seconds: float | None  # practice mode only
    total: float
    max_total: float
    criteria: dict[str, dict[str, float]]  # id -> {"points", "max_points"}
    follow_ups_pre_empted: list[int]
    self_scores: dict[str, float] | None = None  # id -> points the candidate gave themselves
    # Added with the diagram grade and the round record; absent from older lines.
    diagram_points: float | None = None
    diagram_max: float | None = None
    diagram_missing: list[str] | None = None  # check ids not earned
    process_observed: bool = False
    process_checks: dict[str, str] | None = None  # Part 1 check id -> level
    spans: list[dict] | None = None  # the phase timeline: [{"row", "start", "end"}], budget minutes
    ended_minute: float | None = None

    @property
    def self_total(self) -> float | None:
        return round(sum(self.self_scores.values()), 1) if self.self_scores else None

    def timeline_spans(self) -> list[Span]:
        return [Span(**span) for span in self.spans or []]


def record(grade: RoundGrade, *, text: str, mode: str, duration_seconds: float | None = None,
           self_scores: dict[str, float] | None = None) -> HistoryRecord:
    report, process = grade.document, grade.process
    entry = HistoryRecord(
        recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        attempt=report.attempt,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        mode=mode,
        duration_seconds=round(duration_seconds, 1) if duration_seconds is not None else None,
        total=report.total,
        max_total=report.max_total,
        criteria={c.id: {"points": c.points, "max_points": c.max_points} for c in report.criteria},
        follow_ups_pre_empted=[k.follow_up for k in report.follow_ups() if k.level == "full" and k.follow_up],
        self_scores=self_scores,
        diagram_points=grade.diagram.points,
        diagram_max=grade.diagram.max_points,
        diagram_missing=[c.id for c in grade.diagram.checks if c.level != "full"],
        process_observed=process.observed,
        process_checks={c.id: c.level for c in process.checks} if process.observed else None,
        spans=[asdict(span) for span in process.spans] if process.observed else None,
        ended_minute=process.ended_minute,
    )
    path = history_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(asdict(entry)) + "\n")
    return entry


def load() -> list[HistoryRecord]:
    path = history_path()
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [HistoryRecord(**json.loads(line)) for line in lines if line.strip()]


def plot(records: list[HistoryRecord], path: Path) -> Path:
    """Total (and self-score) per attempt on top; each criterion as a share of its points below."""
    import matplotlib

    matplotlib.use("Agg")  # no display: render straight to a file
    import matplotlib.pyplot as plt

    attempts = list(range(1, len(records) + 1))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    top.plot(attempts, [r.total for r in records], marker="o", linewidth=2, label="document (of 100)")
    diagram = [(i, 100 * r.diagram_points / r.diagram_max) for i, r in zip(attempts, records, strict=True)
               if r.diagram_points is not None and r.diagram_max]
    if diagram:
        top.plot(*zip(*diagram, strict=True), marker="D", linewidth=2, color="tab:green",
                 label="diagram (% of its points)")
    self_points = [(i, r.self_total) for i, r in zip(attempts, records, strict=True) if r.self_total is not None]
    if self_points:
        top.scatter(*zip(*self_points, strict=True), marker="s", color="tab:orange", label="your self-score", zorder=3)
    top.set_ylim(0, 100)
    top.set_ylabel("score, %")
    top.set_title("D2 attempts: progress")
    top.grid(alpha=0.3)
    top.legend(loc="lower right")
    for criterion_id in records[0].criteria if records else []:
        shares = [100 * r.criteria[criterion_id]["points"] / r.criteria[criterion_id]["max_points"]
                  if criterion_id in r.criteria else None for r in records]
        bottom.plot(attempts, shares, marker=".", label=criterion_id.replace("_", " "))
    bottom.set_ylim(0, 105)
    bottom.set_ylabel("% of the criterion's points")
    bottom.set_xlabel("attempt")
    bottom.set_xticks(attempts)
    bottom.grid(alpha=0.3)
    bottom.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
