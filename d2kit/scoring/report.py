"""A score report three ways: rich tables for a person, markdown for a file, JSON for a machine."""

from __future__ import annotations

import json

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from d2kit.scoring.evidence import Evidence
from d2kit.scoring.scorer import CheckScore, ScoreReport

LEVEL_STYLE = {"full": "green", "partial": "yellow", "none": "red"}
PRE_EMPTED = {"full": "pre-empted", "partial": "partly", "none": "not pre-empted"}
# The credibility panel: several wrong questions, or one of the no-hire answers alone (credibility.py).
DISCOUNTED = "Wrong answers that discount the design"


def _where(evidence: Evidence) -> str:
    return f"L{evidence.line}" if evidence.line else "doc"


def _points(value: float) -> str:
    return f"{value:g}"


def _evidence_text(check: CheckScore, limit: int | None = None) -> str:
    shown = check.evidence if limit is None else check.evidence[:limit]
    lines = [f"{_where(e)}: {e.text}" for e in shown]
    if limit is not None and len(check.evidence) > limit:
        lines.append(f"… {len(check.evidence) - limit} more (see --md or --json)")
    return "\n".join(lines) or "—"


def _missing_text(check: CheckScore) -> str:
    if check.level == "full":
        return ""
    return "\n".join(f"• {m}" for m in check.missing) + f"\nWhy it matters: {check.why}"


def render_rich(report: ScoreReport, console: Console) -> None:
    console.print(Panel(Text(report.notice), title="First pass, not the verdict", border_style="cyan"))
    for criterion in report.criteria:
        table = Table(title=f"{criterion.rank}. {criterion.title} — {_points(criterion.points)} / "
                      f"{_points(criterion.max_points)}", title_justify="left", show_lines=True, expand=True)
        table.add_column("Check", ratio=2)
        table.add_column("Points", justify="right", no_wrap=True)
        table.add_column("Evidence (line: quote)", ratio=5)
        table.add_column("Missing, and why it matters", ratio=4)
        for check in criterion.checks:
            table.add_row(check.title, Text(f"{_points(check.points)}/{_points(check.max_points)}",
                                            style=LEVEL_STYLE[check.level]),
                          _evidence_text(check, limit=6), _missing_text(check))
        console.print(table)
    follow_ups = Table(title="Hidden follow-ups pre-empted in the document", title_justify="left", expand=True)
    for column in ("#", "Follow-up", "Pre-empted", "Points", "Lines"):
        follow_ups.add_column(column)
    for check in report.follow_ups():
        follow_ups.add_row(str(check.follow_up), check.title.split(": ", 1)[-1],
                           Text(PRE_EMPTED[check.level], style=LEVEL_STYLE[check.level]),
                           f"{_points(check.points)}/{_points(check.max_points)}",
                           ", ".join(_where(e) for e in check.evidence) or "—")
    console.print(follow_ups)
    if report.pasted:
        console.print(Panel("\n".join(f"{_where(e)}: {e.text}" for e in report.pasted),
                            title="Copied from the kit's own texts: not scored", border_style="red"))
    if report.credibility:
        console.print(Panel(report.credibility, title=DISCOUNTED, border_style="red"))
    parts = [Text(f"Total: {_points(report.total)} / {_points(report.max_total)}", style="bold"),
             *([Text(report.calibration)] if report.calibration else []), Text(report.accuracy, style="dim")]
    console.print(Panel(Group(*parts), title=report.attempt, border_style="bold"))


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def render_markdown(report: ScoreReport) -> str:
    out = [f"# Score: {report.attempt}", "", f"**Total: {_points(report.total)} / {_points(report.max_total)}** "
           f"({report.accuracy})", ""] + ([report.calibration[0].upper() + report.calibration[1:] + ".", ""]
                                          if report.calibration else []) + [f"> {report.notice}", ""]
    for criterion in report.criteria:
        out += [f"## {criterion.rank}. {criterion.title} — {_points(criterion.points)} / "
                f"{_points(criterion.max_points)}", ""]
        for check in criterion.checks:
            out += [f"### {check.title} — {_points(check.points)} / {_points(check.max_points)} ({check.level})", ""]
            out += [f"- {_where(e)}: {e.text}" for e in check.evidence] or ["- no evidence found"]
            if check.level != "full":
                out += ["", "Missing:", ""] + [f"- {m}" for m in check.missing] + ["", f"*Why it matters:* {check.why}"]
            out.append("")
    out += ["## Hidden follow-ups", "", "| # | Follow-up | Pre-empted | Points | Lines |", "|---|---|---|---|---|"]
    for check in report.follow_ups():
        lines = ", ".join(_where(e) for e in check.evidence) or "—"
        out.append(f"| {check.follow_up} | {_md_cell(check.title.split(': ', 1)[-1])} | {PRE_EMPTED[check.level]} | "
                   f"{_points(check.points)}/{_points(check.max_points)} | {lines} |")
    if report.credibility:
        out += ["", f"## {DISCOUNTED}", "", report.credibility]
    if report.pasted:
        out += ["", "## Copied from the kit's own texts: not scored", ""]
        out += [f"- {_where(e)}: {e.text}" for e in report.pasted]
    return "\n".join(out) + "\n"


def render_json(report: ScoreReport) -> str:
    return json.dumps(report.to_dict(), indent=2, ensure_ascii=False)
