"""The same content in other layouts, rewritten mechanically: how the scorer is checked to score content, not layout.

Each top-level list item (with its continuation and nested items folded into it) is rewritten as a bullet, a
numbered item, a line of its own, a paragraph, or a row of a one-column table. The words do not change, so the
total should not move by more than ``TOLERANCE`` points (tests/test_scoring_layout.py on the tuning half; the
held-out half's spread is recorded when it is scored, calibration.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ITEM = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s+(.*)$")
LAYOUTS = ("bullets", "numbered", "one-per-line", "paragraphs", "table")
TOLERANCE = 3
MIN_ITEMS = 5  # an attempt with fewer list items has little for a layout to change


def blocks(text: str) -> list[tuple[str, list[str]]]:
    """("items", [item, ...]) for each run of top-level list items, ("text", [line]) for anything else."""
    found: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        item = ITEM.match(line)
        if item and not item.group(1):
            if not found or found[-1][0] != "items":
                found.append(("items", []))
            found[-1][1].append(item.group(2).strip())
        elif found and found[-1][0] == "items" and line.strip() and (item or line.startswith((" ", "\t"))):
            found[-1][1][-1] += " " + (item.group(2) if item else line).strip()  # nested item or continuation
        else:
            found.append(("text", [line]))
    return found


def list_items(text: str) -> int:
    return sum(len(lines) for kind, lines in blocks(text) if kind == "items")


def _ended(item: str) -> str:
    return item if re.search(r"[.!?;)]\W{0,2}$", item) else item + "."


def rewrite(text: str, layout: str) -> str:
    out: list[str] = []
    for kind, lines in blocks(text):
        if kind == "text":
            out += lines
        elif layout == "bullets":
            out += [f"- {item}" for item in lines]
        elif layout == "numbered":
            out += [f"{number}. {item}" for number, item in enumerate(lines, start=1)]
        elif layout == "one-per-line":
            out += ["", *[_ended(item) for item in lines], ""]
        elif layout == "paragraphs":
            for item in lines:
                out += ["", item, ""]
        else:
            out += ["", "| Item |", "|---|", *[f"| {item.replace('|', '/')} |" for item in lines], ""]
    return "\n".join(out) + "\n"


def totals(text: str) -> dict[str, float]:
    """The total of ``text`` rewritten in each layout."""
    from d2kit.scoring.scorer import score_text  # the scorer is the heavy import; rewriting needs none of it

    return {layout: score_text(rewrite(text, layout)).total for layout in LAYOUTS}


@dataclass(frozen=True)
class LayoutSpread:
    """Over the attempts of a half with at least MIN_ITEMS list items: how far apart each one's layouts scored."""
    attempts: int
    within_tolerance: int
    worst_spread: float
    tolerance: int = TOLERANCE


def spread(texts: list[str]) -> LayoutSpread | None:
    spreads = []
    for text in texts:
        if list_items(text) >= MIN_ITEMS:
            scored = totals(text).values()
            spreads.append(round(max(scored) - min(scored), 1))
    if not spreads:
        return None
    return LayoutSpread(len(spreads), sum(s <= TOLERANCE for s in spreads), max(spreads))
