"""Did the candidate do arithmetic? Quantities with units, and sentences that derive new ones.

A *calculation* is a sentence where a quantity is followed by a result marker (≈, =, →, "so",
"that's", "which is", ...) and then by a number that is not one already stated in that sentence,
with at least one unit in play: "50k/min ≈ 833/s, so 5 workers at 200/s each". Stating numbers is
an assumption, not a calculation. Where a calculation is simple enough to check (a × b = c, a / b = c,
a rate converted to another time unit) and is off by more than half, it is shown and not counted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from d2kit.scoring.document import Document, Unit, sentences
from d2kit.scoring.evidence import Evidence, Finding

NUMBER = re.compile(r"(?<![\w.:/#-])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?![\d:])")
MAGNITUDE = re.compile(r"^(?:([kKM])(?![a-zA-Z])|\s?(thousand|million|billion|bn)\b)")
MAGNITUDES = {"k": 1e3, "K": 1e3, "M": 1e6, "thousand": 1e3, "million": 1e6, "billion": 1e9, "bn": 1e9}
SECONDS = {
    "ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "min": 60, "mins": 60, "minute": 60, "minutes": 60, "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600,
    "hours": 3600, "d": 86400, "day": 86400, "days": 86400, "week": 604800, "weeks": 604800,
    "month": 2.6e6, "months": 2.6e6, "year": 3.15e7, "years": 3.15e7, "yr": 3.15e7,
}
BYTES = {"b": 1, "byte": 1, "bytes": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
         "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
UNIT = re.compile(
    r"^(?:%|x\b|×)|^\s?(ns|µs|us|ms|secs?\b|seconds?|s\b|mins?\b|minutes?|hrs?\b|hours?|h\b|days?|d\b|weeks?|"
    r"months?|years?|yr\b|bytes?|[KMGTP]i?B\b|B\b|qps|rps|tps|iops|ops\b|[KMG]bps)",
    re.I,
)
COUNT_NOUN = (
    r"jobs?|executions?|runs?|occurrences?|workers?|nodes?|replicas?|schedulers?|tenants?|rows?|tuples?|"
    r"requests?|queries|query|transactions?|txns?|connections?|cores?|cpus?|vcpus?|pollers?|partitions?|"
    r"shards?|messages?|events?|writes?|reads?|inserts?|updates?|claims?|heartbeats?|leases?|items?|"
    r"users?|keys?|attempts?|instances?|machines?|servers?|pods?|threads?|processes|slots?|batch(?:es)?|"
    r"tasks?|dispatch(?:es)?|fires?|timers?|entries|entry|records?|pages?|calls?|pollers?|locks?|"
    r"firings?|tokens?|hosts?|boxes|dead tuples|fire times"
)
NOUN_AFTER = re.compile(rf"^\s?(?:[\w-]+\s)?({COUNT_NOUN})\b", re.I)
RATE = re.compile(
    r"^\s?(?:/\s?|per\s|an?\s|each\s)(s|sec|second|min|minute|h|hr|hour|d|day|week|month|year)\b", re.I
)
RESULT_MARKER = re.compile(
    r"≈|~|=|→|->|=>|⇒|\bso\b|\bthat'?s\b|\bthat is\b|\bgives?\b|\bgiving\b|\bmeans?\b|\bwhich is\b|"
    r"\bi\.e\.|\bcomes? to\b|\btotal(?:s|ling)?\b|\bis (?:about|roughly|around|approximately|under|over)\b|"
    r"\bor about\b|\bequals?\b|\bworks out\b|\bhence\b|\btherefore\b|\bneeding\b|\bresult",
    re.I,
)
OPERATOR = re.compile(r"^\s*(×|\*|x|/|÷|divided by|times)\s*$", re.I)
# A checkable calculation may be rounded and padded for headroom; more than this far off is wrong.
TOLERANCE = 0.5

DIMENSIONS: dict[str, re.Pattern[str]] = {
    "throughput": re.compile(r"/\s?(s|sec|min|h|hr|day)\b|per (second|minute|hour|day)|qps|rps|tps|throughput|"
                             r"rate|executions?|dispatch", re.I),
    "storage": re.compile(r"\b[KMGTP]i?B\b|bytes?|storage|disk|rows?|retention|table size|dead tuples", re.I),
    "concurrency": re.compile(r"workers?|concurren|in flight|running at once|slots?|cores?|connections?|pollers?",
                              re.I),
    "network": re.compile(r"bandwidth|[KMG]bps|network|egress|ingress|[KMG]B/s", re.I),
    "growth": re.compile(r"\b10\s?[x×]|growth|grow|per (month|year)|/\s?(month|year)|next year|headroom", re.I),
}


@dataclass(frozen=True)
class Quantity:
    start: int
    end: int
    value: float  # number × magnitude × byte factor
    per_second: float | None  # rates: value per second; durations: value in seconds
    has_unit: bool
    is_rate: bool
    is_multiplier: bool  # "10x", "3×": a factor, not an estimate of anything


@dataclass(frozen=True)
class Calculation:
    evidence: Evidence
    dimensions: frozenset[str]
    checks_out: bool


def quantities(text: str) -> list[Quantity]:
    found = []
    for match in NUMBER.finditer(text):
        value = float(match.group(1).replace(",", ""))
        end = match.end()
        tail = text[end:end + 40]
        magnitude = MAGNITUDE.match(tail)
        has_unit = False
        if magnitude:
            value *= MAGNITUDES[magnitude.group(1) or magnitude.group(2)]
            end += magnitude.end()
            tail = text[end:end + 40]
            has_unit = True
        per_second = None
        unit = UNIT.match(tail)
        is_multiplier = bool(unit) and unit.group(1) is None and not tail.startswith("%")
        if unit:
            word = unit.group(1) or ""
            has_unit = True
            if word.lower() in BYTES:
                value *= BYTES[word.lower()]
            elif word in SECONDS or word.lower() in SECONDS:
                per_second = value * SECONDS[word.lower()]
            end += unit.end()
        else:
            noun = NOUN_AFTER.match(tail)
            if noun:
                has_unit = True
                end += noun.end()
        rate = RATE.match(text[end:end + 20])
        is_rate = rate is not None
        if rate:
            has_unit = True
            per_second = value / SECONDS[rate.group(1).lower()]
            end += rate.end()
        found.append(Quantity(match.start(), end, value, per_second, has_unit, is_rate, is_multiplier))
    return found


def _close(a: float, b: float) -> bool:
    return a == b or (max(abs(a), abs(b)) > 0 and abs(a - b) / max(abs(a), abs(b)) <= TOLERANCE)


def _checks_out(text: str, qs: list[Quantity], result_index: int) -> bool:
    """False only when a simple, checkable calculation is clearly wrong; anything else is given the benefit."""
    result = qs[result_index]
    if result_index >= 2:
        a, b = qs[result_index - 2], qs[result_index - 1]
        op = OPERATOR.match(text[a.end:b.start])
        if op and RESULT_MARKER.search(text[b.end:result.start]):
            symbol = op.group(1).lower()
            if symbol in ("/", "÷", "divided by"):
                candidates = [a.value / b.value] if b.value else []
            else:
                candidates = [a.value * b.value]
            if a.per_second is not None and b.per_second is not None:
                candidates.append(a.per_second * b.per_second if symbol not in ("/", "÷", "divided by")
                                  else a.per_second / b.per_second if b.per_second else 0)
            targets = [result.value] + ([result.per_second] if result.per_second is not None else [])
            return any(_close(c, t) for c in candidates for t in targets) if candidates else True
    before = qs[result_index - 1]
    between = text[before.end:result.start]
    if before.is_rate and result.is_rate and re.fullmatch(r"\s*(≈|~|=|→|->|is|is about|is ~|or)\s*~?\s*", between):
        return _close(before.per_second or 0, result.per_second or 0)
    return True


def find_calculation(text: str) -> tuple[int, bool] | None:
    """(index of the derived quantity, whether it checks out) for the first derivation in ``text``."""
    qs = quantities(text)
    for j in range(1, len(qs)):
        earlier = qs[:j]
        if not any(q.has_unit for q in earlier + [qs[j]]):
            continue
        if not RESULT_MARKER.search(text[earlier[0].end:qs[j].start]):
            continue
        if any(q.value == qs[j].value for q in earlier):
            continue  # restating a number is not deriving one
        return j, _checks_out(text, qs, j)
    return None


def _sentences(doc: Document) -> list[tuple[str, Callable[[int], int]]]:
    """(sentence, line number of an offset in it) for prose, table rows and code lines."""
    out: list[tuple[str, Callable[[int], int]]] = []
    for unit in doc.content_units():
        for start, sentence in sentences(unit.text):
            out.append((sentence, lambda offset, unit=unit, start=start: unit.line_at(start + offset).number))
    for block in doc.code_blocks:
        out += [(line.text, lambda _offset, number=line.number: number) for line in block.lines]
    return out


def calculations(doc: Document) -> list[Calculation]:
    seen: set[str] = set()
    found = []
    for sentence, line_of in _sentences(doc):
        key = " ".join(sentence.lower().split())
        hit = find_calculation(sentence)
        if hit is None or key in seen:
            continue
        seen.add(key)
        index, ok = hit
        derived = quantities(sentence)[index]
        dims = frozenset(name for name, p in DIMENSIONS.items() if p.search(sentence))
        found.append(Calculation(Evidence.quote(line_of(derived.start), sentence), dims, ok))
    return found


def stated_quantities(units: list[Unit]) -> list[tuple[Unit, str]]:
    """Numbers with units, as written, in ``units``."""
    out = []
    for unit in units:
        text = unit.text
        out += [(unit, text[q.start:q.end].strip()) for q in quantities(text) if q.has_unit]
    return out


# --------------------------------------------------------------------------------------------------
# The three arithmetic checks of the rubric.
# --------------------------------------------------------------------------------------------------

CALCULATIONS_FOR_FULL = 4
ASSUMPTIONS_FOR_FULL = 3


def derivations(doc: Document) -> Finding:
    found = calculations(doc)
    good = [c for c in found if c.checks_out]
    missing = [f"does not check out, not counted: line {c.evidence.line}: {c.evidence.text}"
               for c in found if not c.checks_out]
    if len(good) < CALCULATIONS_FOR_FULL:
        missing.insert(0, f"{len(good)} of the {CALCULATIONS_FOR_FULL} derivations needed "
                          "(numbers with units combined into a new number)")
    return Finding(min(CALCULATIONS_FOR_FULL, len(good)) / CALCULATIONS_FOR_FULL, [c.evidence for c in good], missing)


def dimensions(doc: Document) -> Finding:
    good = [c for c in calculations(doc) if c.checks_out]
    covered = sorted(set().union(*(c.dimensions for c in good))) if good else []
    fraction = 1.0 if len(covered) >= 3 else 0.5 if len(covered) == 2 else 0.0
    evidence = [Evidence(0, f"derivations cover: {', '.join(covered)}")] if covered else []
    absent = [d for d in DIMENSIONS if d not in covered]
    return Finding(fraction, evidence, [] if fraction == 1 else [f"no derivation about: {', '.join(absent)}"])


def assumptions(doc: Document) -> Finding:
    scoped = [u for u in doc.section_units(1) + doc.section_units(2) if u.kind != "heading"]
    stated = stated_quantities(scoped or doc.content_units())
    distinct: dict[str, tuple[Unit, str]] = {}
    for unit, text in stated:
        distinct.setdefault(text.lower(), (unit, text))
    by_unit: dict[int, list[str]] = {}
    for unit, text in distinct.values():
        by_unit.setdefault(id(unit), []).append(text)
    evidence = [Evidence.quote(unit.first_line, "; ".join(by_unit.pop(id(unit))))
                for unit, _ in distinct.values() if id(unit) in by_unit]
    if len(distinct) >= ASSUMPTIONS_FOR_FULL:
        return Finding(1.0, evidence)
    return Finding(0.5 if distinct else 0.0, evidence,
                   [f"{len(distinct)} scale numbers with units stated before the design; "
                    f"{ASSUMPTIONS_FOR_FULL} needed"])
