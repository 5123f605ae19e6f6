"""An attempt as the detectors see it: numbered lines, the nine template sections, and text units.

A *unit* is one thing the author wrote as a whole: a paragraph, a list item with its continuation
lines, a table row, or a heading. Detectors judge units, and quote the exact line inside a unit
where the evidence is, so every point the scorer gives can be checked against a line number.
HTML comments (the template's hints) and fenced code are not prose and are kept out of the units;
code blocks are kept separately because code-level design is itself a signal.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

from d2kit.scoring.prose import is_prose, word_count

HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LIST_ITEM = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s+(.*)$")
TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
NUMBERED_TITLE = re.compile(r"^(\d{1,2})\s*[.):]\s*(.*)$")
BOLD_LEAD = re.compile(r"^\*\*(.+?)\*\*")
# A sentence ends at . ; ! ? followed by space and a capital: "1.9k" and "e.g. x" do not end one.
LINE_END = re.compile(r"[.!?;)]\W{0,2}$")
SENTENCE_BREAK = re.compile(r"(?<=[.;!?])\s+(?=[A-Z(*`\"'])")

# How a heading without its number is recognised as one of the nine template sections.
SECTION_TITLES: dict[int, re.Pattern[str]] = {
    1: re.compile(r"requirement|scope", re.I),
    2: re.compile(r"scale|numbers|estimat|capacity|back[- ]of", re.I),
    3: re.compile(r"\bapi\b|interface|endpoint", re.I),
    4: re.compile(r"data model|schema|storage model|tables", re.I),
    5: re.compile(r"architecture|high[- ]level|components", re.I),
    6: re.compile(r"deep[- ]dive|hardest", re.I),
    7: re.compile(r"failure|recovery|fault", re.I),
    8: re.compile(r"bottleneck|evolution|10x|scaling further", re.I),
    9: re.compile(r"tradeoff|trade-off|rejected|alternative", re.I),
}


@dataclass(frozen=True)
class Line:
    number: int  # 1-based, as an editor shows it
    text: str


@dataclass
class Unit:
    kind: str  # "heading" | "paragraph" | "item" | "row"
    lines: list[Line]
    section: int | None  # template section number, None before the first section
    indent: int = 0  # list nesting, in spaces
    level: int = 0  # heading level
    cells: tuple[str, ...] = ()  # table rows only
    header: tuple[str, ...] = ()  # a table body row: its table's header cells

    # text, statements and statement_text are asked for thousands of times per scoring (every check walks every
    # unit) and a unit's lines are final once parse() closes it, so each is worked out once.
    @cached_property
    def text(self) -> str:
        if self.kind == "row":
            return " | ".join(self.cells)
        if self.kind == "heading":
            return strip_markup(HEADING.sub(r"\2", self.lines[0].text))
        return " ".join(strip_markup(line.text) for line in self.lines).strip()

    @property
    def first_line(self) -> int:
        return self.lines[0].number

    @property
    def words(self) -> int:
        return word_count(self.text)

    @property
    def is_table_body(self) -> bool:
        return self.kind == "row" and bool(self.header)

    @property
    def has_columns(self) -> bool:
        """A table body row with two or more cells; a one-column table is a list drawn with bars."""
        return self.is_table_body and len(self.cells) > 1

    @property
    def written(self) -> bool:
        """Text the author wrote as content: a paragraph, a list item or a table body row (not a heading)."""
        return self.kind in ("paragraph", "item") or self.is_table_body

    @property
    def prose(self) -> bool:
        return self.written and is_prose(self.text)

    def line_at(self, offset: int) -> Line:
        """The line holding character ``offset`` of ``text`` (lines are joined by one space)."""
        if self.kind in ("row", "heading"):
            return self.lines[0]
        position = 0
        for line in self.lines:
            position += len(strip_markup(line.text)) + 1
            if offset < position:
                return line
        return self.lines[-1]

    def statements(self) -> list[tuple[int, str]]:
        """(offset, sentence) for the sentences of ``text`` that are not questions: asking is not answering."""
        return self._statements

    @cached_property
    def _statements(self) -> list[tuple[int, str]]:
        return [(start, sentence) for start, sentence in sentences(self.text) if not is_question(sentence)]

    @cached_property
    def statement_text(self) -> str:
        return " ".join(sentence for _, sentence in self.statements())

    def part(self, start: int, end: int) -> Unit:
        """``text[start:end]`` as a paragraph of its own, on the line where it starts."""
        return Unit("paragraph", [Line(self.line_at(start).number, self.text[start:end].strip())], self.section)

    def sentence_at(self, offset: int) -> tuple[int, str]:
        """(offset, sentence) of the sentence of ``text`` around character ``offset``: the one that earned the
        point, not a neighbour."""
        parts = sentences(self.text)
        start, sentence = parts[max(i for i, (start, _) in enumerate(parts) if start <= offset)]
        return start + len(sentence) - len(sentence.lstrip()), sentence.strip()


@dataclass
class SectionText:
    number: int
    title: str
    heading_line: int
    units: list[Unit] = field(default_factory=list)

    @property
    def prose_words(self) -> int:
        return sum(u.words for u in self.units if u.prose)

    @property
    def words(self) -> int:
        return sum(u.words for u in self.units if u.kind != "heading")


@dataclass
class CodeBlock:
    start_line: int
    lines: list[Line]
    section: int | None


@dataclass
class Document:
    lines: list[str]
    units: list[Unit]
    sections: dict[int, SectionText]
    code_blocks: list[CodeBlock]
    # What a scorer module worked out once for the whole document and every check asks for again (e.g. the
    # mechanisms it denies, contradictions.denials): kept with the document, so it goes when the document does.
    derived: dict[str, object] = field(default_factory=dict, compare=False, repr=False)

    def content_units(self) -> list[Unit]:
        return [u for u in self.units if u.kind != "heading"]

    def section_units(self, number: int) -> list[Unit]:
        section = self.sections.get(number)
        return section.units if section else []


def is_question(sentence: str) -> bool:
    return sentence.rstrip(" \"'”)*_").endswith("?")


@lru_cache(maxsize=1 << 16)
def sentences(text: str) -> list[tuple[int, str]]:
    """(offset, sentence) for each sentence of ``text``."""
    starts = [0] + [m.end() for m in SENTENCE_BREAK.finditer(text)]
    ends = [m.start() for m in SENTENCE_BREAK.finditer(text)] + [len(text)]
    return [(start, text[start:end]) for start, end in zip(starts, ends, strict=True)]


@lru_cache(maxsize=1 << 16)
def strip_markup(text: str) -> str:
    """Markdown emphasis, code spans, link syntax and list markers removed; words and symbols kept."""
    text = LIST_ITEM.sub(r"\2", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"(\*\*|__|\*|`)", "", text)
    return text.strip()


def _remove_comments(lines: list[str]) -> list[str]:
    """Blank out HTML comments (the template's hints) while keeping line numbers."""
    out, inside = [], False
    for line in lines:
        kept = ""
        rest = line
        while rest:
            if inside:
                end = rest.find("-->")
                if end < 0:
                    rest = ""
                else:
                    inside, rest = False, rest[end + 3:]
            else:
                start = rest.find("<!--")
                if start < 0:
                    kept, rest = kept + rest, ""
                else:
                    kept, rest, inside = kept + rest[:start], rest[start + 4:], True
        out.append(kept if kept.strip() else "")
    return out


def _section_number(title: str) -> int | None:
    numbered = NUMBERED_TITLE.match(re.sub(r"[*_`]", "", title).strip())  # not strip_markup: "1." is no bullet
    if numbered and 1 <= int(numbered.group(1)) <= 9:
        return int(numbered.group(1))
    # Most specific first: "Deep dive: the two hardest components" is section 6, not 5.
    for number in (6, 9, 7, 8, 1, 2, 3, 4, 5):
        if SECTION_TITLES[number].search(title):
            return number
    return None


def split_cells(row: str) -> list[str]:
    """A table row's cells as written, bars removed."""
    return row.strip().strip("|").split("|")


def _cells(row: str) -> tuple[str, ...]:
    return tuple(strip_markup(c) for c in split_cells(row))


def _one_per_line(unit: Unit) -> list[Unit]:
    """A paragraph whose every line ends a sentence is one item per line, written without bullets.

    Hard-wrapped prose breaks lines mid-sentence; a list written one item per line does not.
    """
    if unit.kind != "paragraph" or len(unit.lines) < 2 or \
            not all(LINE_END.search(strip_markup(line.text)) for line in unit.lines):
        return [unit]
    return [Unit("paragraph", [line], unit.section) for line in unit.lines]


def parse(text: str) -> Document:
    raw_lines = text.splitlines()
    lines = _remove_comments(raw_lines)
    units: list[Unit] = []
    sections: dict[int, SectionText] = {}
    code_blocks: list[CodeBlock] = []
    current_section: int | None = None
    section_level: int | None = None
    open_unit: Unit | None = None
    fence: CodeBlock | None = None
    header: tuple[str, ...] = ()
    previous_row_cells: tuple[str, ...] = ()

    def close() -> None:
        nonlocal open_unit
        if open_unit is not None:
            for unit in _one_per_line(open_unit):
                units.append(unit)
                if current_section in sections:
                    sections[current_section].units.append(unit)
        open_unit = None

    for index, text_line in enumerate(lines):
        line = Line(index + 1, text_line)
        if fence is not None:
            if FENCE.match(text_line):
                code_blocks.append(fence)
                fence = None
            else:
                fence.lines.append(line)
            continue
        if FENCE.match(text_line):
            close()
            fence = CodeBlock(start_line=line.number, lines=[], section=current_section)
            continue
        if not text_line.strip():
            # A blank line ends a paragraph; a list item may go on after it only if indented.
            if open_unit is not None and open_unit.kind != "item":
                close()
            continue
        heading = HEADING.match(text_line)
        if heading:
            close()
            level, title = len(heading.group(1)), heading.group(2)
            number = _section_number(title) if level >= 2 else None
            # A template section is a level-2 heading (or the shallowest level the author used for them).
            if number is not None and number not in sections and (section_level is None or level <= section_level):
                section_level = level
                current_section = number
                sections[number] = SectionText(number=number, title=strip_markup(title), heading_line=line.number)
            open_unit = Unit("heading", [line], current_section, level=level)
            close()
            continue
        if TABLE_ROW.match(text_line):
            close()
            if TABLE_RULE.match(text_line):
                header = previous_row_cells  # the row just above a rule is the table's header
                continue
            if index == 0 or not TABLE_ROW.match(lines[index - 1]):
                header = ()  # a new table starts
            cells = _cells(text_line)
            previous_row_cells = cells
            if not any(cells):  # a blank row (a header, or one redaction emptied) keeps its table going, says nothing
                continue
            open_unit = Unit("row", [line], current_section, cells=cells, header=header)
            close()
            continue
        item = LIST_ITEM.match(text_line)
        if item:
            close()
            open_unit = Unit("item", [line], current_section, indent=len(item.group(1).expandtabs(4)))
            continue
        indented = text_line.startswith(("  ", "\t"))
        if open_unit is not None and (open_unit.kind == "paragraph" or (open_unit.kind == "item" and indented)):
            open_unit.lines.append(line)
            continue
        close()
        open_unit = Unit("paragraph", [line], current_section)
    close()
    if fence is not None:
        code_blocks.append(fence)
    return Document(lines=raw_lines, units=units, sections=sections, code_blocks=code_blocks)


def parse_file(path: Path) -> Document:
    return parse(path.read_text(encoding="utf-8"))



# --------------------------------------------------------------------------------------------------
# Items: one failure (section 7) or one rejected alternative (section 9) each.
# --------------------------------------------------------------------------------------------------

# The legs' labels in plain words, as plain write-ups put them inline: "Noticed: ... Kept small: ... Back to normal:",
# or tersely "seen: ... held: ... fixed: ..." (h7-02), "Seen: ... Contained: ... Back: ..." (h19-16). The short words
# are labels only with their colon ("back-off", "seen by the reaper", "held by" are not). failures.py reads the legs
# by them; here they keep a leg's line on its failure.
PLAIN_LABELS = {"detection": r"noticed|found|seen(?=:)",
                # the damage's limit said as a label, as the column headings say it ("What stops the damage")
                "containment": r"kept (?:small|from spreading)|held(?=:)|damage (?:stopped|limited|contained)",
                "recovery": r"back to normal|(?:back|fixed)(?=:)"}
# "Detection: ...", "**Containment** - ...", and in plain words "Noticed: ...", "Back to normal: ...": a line that is
# one leg of a failure, never a new failure.
LEG_LABEL = re.compile(r"^\W*(?:(detect(ed|ion|s)?|contain(ed|ment|s)?|recover(ed|y|s)?)\b\W|(?:"
                       + "|".join(PLAIN_LABELS.values()) + r")\s*:)", re.I)


@dataclass
class Item:
    title: str
    units: list[Unit]

    @property
    def text(self) -> str:
        return " ".join(u.text for u in self.units)

    @property
    def first_line(self) -> int:
        return self.units[0].first_line

    @property
    def words(self) -> int:
        return sum(u.words for u in self.units)


def _starts_bold(unit: Unit) -> bool:
    return bool(BOLD_LEAD.match(LIST_ITEM.sub(r"\2", unit.lines[0].text).strip()))


def _first_words(text: str) -> str:
    """An item's title when nothing marks where its name ends: its first ten words."""
    return " ".join(text.split()[:10]).rstrip(":.")


def _title(unit: Unit) -> str:
    bold = BOLD_LEAD.match(LIST_ITEM.sub(r"\2", unit.lines[0].text).strip())
    return _first_words(bold.group(1) if bold else unit.text)


def split_items(section: SectionText | None) -> list[Item]:
    """Split a section into items, however the author laid them out.

    Sub-headings or bold-led lines start items when present (their bullets belong to them); else
    top-level bullets do; else paragraphs. Table rows with columns are items of their own; the rows of a
    one-column table belong to the item above them, as its bullets would. Text before the first item is a
    preamble and belongs to none.
    """
    if section is None:
        return []
    body = [u for u in section.units[1:] if u.kind != "row" or u.is_table_body]
    def free(u: Unit) -> bool:
        return u.kind in ("paragraph", "item") and u.indent == 0 and not LEG_LABEL.match(u.text)

    heading_like = [u for u in body if u.kind == "heading" or (free(u) and _starts_bold(u))]
    if heading_like:
        starters = heading_like
    else:
        # A paragraph (or a line of a one-per-line block) that opens with a leg's label ("Detected: ...") goes on
        # the item above it, as the same label under a bullet does.
        starters = [u for u in body if u.kind == "item" and free(u)] or \
            [u for u in body if u.kind == "paragraph" and not LEG_LABEL.match(u.text)]
    starter_ids = {id(u) for u in starters}
    items: list[Item] = []
    current: Item | None = None
    for unit in body:
        # A row with columns is an item of its own; a one-column table under an item's lead is its list, in a box.
        if unit.kind == "row" and (unit.has_columns or current is None):
            # Titled by its first cell, or by the first one left when redaction emptied the cells before it; a
            # one-column row is the whole item in one cell, titled as the same item written as a paragraph.
            first_cell = next((cell for cell in unit.cells if cell), unit.text)
            items.append(Item(title=first_cell if unit.has_columns else _first_words(first_cell), units=[unit]))
            current = None
        elif id(unit) in starter_ids:
            current = Item(title=_title(unit), units=[unit])
            items.append(current)
        elif current is not None:
            current.units.append(unit)
    # A sub-heading with nothing under it is not an item.
    return [i for i in items if any(u.kind != "heading" for u in i.units)]


def one_per_lead(item: Item, opens: Callable[[str], bool]) -> list[Item]:
    """``item`` as one item per sentence that ``opens`` one, when its one paragraph holds several: the same
    content gives the same items whether it is written one per bullet or run together in a paragraph."""
    if len(item.units) != 1 or item.units[0].has_columns:
        return [item]
    unit = item.units[0]
    leads = [start for start, sentence in unit.statements() if opens(sentence)]
    if len(leads) < 2:
        return [item]
    cuts = [0, *leads[1:], len(unit.text)]
    return [Item(title=_first_words(unit.text[a:b]), units=[unit.part(a, b)])
            for a, b in zip(cuts, cuts[1:], strict=False)]
