"""The rest of a round's grade, beside the document's 100: the diagram (Part 3) and the process (Part 1).

Rich for a person, markdown for a file; ``to_dict`` of each part is the JSON. Kept apart from the
document's report so each part renders from its own result.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from d2kit.scoring.diagram import DiagramCheckScore, DiagramGrade
from d2kit.scoring.phase_timeline import picture
from d2kit.scoring.process import ProcessObservation

LEVEL_STYLE = {"full": "green", "partial": "yellow", "none": "red"}
EVIDENCE_SHOWN = 4


def _points(value: float) -> str:
    return f"{value:g}"


def _evidence(check: DiagramCheckScore) -> str:
    shown = check.evidence[:EVIDENCE_SHOWN]
    more = len(check.evidence) - len(shown)
    return "\n".join(shown + ([f"… {more} more (see --json)"] if more > 0 else [])) or "—"


def _missing(check: DiagramCheckScore) -> str:
    if check.level == "full":
        return ""
    return "\n".join(f"• {m}" for m in check.missing) + f"\nWhy it matters: {check.why}"


def render_diagram_rich(grade: DiagramGrade, console: Console) -> None:
    title = f"Diagram (Part 3) — {_points(grade.points)} / {_points(grade.max_points)}: {grade.band}"
    if grade.problem:
        console.print(Panel(Text(f"{grade.scene}: {grade.problem}. Nothing on it can be graded."),
                            title=title, border_style="red"))
        return
    table = Table(title=title, title_justify="left", show_lines=True, expand=True)
    table.add_column("Check", ratio=2)
    table.add_column("Points", justify="right", no_wrap=True)
    table.add_column("On the drawing (labels as drawn)", ratio=5)
    table.add_column("Missing, and why it matters", ratio=4)
    for check in grade.checks:
        table.add_row(check.id.replace("_", " "), Text(f"{_points(check.points)}/{_points(check.max_points)}",
                                                        style=LEVEL_STYLE[check.level]),
                      _evidence(check), _missing(check))
    console.print(table)
    notes = [Text(f"Read as: {remark}", style="dim") for remark in grade.remarks]
    if grade.export is not None:
        notes.append(Text(f"Export {grade.export.path}: {grade.export.verdict}",
                          style="green" if grade.export.ok else "red"))
    if notes:
        console.print(Group(*notes))


def render_process_rich(observation: ProcessObservation, console: Console) -> None:
    if not observation.observed:
        console.print(Panel(Text(observation.note), title="Process (Part 1): not observed", border_style="yellow"))
        return
    table = Table(title="Process (Part 1), from the round record", title_justify="left", expand=True)
    table.add_column("Check", ratio=2)
    table.add_column("Level", no_wrap=True)
    table.add_column("Observed", ratio=6)
    for check in observation.checks:
        table.add_row(check.title, Text(check.level, style=LEVEL_STYLE[check.level]), check.observed)
    console.print(table)
    facts = [f"Section 9 {'existed' if observation.section_9_before_time_up else 'did not exist'} when time was up."]
    if observation.words_after_time_up:
        added = ", ".join(f"section {n}: {w}" for n, w in observation.words_after_time_up.items())
        facts.append(f"Words written after time, shown and not credited: {added}.")
    if observation.note:
        facts.append(observation.note[0].upper() + observation.note[1:] + ".")
    console.print(Panel(Group(picture(observation.spans, observation.ended_minute), Text(" ".join(facts))),
                        title="Phase timeline: the seed's budget against what you did", border_style="cyan"))


def render_markdown(grade: DiagramGrade | None, observation: ProcessObservation) -> str:
    out = []
    if grade is not None:
        out += [f"## Diagram (Part 3) — {_points(grade.points)} / {_points(grade.max_points)}", "", f"*{grade.band}*",
                ""]
        if grade.problem:
            out += [f"{grade.scene}: {grade.problem}.", ""]
        for check in grade.checks:
            out += [f"### {check.id.replace('_', ' ')} — {_points(check.points)} / {_points(check.max_points)}", ""]
            out += [f"- {e}" for e in check.evidence] or ["- nothing on the drawing"]
            if check.level != "full":
                out += ["", "Missing:", ""] + [f"- {m}" for m in check.missing] + ["", f"*Why it matters:* {check.why}"]
            out.append("")
        if grade.export is not None:
            out += [f"Export {grade.export.path}: {grade.export.verdict}", ""]
    out += ["## Process (Part 1)", ""]
    if not observation.observed:
        return "\n".join(out + [observation.note, ""])
    out += ["| Check | Level | Observed |", "|---|---|---|"]
    out += [f"| {c.title} | {c.level} | {c.observed} |" for c in observation.checks]
    out += ["", "```", picture(observation.spans, observation.ended_minute).plain, "```", ""]
    if observation.words_after_time_up:
        out.append("Words written after time (not credited): "
                   + ", ".join(f"section {n}: {w}" for n, w in observation.words_after_time_up.items()))
    return "\n".join(out) + "\n"
