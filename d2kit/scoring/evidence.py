"""What a detector returns: a fraction of a check's points, the quoted lines behind it, and what is missing."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from d2kit.scoring.document import Unit
from d2kit.scoring.negation import affirmed
from d2kit.scoring.prose import is_name_drop

QUOTE_CHARS = 180
# Evidence found only in a bare list, a fragment or a line of names earns at most this share.
LIST_CREDIT = 0.5
# A terse line that states a mechanism ("Claim sets token = nextval(seq), lease_until = now() + 30 s") says
# more than a bare list, less than a sentence.
TERSE_CREDIT = 0.75
TERSE_WORDS = 8
# A mechanism's roles are said together: what ``also`` asks for (who checks the token, what expires, which replicas
# it stops) must be in the sentence that names the mechanism or the one either side ("... sets a turn number. The
# store refuses anything lower."), not anywhere in a long paragraph, where a fluent paragraph earned a mechanism
# from words scattered over it. It also keeps a paragraph scoring as the same sentences written as bullets would.
ROLE_WINDOW = 1


@dataclass(frozen=True)
class Evidence:
    line: int
    text: str

    @classmethod
    def of(cls, unit: Unit, pattern: re.Pattern[str] | None = None) -> Evidence:
        """The sentence of ``unit`` where ``pattern`` matches (affirmed first), at the line where it matches."""
        offset = 0
        statements = unit.statements() if pattern else []
        hits = [(start, affirmed(pattern, s)) for start, s in statements]
        hits += [(start, pattern.search(s)) for start, s in statements]
        first = next(((start, match) for start, match in hits if match), None)
        if first:
            offset = first[0] + first[1].start()
        sentence_start, sentence = unit.sentence_at(offset)
        return cls.quote(unit.line_at(offset).number, sentence, at=offset - sentence_start)

    @classmethod
    def quote(cls, line: int, text: str, at: int = 0) -> Evidence:
        """``text`` with its whitespace collapsed; a sentence too long to quote whole is cut around character
        ``at`` (where the match is), so the quote shows the words that earned the point and sit on ``line``."""
        said = " ".join(text.split())
        if len(said) <= QUOTE_CHARS:
            return cls(line, said)
        at = len(" ".join(text[:max(at, 0)].split()))
        start = 0 if at < QUOTE_CHARS * 2 // 3 else min(at - QUOTE_CHARS // 3, len(said) - QUOTE_CHARS + 2)
        cut = said[start:start + QUOTE_CHARS - (2 if start else 1)]
        return cls(line, ("…" if start else "") + cut + ("…" if start + len(cut) < len(said) else ""))


@dataclass
class Finding:
    fraction: float
    evidence: list[Evidence] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def credit(unit: Unit) -> float:
    """Full weight for a sentence (or a row of a table whose columns say something), less for a fragment."""
    if unit.prose or (unit.has_columns and unit.words >= 8):
        return 1.0
    if unit.written and unit.words >= TERSE_WORDS and not is_name_drop(unit.text):
        return TERSE_CREDIT
    return LIST_CREDIT


def best_match(
    units: list[Unit], pattern: re.Pattern[str], *, also: re.Pattern[str] | None = None, deniable: bool = True,
    unless: re.Pattern[str] | None = None, window: int = ROLE_WINDOW,
) -> tuple[Unit, float] | None:
    """The unit that affirms ``pattern`` (and matches ``also``, not ``unless``) with the most credit, first wins ties.

    A mention the sentence denies ("there is no fencing token") does not match, unless ``deniable`` is off:
    for a decision ("no job overlaps itself") the negation is the answer.
    """
    search = affirmed if deniable else lambda p, s: p.search(s)
    best: tuple[Unit, float] | None = None
    for unit in units:
        text = unit.statement_text
        statements = [sentence for _, sentence in unit.statements()]
        hits = [i for i, sentence in enumerate(statements) if search(pattern, sentence)]
        if unit.kind == "heading" or not hits:
            continue
        if also is not None and not any(also.search(" ".join(statements[max(0, i - window):i + window + 1]))
                                        for i in hits):
            continue
        if unless is not None and unless.search(text):
            continue
        weight = credit(unit)
        if best is None or weight > best[1]:
            best = (unit, weight)
            if weight == 1.0:
                break
    return best


def component(
    units: list[Unit], pattern: re.Pattern[str], missing: str, *, also: re.Pattern[str] | None = None,
    deniable: bool = True, unless: re.Pattern[str] | None = None, window: int = ROLE_WINDOW,
) -> Finding:
    """One part of a check: found (with its credit and evidence) or reported missing."""
    match = best_match(units, pattern, also=also, deniable=deniable, unless=unless, window=window)
    if match is None:
        return Finding(0.0, missing=[missing])
    unit, weight = match
    shortfall = [] if weight == 1.0 else [f"{missing.split(':')[0]}: only as a fragment (line {unit.first_line})"]
    return Finding(weight, [Evidence.of(unit, pattern)], shortfall)


def combine(parts: list[tuple[float, Finding]]) -> Finding:
    """Weighted sum of components; weights add up to 1."""
    result = Finding(0.0)
    for share, part in parts:
        result.fraction += share * part.fraction
        result.evidence += [e for e in part.evidence if e not in result.evidence]
        result.missing += part.missing
    result.fraction = round(min(1.0, result.fraction), 4)
    return result


def pattern(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{a})" for a in alternatives), re.I)


def both(first: re.Pattern[str], second: re.Pattern[str]) -> re.Pattern[str]:
    """Matches text in which both patterns match, anywhere and in either order."""
    return re.compile(rf"\A(?=[\s\S]*?(?:{first.pattern}))(?=[\s\S]*?(?:{second.pattern}))", re.I)


def credit_level(points: float, max_points: float) -> str:
    """The rubric's word for a check's credit: full, partial or none."""
    if points >= max_points:
        return "full"
    return "partial" if points > 0 else "none"
