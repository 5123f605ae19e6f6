"""Site pages that teach the round from the rubric data: the second question after each follow-up, and what a
hire and a no-hire look like at senior and staff level for each criterion.

Both read ``rubric/part2-design.yaml`` (``second_question`` per follow-up, ``calibration`` per criterion), so
the rubric page, the scorer and these pages cannot drift apart.
"""

from __future__ import annotations

from d2kit.scoring.rubric import load_design_rubric


def one_line(text: str) -> str:
    """A YAML folded or literal string as one markdown line."""
    return " ".join(text.split())


def table_cell(text: str) -> str:
    return one_line(text).replace("|", "\\|")


def second_questions_markdown() -> str:
    """Per follow-up: the question, the interviewer's next question, and what a strong answer adds."""
    parts = []
    for f in load_design_rubric().follow_ups:
        second = f.second_question
        parts += [
            f"## {f.number}. {f.topic} {{ #fu{f.number} }}", "",
            f"> {one_line(f.question)}", "",
            f"The first answer is in the [answer key](answer-key.md#fu{f.number}). In short: "
            + " ".join(f.in_two_lines), "",
            "**Then the interviewer asks:**", "",
            f"> {one_line(second.question)}", "",
            f"**What a strong answer adds.** {one_line(second.strong_adds)}", "",
        ]
    return "\n".join(parts)


def calibration_markdown() -> str:
    """Per criterion: the senior and staff bar, hire and no-hire, and the phrases that signal each."""
    design = load_design_rubric()
    parts = []
    for c in design.criteria:
        cal = c.calibration
        parts += [
            f"## {c.rank}. {c.title} {{ #{c.id.replace('_', '-')} }}", "",
            f"*{c.points:g} of the rubric's {design.total_points():g} points* — "
            f"[what earns them](rubric.md#{c.id.replace('_', '-')}).", "",
            "| Level | Hire | No hire |", "|---|---|---|",
            f"| **Senior** | {table_cell(cal.senior.hire)} | {table_cell(cal.senior.no_hire)} |",
            f"| **Staff** | {table_cell(cal.staff.hire)} | {table_cell(cal.staff.no_hire)} |", "",
            "**Phrases that signal a hire:** " + "; ".join(f"“{p}”" for p in cal.hire_phrases) + ".", "",
            "**Phrases that signal a no-hire:** " + "; ".join(f"“{p}”" for p in cal.no_hire_phrases) + ".", "",
        ]
    return "\n".join(parts)
