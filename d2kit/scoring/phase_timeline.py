"""The phase timeline picture: the seed's budget bands against what the candidate did, one row per section.

One column per minute of the 45-minute budget. A dim band is when the budget says to work on that row;
a block is a minute the record attributes to it (green inside its band, yellow outside, red for the
drawing after the minute-25 line). Drawn as text, so it shows in any terminal and in ``--json`` consumers.
"""

from __future__ import annotations

from rich.text import Text

from d2kit.scoring.process import DIAGRAM_ROW, Span
from d2kit.scoring.rubric import ProcessRubric, load_process_rubric

BUDGET, IN_BUDGET, OUT_OF_BUDGET, LATE = "░", "█", "▓", "█"
ARCHITECTURE_SECTION = "5"
ACTIVE_SHARE = 0.2  # a minute counts as worked on a row when at least this share of it went there


def _budget(process: ProcessRubric) -> dict[str, tuple[float, float]]:
    rows = {str(s): (p.start, p.end) for p in process.phases for s in p.sections}
    rows[DIAGRAM_ROW] = rows[ARCHITECTURE_SECTION]  # the template's section 5: "This is the diagram."
    return rows


def _activity(spans: list[Span], row: str, minute: int) -> float:
    return sum(max(0.0, min(s.end, minute + 1) - max(s.start, minute)) for s in spans if s.row == row)


def rows(spans: list[Span], process: ProcessRubric | None = None) -> list[tuple[str, str]]:
    """(row name, one character per minute): the data behind the picture, for tests and for --json."""
    process = process or load_process_rubric()
    deadline = process.deep_dive_deadline.minute
    out = []
    for row, (start, end) in _budget(process).items():
        cells = []
        for minute in range(int(process.minutes)):
            planned = start <= minute < end
            if _activity(spans, row, minute) >= ACTIVE_SHARE:
                late = row == DIAGRAM_ROW and minute >= deadline
                cells.append("!" if late else "#" if planned else "+")
            else:
                cells.append("." if planned else " ")
        out.append((row, "".join(cells)))
    return out


STYLE = {"!": (LATE, "bold red"), "#": (IN_BUDGET, "green"), "+": (OUT_OF_BUDGET, "yellow"), ".": (BUDGET, "dim"),
         " ": (" ", "")}


def picture(spans: list[Span], ended_minute: float | None = None, process: ProcessRubric | None = None) -> Text:
    process = process or load_process_rubric()
    deadline = int(process.deep_dive_deadline.minute)
    width = int(process.minutes)
    numbers = [" "] * (width + 2)
    for minute in range(0, width + 1, 10):
        numbers[minute:minute + len(str(minute))] = str(minute)
    ticks = "".join("|" if m == deadline else "'" if m % 5 == 0 else " " for m in range(width))
    text = Text(f"{'minute':>9} {''.join(numbers).rstrip()}\n{'':>9} {ticks}\n", style="dim")
    for row, cells in rows(spans, process):
        name = f"section {row}" if row != DIAGRAM_ROW else DIAGRAM_ROW
        text.append(f"{name:>9} ")
        for cell in cells:
            char, style = STYLE[cell]
            text.append(char, style=style)
        text.append("\n")
    legend = (f"{BUDGET} the budget's minutes for the row  {IN_BUDGET} worked on it, in budget  "
              f"{OUT_OF_BUDGET} out of budget  red: drawing after minute {deadline}")
    if ended_minute is not None:
        legend += f"  (round ended at minute {ended_minute:.0f})"
    text.append(legend, style="dim")
    return text
