"""The same content scores the same whatever the layout: tuning attempts rewritten mechanically.

Each top-level list item (with its continuation and nested items folded into it) is rewritten as a
bullet, a numbered item, a line of its own, a paragraph, or a row of a one-column table. The words do
not change, so the total must not move by more than 3 points.
"""

from __future__ import annotations

import re

import pytest

from d2kit.scoring.calibration import CALIBRATION_DIR
from d2kit.scoring.scorer import score_text

TUNING = CALIBRATION_DIR / "tuning"
ITEM = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s+(.*)$")
LAYOUTS = ("bullets", "numbered", "one-per-line", "paragraphs", "table")
LAYOUT_TOLERANCE = 3
MIN_ITEMS = 5  # an attempt with fewer list items has little for a layout to change


def _blocks(text: str) -> list[tuple[str, list[str]]]:
    """("items", [item, ...]) for each run of top-level list items, ("text", [line]) for anything else."""
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        item = ITEM.match(line)
        if item and not item.group(1):
            if not blocks or blocks[-1][0] != "items":
                blocks.append(("items", []))
            blocks[-1][1].append(item.group(2).strip())
        elif blocks and blocks[-1][0] == "items" and line.strip() and (item or line.startswith((" ", "\t"))):
            blocks[-1][1][-1] += " " + (item.group(2) if item else line).strip()  # nested item or continuation
        else:
            blocks.append(("text", [line]))
    return blocks


def _ended(item: str) -> str:
    return item if re.search(r"[.!?;)]\W{0,2}$", item) else item + "."


def rewrite(text: str, layout: str) -> str:
    out: list[str] = []
    for kind, lines in _blocks(text):
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


def test_the_rewrite_keeps_the_words():
    text = "## 7. Failures\n- **Worker dies.** Detection: lease expiry.\n  - nested detail\n- Second item\n"
    assert rewrite(text, "numbered") == ("## 7. Failures\n1. **Worker dies.** Detection: lease expiry. nested detail\n"
                                         "2. Second item\n")
    assert "| Second item |" in rewrite(text, "table")
    assert "\nSecond item.\n" in rewrite(text, "one-per-line")


def _listed() -> list[str]:
    """The tuning attempts written partly as lists, whatever bands.yaml holds: their items are what a layout changes."""
    return [path.name for path in sorted(TUNING.glob("*.md"))
            if sum(len(lines) for kind, lines in _blocks(path.read_text(encoding="utf-8")) if kind == "items")
            >= MIN_ITEMS]


def test_most_tuning_attempts_have_lists_to_rewrite():
    assert len(_listed()) >= len(list(TUNING.glob("*.md"))) // 2


@pytest.mark.parametrize("name", _listed())
def test_layout_does_not_change_the_total(name: str):
    text = (TUNING / name).read_text(encoding="utf-8")
    totals = {layout: score_text(rewrite(text, layout)).total for layout in LAYOUTS}
    assert max(totals.values()) - min(totals.values()) <= LAYOUT_TOLERANCE, totals
