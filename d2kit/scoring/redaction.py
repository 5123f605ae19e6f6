"""Take sentences out of an attempt before it is scored, keeping every other line where it was.

Used for text that must earn nothing: sentences copied from the kit's own texts, and sentences that
give one of the answer key's wrong answers (they cost points; they must not also earn them elsewhere).
Headings and code stay; a list item keeps its marker, and loses it with its last sentence; a table row keeps its
bars, each cell losing its own sentences, so the rows below it stay in their table.
"""

from __future__ import annotations

from collections.abc import Callable

from d2kit.scoring.document import FENCE, HEADING, LIST_ITEM, TABLE_ROW, TABLE_RULE, sentences, split_cells
from d2kit.scoring.evidence import Evidence


def _marker_and_body(line: str) -> tuple[str, str]:
    item = LIST_ITEM.match(line)
    if item:
        return line[:item.start(2)], item.group(2)
    return line[:len(line) - len(line.lstrip())], line.strip()


def remove_sentences(text: str, drop: Callable[[str], bool]) -> tuple[str, list[Evidence]]:
    """``text`` with the sentences ``drop`` picks blanked (line numbers kept), and those sentences."""
    out, removed, in_code = [], [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            in_code = not in_code
        if in_code or FENCE.match(line) or HEADING.match(line) or not line.strip():
            out.append(line)
            continue
        if TABLE_ROW.match(line) and not TABLE_RULE.match(line):
            # Emptying a whole row would end its table: the rows after it would lose their header.
            kept = (_kept(cell.strip(), number, drop, removed) for cell in split_cells(line))
            out.append("| " + " | ".join(kept) + " |")
            continue
        marker, body = _marker_and_body(line)
        kept = _kept(body, number, drop, removed)
        out.append(marker + kept if kept else "")
    return "\n".join(out), removed


def _kept(body: str, number: int, drop: Callable[[str], bool], removed: list[Evidence]) -> str:
    """``body``'s sentences that ``drop`` does not pick, joined; the others are added to ``removed``."""
    kept = []
    for _, sentence in sentences(body):
        if drop(sentence):
            removed.append(Evidence.quote(number, sentence))
        else:
            kept.append(sentence)
    return " ".join(kept)
