"""Self-score: walk the rubric criterion by criterion *before* seeing the tool's score, then compare.

Scoring yourself unaided first is the point: it measures your judgement, not your ability to agree
with a number you have just been shown. The answer key comes after both.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from d2kit.scoring.rubric import Criterion, DesignRubric
from d2kit.scoring.scorer import ScoreReport

# (prompt, maximum) -> the points the candidate gives; injected so tests need no terminal.
Ask = Callable[[str, float], float]

# A self-score further than this share of a criterion's points from the tool's is worth a second look.
DISAGREEMENT_SHARE = 0.3


def _criterion_panel(rubric: DesignRubric, criterion: Criterion) -> Panel:
    lines = [Text(" ".join(criterion.measures.split())), Text(""),
             Text(f"Full: {' '.join(criterion.credit.full.split())}", style="green"),
             Text(f"Partial: {' '.join(criterion.credit.partial.split())}", style="yellow"),
             Text(f"None: {' '.join(criterion.credit.none.split())}", style="red"), Text("")]
    lines += [Text(f"  {k.points:g} — {k.title}: {' '.join(k.credit.full.split())}") for k in criterion.checks]
    lines += [Text(f"  {f.points:g} — follow-up {f.number} pre-empted ({f.topic}): "
                   f"{' '.join(f.credit.full.split())}") for f in rubric.follow_ups_for(criterion.id)]
    return Panel(Group(*lines), title=f"{criterion.rank}. {criterion.title} — {criterion.points:g} points",
                 border_style="cyan")


def ask_self_scores(rubric: DesignRubric, console: Console, ask: Ask) -> dict[str, float]:
    console.print(Panel("Score your attempt yourself first, against the rubric only. The tool's score and its "
                        "evidence come after.", border_style="magenta"))
    scores = {}
    for criterion in rubric.criteria:
        console.print(_criterion_panel(rubric, criterion))
        scores[criterion.id] = ask(f"Your points for '{criterion.title}' (0-{criterion.points:g})", criterion.points)
    return scores


def comparison_table(report: ScoreReport, self_scores: dict[str, float]) -> Table:
    table = Table(title="You vs the tool", title_justify="left")
    for column in ("Criterion", "You", "Tool", "Difference", ""):
        table.add_column(column)
    for criterion in report.criteria:
        mine = self_scores.get(criterion.id, 0.0)
        difference = mine - criterion.points
        note = ("look again at the evidence" if abs(difference) > DISAGREEMENT_SHARE * criterion.max_points
                else "")
        table.add_row(criterion.title, f"{mine:g}", f"{criterion.points:g}", f"{difference:+g}", note)
    total = round(sum(self_scores.values()), 1)
    # Against the raw points: the candidate adds up the same checks (the calibrated total is shown with the score).
    raw = report.raw_total
    table.add_row(Text("Total", style="bold"), f"{total:g}", f"{raw:g}", f"{total - raw:+g}", "")
    return table
