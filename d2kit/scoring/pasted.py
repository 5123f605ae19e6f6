"""Text the candidate did not write: sentences copied from the prompt, template, rubric, answer key or
reference design are taken out before scoring, and listed, so they earn nothing.

A sentence is pasted when most of its words sit inside runs of ``SHINGLE`` words that also occur in
one of the kit's own texts; a short sentence (a template hint line) is pasted when it is one of
theirs word for word. Reusing a phrase ("per-tenant concurrency caps") is not pasting: it covers
too little of a sentence. Headings stay: the template's section titles are meant to be reused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from d2kit import paths
from d2kit.scoring.document import sentences
from d2kit.scoring.rubric import read_yaml

SHINGLE = 6
PASTED_SHARE = 0.8  # of a sentence's words inside shared runs: a restated fact with the author's own end is kept
MIN_SHORT_WORDS = 3  # a shorter sentence ("Jobs table.") is too common to call copied
WORD = re.compile(r"[a-z0-9]+")
TEMPLATE_SYNTAX = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)

# Each kit text a candidate can read before or during the round, by name.
SOURCES: dict[str, Path] = {
    "prompt": paths.RUBRIC_DIR / "sources" / "D2-job-scheduler-prompt.txt",
    "template": paths.ROOT / "d2kit" / "scoring" / "templates" / "attempt-d2.md.j2",
    "template page": paths.ROOT / "docs" / "template.md",
    "prompt page": paths.ROOT / "docs" / "prompt.md",
    "follow-ups page": paths.ROOT / "docs" / "follow-ups.md",
    "rubric part 1": paths.RUBRIC_DIR / "part1-process.yaml",
    "rubric part 2": paths.RUBRIC_DIR / "part2-design.yaml",
    "clarifying questions": paths.DESIGN_DIR / "clarifying.md.j2",
    "answer key": paths.DESIGN_DIR / "answer-key.md.j2",
    "reference design": paths.DESIGN_DIR / "reference-design.md.j2",
}
# The reference design is the original of these; scoring it must not remove it as a copy of itself.
REFERENCE_DESIGN_SOURCES = frozenset({"reference design", "answer key"})


def _words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def _strings(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for value in node.values() for s in _strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in _strings(value)]
    return []


def _text_of(path: Path) -> str:
    if path.suffix == ".yaml":
        return "\n".join(_strings(read_yaml(path)))
    return TEMPLATE_SYNTAX.sub(" ", path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Originals:
    shingles: frozenset[tuple[str, ...]]
    short_sentences: frozenset[tuple[str, ...]]

    def covered_share(self, words: list[str]) -> float:
        covered = [False] * len(words)
        for start in range(len(words) - SHINGLE + 1):
            if tuple(words[start:start + SHINGLE]) in self.shingles:
                covered[start:start + SHINGLE] = [True] * SHINGLE
        return sum(covered) / len(words) if words else 0.0

    def is_copied(self, sentence: str) -> bool:
        words = _words(sentence)
        if len(words) < MIN_SHORT_WORDS:
            return False
        if len(words) < SHINGLE:
            return tuple(words) in self.short_sentences
        return self.covered_share(words) >= PASTED_SHARE


@lru_cache(maxsize=4)
def originals(excluded: frozenset[str] = frozenset()) -> Originals:
    shingles: set[tuple[str, ...]] = set()
    short: set[tuple[str, ...]] = set()
    for name, path in SOURCES.items():
        if name in excluded or not path.is_file():
            continue
        for line in _text_of(path).splitlines():
            for _, sentence in sentences(line.strip()):
                words = _words(sentence)
                if len(words) < SHINGLE:
                    short.add(tuple(words))
                shingles.update(tuple(words[i:i + SHINGLE]) for i in range(len(words) - SHINGLE + 1))
    return Originals(frozenset(shingles), frozenset(short))
