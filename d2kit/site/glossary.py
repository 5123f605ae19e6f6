"""The glossary: the page, from designs/d2/glossary.yaml, and the links from every other page to it.

:func:`link_first_uses` runs on each page's HTML (the ``on_page_content`` hook): the first use of each term in
running text — not in a heading, a link, a code block or the navigation — becomes a link to the term's entry.
A ``<code>`` element whose whole text is a term (``SKIP LOCKED``) counts as a use.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import cache

import yaml

from d2kit import paths

GLOSSARY_FILE = paths.DESIGN_DIR / "glossary.yaml"

# Inside these elements nothing is linked: headings are anchors of their own, links cannot nest, code blocks
# and scripts are not prose, and a <summary> is a control.
_NO_LINK = {"a", "code", "pre", "script", "style", "h1", "h2", "h3", "h4", "h5", "h6", "summary", "svg", "button",
            "label", "nav", "textarea"}
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9]*)\b[^>]*?(/?)>")


@dataclass(frozen=True)
class Term:
    term: str
    aliases: tuple[str, ...]
    definition: str

    @property
    def anchor(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.term.lower()).strip("-")


@cache
def load_terms() -> tuple[Term, ...]:
    raw = yaml.safe_load(GLOSSARY_FILE.read_text(encoding="utf-8"))
    return tuple(Term(term=t["term"], aliases=tuple(t["aliases"]), definition=" ".join(t["definition"].split()))
                 for t in raw["terms"])


def glossary_markdown() -> str:
    parts = []
    for term in sorted(load_terms(), key=lambda t: t.term.lower()):
        parts += [f"## {term.term} {{ #{term.anchor} }}", "", term.definition, ""]
    return "\n".join(parts)


@cache
def _alias_pattern() -> tuple[re.Pattern[str], dict[str, Term]]:
    by_alias = {alias.lower(): term for term in load_terms() for alias in term.aliases}
    longest_first = sorted(by_alias, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w-])(" + "|".join(re.escape(a) for a in longest_first) + r")(?![\w-])",
                         re.IGNORECASE)
    return pattern, by_alias


def _link(text: str, term: Term, glossary_url: str) -> str:
    return f'<a class="glossary-term" href="{glossary_url}#{term.anchor}" title="Glossary: {term.term}">{text}</a>'


def link_first_uses(page_html: str, glossary_url: str) -> str:
    """``page_html`` with the first use of each glossary term linked to ``glossary_url#anchor``."""
    pattern, by_alias = _alias_pattern()
    linked: set[str] = set()
    blocked = 0  # depth inside elements where nothing is linked
    out: list[str] = []
    position = 0
    for tag in _TAG.finditer(page_html):
        out.append(_link_text(page_html[position:tag.start()], blocked, pattern, by_alias, linked, glossary_url))
        closing, name, self_closing = tag.group(1), tag.group(2).lower(), tag.group(3)
        if name == "code" and not closing and not blocked:
            end = page_html.find("</code>", tag.end())
            inner = page_html[tag.end():end] if end != -1 else ""
            term = by_alias.get(html.unescape(inner).strip().lower())
            if term and term.term not in linked and "<" not in inner:
                linked.add(term.term)
                out.append(_link(page_html[tag.start():end + len("</code>")], term, glossary_url))
                position = end + len("</code>")
                continue
        if name in _NO_LINK and not self_closing:
            blocked = max(0, blocked - 1) if closing else blocked + 1
        out.append(tag.group(0))
        position = tag.end()
    out.append(_link_text(page_html[position:], blocked, pattern, by_alias, linked, glossary_url))
    return "".join(out)


def _link_text(text: str, blocked: int, pattern: re.Pattern[str], by_alias: dict[str, Term],
               linked: set[str], glossary_url: str) -> str:
    if blocked or not text.strip():
        return text

    def replace(match: re.Match[str]) -> str:
        term = by_alias[match.group(1).lower()]
        if term.term in linked:
            return match.group(0)
        linked.add(term.term)
        return _link(match.group(0), term, glossary_url)

    return pattern.sub(replace, text)
