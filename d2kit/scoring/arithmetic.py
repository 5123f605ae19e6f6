"""Did the candidate do arithmetic? Quantities with units, and sentences that derive new ones, checked.

A *calculation* is a sentence where a quantity is followed by a result marker (≈, =, →, "so",
"that's", "which is", ...) and then by a number that is not one already stated in that sentence,
with at least one unit in play: "50k/min ≈ 833/s, so 5 workers at 200/s each". Stating numbers is
an assumption, not a calculation.

Every step of a calculation is checked with pint, which knows that 50k/min is 833/s, that 10M × 1 KB
is 10 GB and that 750/s × 8 s is 6,000 (Little's law). A step that converts to a different value,
or to bytes from something that is not bytes, is wrong: it earns nothing and the right value is shown.
The regular expressions below only find a number and the words naming its unit; pint does the units.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations, pairwise
from typing import NamedTuple

import pint

from d2kit.scoring.document import Document, Unit, sentences, strip_markup
from d2kit.scoring.evidence import Evidence, Finding

# "$1" in SQL is a placeholder; "$500" is still a number.
NUMBER = re.compile(r"(?<![\w.:/#-])(?!(?<=\$)\d(?!\d|[,.]\d))(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?![\d:])")
MAGNITUDE = re.compile(r"^(?:([kKM])(?![a-zA-Z])|([B])(?=\s+[a-z])(?!\s+(?:of|per|each|a|an|for)\b)|"
                       r"\s?(thousand|million|billion|bn)\b)")  # "2.6B rows" is a count; "500 B of history" bytes
MAGNITUDES = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "thousand": 1e3, "million": 1e6, "billion": 1e9, "bn": 1e9}
# The words a candidate writes for a unit, as pint names it.
PINT_UNITS = {
    "ns": "nanosecond", "µs": "microsecond", "us": "microsecond", "ms": "millisecond", "s": "second",
    "sec": "second", "secs": "second", "second": "second", "seconds": "second", "min": "minute",
    "mins": "minute", "minute": "minute", "minutes": "minute", "h": "hour", "hr": "hour", "hrs": "hour",
    "hour": "hour", "hours": "hour", "d": "day", "day": "day", "days": "day", "week": "week", "weeks": "week",
    "month": "month", "months": "month", "year": "year", "years": "year", "yr": "year",
    "b": "byte", "byte": "byte", "bytes": "byte", "kb": "kilobyte", "mb": "megabyte", "gb": "gigabyte",
    "tb": "terabyte", "pb": "petabyte", "kib": "kibibyte", "mib": "mebibyte", "gib": "gibibyte",
    "tib": "tebibyte", "qps": "1/second", "rps": "1/second", "tps": "1/second", "iops": "1/second",
    "ops": "1/second", "kbps": "kilobit/second", "mbps": "megabit/second", "gbps": "gigabit/second",
}
UNIT = re.compile(
    # "ms" is a unit only as a word: "830 msg/s" is messages, "500 users" users
    r"^(?:%|x\b|×)|^[\s-]?((?:ns|µs|us|ms)\b|secs?\b|seconds?|s\b|mins?\b|minutes?|hrs?\b|hours?|h\b|days?|d\b|"
    r"weeks?|months?|years?|yr\b|bytes?|[KMGTP]i?B\b|B\b|qps|rps|tps|iops|ops\b|[KMG]bps)",
    re.I,
)
COUNT_NOUN = (
    r"jobs?|executions?|runs?|occurrences?|workers?|nodes?|replicas?|schedulers?|tenants?|rows?|tuples?|"
    r"requests?|queries|query|transactions?|txns?|connections?|cores?|cpus?|vcpus?|pollers?|partitions?|"
    r"shards?|messages?|events?|writes?|reads?|inserts?|updates?|claims?|heartbeats?|leases?|items?|"
    r"users?|keys?|attempts?|instances?|machines?|servers?|pods?|threads?|processes|slots?|batch(?:es)?|"
    r"tasks?|dispatch(?:es)?|fires?|timers?|entries|entry|records?|pages?|calls?|pollers?|locks?|"
    r"firings?|tokens?|hosts?|boxes|dead tuples|fire times|starts?|running|"
    # as practitioners abbreviate them: "830 msg/s", "8,300 exec/s", "100 req/s", "7,000 tx/s"
    r"msgs?|reqs?|execs?|txs?|evts?"
)
NOUN_AFTER = re.compile(rf"^\s?([\w-]+\s)?({COUNT_NOUN})\b", re.I)
RATE = re.compile(
    r"^\s?(?:/\s?|per\s(\d+\s)?|an?\s|each\s)(s|sec|second|min|minute|h|hr|hour|d|days?|weeks?|months?|years?)\b",
    re.I,
)  # "/s", "a day", "per 30 days"
RESULT_MARKER = re.compile(
    # "~" alone is "about" ("~940 workers"); only a free-standing "~" is a result marker. "mean" is an average.
    r"≈|\s~\s|=|→|->|=>|⇒|\bso\b|\bthat'?s\b|\bthat is\b|\bgives?\b|\bgiving\b|\bmeans\b|\bwhich is\b|"
    r"\bi\.e\.|\bcomes? to\b|\btotal(?:s|ling)?\b|\bis (?:about|roughly|around|approximately|under|over)\b|"
    r"\bor about\b|\bequals?\b|\bworks? out(?: to)?\b|"
    r"\b(?:adds? up|amounts?) to\b|\bhence\b|\btherefore\b|\bneeding\b|\bresult|"
    r"\b(drains?|drained|clears?|cleared)\b(\s+\w+){0,2}\s+(in|within)\b",  # a backlog's drain time: count ÷ rate
    re.I,
)
# "StartToCloseTimeout = 6 h": a setting, not a result. "(600/s → 24/s)" after "batch": a change, not a result.
ASSIGNMENT = re.compile(r"\b[A-Za-z]+(?:[A-Z_][A-Za-z_]*)+\s*[:=]\s*$|\b[a-z]+_[a-z_]+\s*=")
ARROW = re.compile(r"→|->|=>|⇒")
CHANGE = re.compile(r"\b(batch\w*|reduc\w*|cuts?|drops?|lowers?|instead of|down to|from \S+ to|saves?|shrinks?)\b",
                    re.I)
RESULT_HEDGE = re.compile(r"[\s~≈:]*((about|roughly|around|approximately|only|just|under|over|some|nearly|"
                          r"almost|at most|at least|a|an)\s+)*[\s~≈]*", re.I)
# "so one queue tops out at 1,000/s": after a marker, the clause's subject and a verb of reaching, then the result.
REACHES = re.compile(r"(\s+[\w'-]+){0,4}?\s+(tops? out|peaks?|maxes out|caps? out|plateaus?|saturates?|grows?|"
                     r"reach(es)?|rises?|climbs?|comes? out|lands?|ends? up|works? out) (at|to)\b", re.I)
OPERATOR = re.compile(r"^[\s,]*\(?\s*(×|\*|x|/|÷|divided by|times)\s*\(?\s*$", re.I)
DIVIDE = ("/", "÷", "divided by")
# A calculation may be rounded and padded for headroom; more than this far off is wrong.
TOLERANCE = 0.5

DIMENSIONS: dict[str, re.Pattern[str]] = {
    "throughput": re.compile(r"/\s?(s|sec|min|h|hr|day)\b|(per|an?|each|every) (second|minute|hour|day)\b|qps|rps|"
                             r"tps|throughput|rate|executions?|dispatch", re.I),
    "storage": re.compile(r"\b[KMGTP]i?B\b|bytes?|storage|disk|rows?|retention|table size|dead tuples", re.I),
    "concurrency": re.compile(r"workers?|concurren|in flight|running (at once|jobs|runs)|at (once|the same time)|"
                              r"simultaneous|in parallel|slots?|cores?|connections?|pollers?", re.I),
    "network": re.compile(r"bandwidth|[KMG]bps|network|egress|ingress|[KMG]B/s", re.I),
    "growth": re.compile(r"\b10\s?[x×]|growth|grow|per (month|year)|/\s?(month|year)|next year|headroom", re.I),
}


# Only the units a scale estimate uses. pint's default registry makes a bit dimensionless, so "7 workers"
# could pass for bytes; here information is a dimension of its own.
UNIT_DEFINITIONS = """
nano- = 1e-9 = n
micro- = 1e-6 = u
milli- = 1e-3 = m
kilo- = 1e3 = k
mega- = 1e6 = M
giga- = 1e9 = G
tera- = 1e12 = T
peta- = 1e15 = P
kibi- = 2**10 = Ki
mebi- = 2**20 = Mi
gibi- = 2**30 = Gi
tebi- = 2**40 = Ti
second = [time] = s
minute = 60 * second = min
hour = 60 * minute = h
day = 24 * hour = d
week = 7 * day
year = 365.25 * day = yr
month = year / 12
bit = [information]
byte = 8 * bit = B
"""


@lru_cache(maxsize=1)
def units() -> pint.UnitRegistry:
    registry = pint.UnitRegistry(None)
    for definition in UNIT_DEFINITIONS.strip().splitlines():
        registry.define(definition)
    return registry


@dataclass(frozen=True)
class Quantity:
    start: int
    end: int
    amount: pint.Quantity  # the number in its unit: 50k/min is 50,000 / minute; "10M jobs" is 1e7, a count
    has_unit: bool  # a unit or a counted noun: "10M jobs", "30 s"; a bare "3" has none
    is_multiplier: bool  # "10x", "3×": a factor, not an estimate of anything
    noun: str = ""  # what is counted, singular: "job" of "10M jobs", "execution" of "50k executions/min"

    @property
    def is_bytes(self) -> bool:
        return _is_bytes(self.amount)


def _is_bytes(amount: pint.Quantity) -> bool:
    return amount.dimensionality == units().Quantity(1, "byte").dimensionality


@dataclass(frozen=True)
class Calculation:
    evidence: Evidence
    dimensions: frozenset[str]
    checks_out: bool
    correction: str = ""  # for a wrong step: what it should have been
    sentence: str = ""  # whole, as read (the evidence may be shortened)


def quantities(text: str) -> list[Quantity]:
    registry = units()
    found = []
    for match in NUMBER.finditer(text):
        value = float(match.group(1).replace(",", ""))
        end = match.end()
        tail = text[end:end + 40]
        magnitude = MAGNITUDE.match(tail)
        has_unit = False
        if magnitude:
            value *= MAGNITUDES[magnitude.group(1) or magnitude.group(2) or magnitude.group(3)]
            end += magnitude.end()
            tail = text[end:end + 40]
            has_unit = True
        amount = registry.Quantity(value)
        unit = UNIT.match(tail)
        is_multiplier = bool(unit) and unit.group(1) is None and not tail.startswith("%")
        if tail.startswith("%"):
            amount = registry.Quantity(value / 100)  # "20% × 830/s ≈ 166/s": a share, not twenty of something
        if unit:
            has_unit = True
            word = (unit.group(1) or "").lower()
            if word in PINT_UNITS:
                amount = registry.Quantity(value, PINT_UNITS[word])
            end += unit.end()
        noun_word = ""
        if not unit:
            noun = NOUN_AFTER.match(tail)
            if noun:
                has_unit = True
                end += noun.end()
                noun_word = ((noun.group(1) or "") + noun.group(2)).lower().rstrip("s")  # "skipped rows" ≠ "rows"
        rate = RATE.match(text[end:end + 20])
        if rate:
            has_unit = True
            amount = amount / registry.Quantity(float(rate.group(1) or 1), PINT_UNITS[rate.group(2).lower()])
            end += rate.end()
        found.append(Quantity(match.start(), end, amount, has_unit, is_multiplier, noun_word))
    return found


def _close(a: float, b: float) -> bool:
    return a == b or (max(abs(a), abs(b)) > 0 and abs(a - b) / max(abs(a), abs(b)) <= TOLERANCE)


def _joined_by_operator(text: str, left: Quantity, right: Quantity) -> str | None:
    """The operator between two quantities ("×" of "3×" included), or None."""
    if left.is_multiplier and not text[left.end:right.start].strip():
        return "×"
    op = OPERATOR.match(text[left.end:right.start])
    return op.group(1).lower() if op else None


class DividesByZero(ValueError):
    """A written expression divides by zero ("10M jobs/day / 0 workers"): it derives nothing."""


def _expression(text: str, qs: list[Quantity], first: int, last: int) -> pint.Quantity:
    value = qs[first].amount
    for index in range(first + 1, last + 1):
        op = _joined_by_operator(text, qs[index - 1], qs[index])
        if op in DIVIDE and qs[index].amount.magnitude == 0:
            raise DividesByZero(text[qs[first].start:qs[last].end])
        value = value / qs[index].amount if op in DIVIDE else value * qs[index].amount
    return value


def _runs(text: str, qs: list[Quantity]) -> list[tuple[int, int]]:
    """Maximal runs of quantities joined by operators: "50,000 × 60", "750/s × 8 s", "3M/s"."""
    runs, start = [], 0
    for index in range(1, len(qs) + 1):
        if index == len(qs) or _joined_by_operator(text, qs[index - 1], qs[index]) is None:
            runs.append((start, index - 1))
            start = index
    return runs


def _show(amount: pint.Quantity, unit: pint.Unit | None = None) -> str:
    if amount.dimensionless:
        return f"{amount.magnitude:,.3g}"
    if _is_bytes(amount) or unit is None:
        return f"{amount.to_compact():~.3gP}"
    return f"{amount.to(unit):~,.3gP}"


def _converted_by_hand(qs: list[Quantity], run: tuple[int, int], target: pint.Quantity, left: pint.Quantity) -> bool:
    """"45,000/min ÷ 60 = 750/s": the candidate did the unit conversion with a bare factor, and got it right."""
    bare = any(not qs[i].has_unit for i in range(run[0] + 1, run[1] + 1))
    return bare and _close(left.magnitude, target.magnitude)


def _comparable(text: str, qs: list[Quantity], left: tuple[int, int], target: pint.Quantity) -> bool:
    """Same dimension; and counts (all dimensionless) only when the left side multiplies: "3 × 400 = 1,200"."""
    same = _expression(text, qs, *left).dimensionality == target.dimensionality
    return same and (left[1] > left[0] or not target.dimensionless)


def _stated_elsewhere(text: str, qs: list[Quantity], runs: list[tuple[int, int]], run: tuple[int, int],
                      target: pint.Quantity) -> bool:
    """"1,500/s → ~94/s (940 workers / 10 s)": the result is another expression of the sentence."""
    for other in runs:
        value = _expression(text, qs, *other)
        if other != run and other[1] > other[0] and value.dimensionality == target.dimensionality and \
                _close(value.to(target.units).magnitude, target.magnitude):
            return True
    return False


def _is_result_chained(text: str, qs: list[Quantity], run: tuple[int, int]) -> bool:
    following = run[1] + 1
    return following < len(qs) and _is_result(text[qs[run[1]].end:qs[following].start])


def _is_result(gap: str) -> bool:
    """The number after ``gap`` is a result: a marker right before it ("→ 400/s", "that is about 5"),
    not an input that follows a marker ("so at 200/s per worker")."""
    markers = list(RESULT_MARKER.finditer(gap))
    if not markers:
        return False
    after = gap[markers[-1].end():]
    reaches = REACHES.match(after)
    return bool(RESULT_HEDGE.fullmatch(after[reaches.end():] if reaches else after))


class Steps(NamedTuple):
    holds: bool  # no step is wrong
    correction: str  # the first wrong step's
    verified: bool  # some step was verified
    wrong_at: int = -1  # the index of the first wrong result in the sentence's quantities


def check_steps(text: str, qs: list[Quantity], rates: frozenset[pint.Quantity] = frozenset()) -> Steps:
    """Every result of the sentence against what comes before it, with pint.

    A result holds when it follows from the expression right before it (directly, by a bare
    conversion factor, or through one other number of the sentence: "6,000 running; at 30 per
    worker → 200 workers"), or is the sum of earlier figures, or another expression of the sentence
    gives it. It is wrong when it contradicts something it can be compared with: the nearest earlier
    figure of its dimension ("50k/min = 50,000 × 60 = 3M/s" is checked against 50k/min), or bytes
    derived from nothing that is bytes ("7 workers, which is 3 TB"), or a result in other units than
    its expression gives ("830/s × 30 s = 25,000 locks/s"). Otherwise it is given the benefit. ``rates``
    are the rates the document states, for a number written here without its "/day" (stated_rates).
    """
    try:
        return _check_steps(text, qs, rates)
    except DividesByZero as zero:
        return Steps(False, f"{zero}: divides by zero", False)


def _check_steps(text: str, qs: list[Quantity], rates: frozenset[pint.Quantity]) -> Steps:
    runs = _runs(text, qs)
    change = bool(CHANGE.search(text))
    verified = False
    chain: list[tuple[int, int]] = []
    for index, (previous, run) in enumerate(pairwise(runs)):
        gap = text[qs[previous[1]].end:qs[run[0]].start]
        if not _is_result(gap) or ASSIGNMENT.search(gap) or (change and ARROW.search(gap)):
            chain = []
            continue
        lefts = (chain or [previous])[:]
        chain = lefts + [run]
        right = qs[run[0]]
        if run[1] > run[0] or _is_result_chained(text, qs, run) and lefts[-1][0] == lefts[-1][1] and \
                not _comparable(text, qs, lefts[-1], right.amount):
            # An expression, or an input ("1 KB per job, so 10M jobs = 10 GB"): the next result checks it. What
            # follows an expression is its result, even if more follows ("830 ÷ 20 s ≈ 41 jobs, so 41 workers").
            # An expression that opens with a result ("8,300/s × 86,400 s ≈ 7.2 billion/day × 200 B ≈ ...") has
            # that result checked first, or its error would hide behind the step that uses it.
            if run[1] > run[0] and right.has_unit and _restates(_expression(text, qs, *lefts[-1]), right.amount):
                verdict, holds = _judge(text, qs, runs[:index + 1], lefts, (run[0], run[0]), rates)
                if verdict:
                    return Steps(False, verdict, verified, run[0])
                verified = verified or holds
            continue
        if not right.has_unit and not any(qs[i].has_unit for left in lefts for i in range(left[0], left[1] + 1)):
            continue
        verdict, holds = _judge(text, qs, runs[:index + 1], lefts, run, rates)
        if verdict:
            return Steps(False, verdict, verified, run[0])
        verified = verified or holds
    return Steps(True, "", verified)


def _judge(text: str, qs: list[Quantity], earlier: list[tuple[int, int]], lefts: list[tuple[int, int]],
           run: tuple[int, int], rates: frozenset[pint.Quantity]) -> tuple[str, bool]:
    """(the correction for the result at ``run`` or "", whether it was verified) for one step."""
    right = qs[run[0]]
    target = right.amount
    nearest = lefts[-1]
    value = _expression(text, qs, *nearest)
    used = {i for each in lefts for i in range(each[0], each[1] + 1)} | {run[0]}
    # Inputs come before their result; a figure after it ("..., plus 15,000 running / 10 s") is another step.
    others = [q.amount for i, q in enumerate(qs[:run[0]]) if i not in used and q.has_unit and not q.is_multiplier]
    others += [_expression(text, qs, *each) for each in lefts[:-1]]
    through, through_correction = _through_one_more(value, right, others)
    if target.dimensionless:
        through_correction = ""  # counts of different things ("plain-write equivalents") do not contradict
    comparable = [left for left in reversed(lefts) if _comparable(text, qs, left, target)]
    direct = bool(comparable) and comparable[0] == nearest
    kept = _kept_for_a_window(qs, nearest, run, value, target, rates)
    holds = (
        (direct and _close(value.to(target.units).magnitude, target.magnitude))
        or _converted_by_hand(qs, nearest, target, value)
        or through
        # "400 × 3 (claim, start, finish) = 1,200/s": the units were left off, the number is right. Not when
        # the units were there and cancel: "830/s × 30 s = 25,000 locks/s" is 25,000 locks. "830 × 20 s ≈ 16,700":
        # left off the result.
        or (not direct and (_units_left_off(qs, nearest) or not right.has_unit)
            and _close(value.magnitude, target.magnitude))
        or _stated_elsewhere(text, qs, earlier + [run], run, target)
        or _sum_of_earlier(text, qs, earlier, target)
        or _rate_left_implicit(qs, nearest, value, target, rates)
        or _per_window(qs, nearest, value, target)
        or _period_divided_out(text, qs, nearest, value, target)
        or any(_close(amount.to(target.units).magnitude, target.magnitude) for amount in kept)
    )
    if comparable and not direct and not _is_bytes(target) and not target.dimensionless:  # contradicted further back
        far = _expression(text, qs, *comparable[0])
        if not _close(far.to(target.units).magnitude, target.magnitude):
            return _correction(text, qs, comparable[0], right, f"should be about {_show(far, target.units)}"), False
    if holds:
        return "", True
    if kept and not direct:
        return _correction(text, qs, nearest, right, f"should be about {_show(kept[0], target.units)}"), False
    if direct:
        return _correction(text, qs, nearest, right, f"should be about {_show(value, target.units)}"), False
    unread = re.search(r"\d", text[qs[nearest[1]].end:right.start])  # "× 1 renewal/10 s": a step not parsed
    if nearest[1] > nearest[0] and not unread and (target.dimensionless or value.dimensionless
                                                   or value.dimensionality != target.dimensionality):
        # "3M/s ÷ 100 jobs per worker = 300 workers", "50,000 / 60 ≈ 8,300/s": an expression the result claims to
        # be, in the writer's units; "10M × 1 KB = 10 GB per second", "830 ÷ 20 s ≈ 41 jobs": in other units.
        return _correction(text, qs, nearest, right, f"the expression gives {_show(value)}"), False
    return (_correction(text, qs, nearest, right, through_correction) if through_correction else ""), False


def _restates(value: pint.Quantity, target: pint.Quantity) -> bool:
    """``target`` can be what ``value`` comes to: the same dimension, or a total written per window ("/day")."""
    if target.dimensionless:
        return False
    return value.dimensionality == target.dimensionality or (target.magnitude != 0 and (
        (value / target).dimensionality == units().Quantity(1, "second").dimensionality))


def _units_left_off(qs: list[Quantity], run: tuple[int, int]) -> bool:
    return all(qs[i].amount.dimensionless for i in range(run[0], run[1] + 1))


def _correction(text: str, qs: list[Quantity], left: tuple[int, int], right: Quantity, why: str) -> str:
    return f"{text[qs[left[0]].start:qs[left[1]].end]} → {text[right.start:right.end].strip()}: {why}"


def _rate_left_implicit(qs: list[Quantity], run: tuple[int, int], value: pint.Quantity, target: pint.Quantity,
                        rates: frozenset[pint.Quantity]) -> bool:
    """"72M × 300 B ≈ 21.6 GB/day" where the document states 72M rows/day: the "/day" was left implicit.

    Only a rate the document states excuses it: "10M × 1 KB = 10 GB per second" has no 10M per second.
    """
    for index in range(run[0], run[1] + 1):
        bare = qs[index].amount
        if not bare.dimensionless:
            continue
        for rate in rates:
            if rate.magnitude == bare.magnitude != 0 and (rate * units().Quantity(1, "second")).dimensionless:
                with_rate = value * (rate / bare)
                if with_rate.dimensionality == target.dimensionality and \
                        _close(with_rate.to(target.units).magnitude, target.magnitude):
                    return True
    return False


def _per_window(qs: list[Quantity], run: tuple[int, int], value: pint.Quantity, target: pint.Quantity) -> bool:
    """"3,000 updates/s × 86,400 s ≈ 260M dead tuples/day": the result over a window, written per that window."""
    if target.magnitude == 0:
        return False
    ratio = value / target
    for index in range(run[0], run[1] + 1):
        window = qs[index].amount
        if window.dimensionality == ratio.dimensionality == units().Quantity(1, "second").dimensionality and \
                _close(window.to(ratio.units).magnitude, ratio.magnitude) and \
                any(_close(window.to(unit).magnitude, 1) for unit in ("second", "minute", "hour", "day")):
            return True
    return False


def _period_divided_out(text: str, qs: list[Quantity], run: tuple[int, int], value: pint.Quantity,
                        target: pint.Quantity) -> bool:
    """"10M per day / 86,400 s ≈ 116/s": the rate divided by the seconds in its own period, a unit conversion."""
    for index in range(run[0] + 1, run[1] + 1):
        window = qs[index].amount
        if _joined_by_operator(text, qs[index - 1], qs[index]) in DIVIDE and \
                window.dimensionality == units().Quantity(1, "second").dimensionality and \
                any(_close(window.to(unit).magnitude, 1) and abs(window.to(unit).magnitude - 1) < 0.01
                    for unit in ("minute", "hour", "day")):
            rate = value * window
            if rate.dimensionality == target.dimensionality and _close(rate.to(target.units).magnitude,
                                                                       target.magnitude):
                return True
    return False


def _duration(amount: pint.Quantity) -> bool:
    return amount.dimensionality == units().Quantity(1, "second").dimensionality


def _kept_for_a_window(qs: list[Quantity], run: tuple[int, int], result: tuple[int, int], value: pint.Quantity,
                       target: pint.Quantity, rates: frozenset[pint.Quantity]) -> list[pint.Quantity]:
    """What a rate kept for a retention window amounts to, in ``target``'s dimension: "29 GB/day → ~870 GB for 30
    days" (the window right after the result), or "TTL at 30 days ≈ 360 GB" where the document states its 12 GB/day
    (the window is the input)."""
    after = result[1] + 1
    kept = [value * qs[after].amount] if after < len(qs) and _duration(qs[after].amount) else []
    if run[0] == run[1] and _duration(value):
        kept += [rate * value for rate in rates if _is_bytes(rate * value)]
    return [amount for amount in kept if amount.dimensionality == target.dimensionality]


def stated_rates(texts: list[str]) -> frozenset[pint.Quantity]:
    """Every rate written in ``texts``, of things or of bytes ("72M rows/day", "50k/min", "12 GB/day"), as written."""
    second = units().Quantity(1, "second")
    return frozenset(q.amount for text in texts for q in quantities(text)
                     if (q.amount * second).dimensionless or _is_bytes(q.amount * second))


def _sum_of_earlier(text: str, qs: list[Quantity], earlier: list[tuple[int, int]], target: pint.Quantity) -> bool:
    """"3,000/s, plus check-ins ≈ 667/s, so ~3,700/s": the result adds up earlier figures."""
    values = [v for v in (_expression(text, qs, *r) for r in earlier) if v.dimensionality == target.dimensionality]
    sums = [a + b for a, b in combinations(values, 2)] + [a + b + c for a, b, c in combinations(values, 3)]
    return any(_close(total.to(target.units).magnitude, target.magnitude) for total in sums)


def _through_one_more(left: pint.Quantity, right: Quantity, others: list[pint.Quantity]) -> tuple[bool, str]:
    """Whether ``left`` ⇒ ``right`` holds through one other number of the sentence."""
    target = right.amount
    candidates = [left * o for o in others] + [left / o for o in others if o.magnitude != 0] + \
        ([o / left for o in others] if left.magnitude != 0 else [])
    comparable = [c for c in candidates if c.dimensionality == target.dimensionality]
    if any(_close(c.to(target.units).magnitude, target.magnitude) for c in comparable):
        return True, ""
    if comparable:
        return False, f"should be about {_show(comparable[0], target.units)}"
    if right.is_bytes and not _is_bytes(left):
        return False, f"{_show(left)} is not an amount of bytes"
    return False, ""  # nothing to compare with: the caller gives the benefit of the doubt


@lru_cache(maxsize=4096)  # each check of the rubric that reads the arithmetic asks again
def find_calculation(text: str, rates: frozenset[pint.Quantity] = frozenset()
                     ) -> tuple[int, bool, str, int] | None:
    """(index of the derived quantity, whether every step checks out, the correction, the index of the wrong
    result or -1) for ``text``."""
    qs = quantities(text)
    for j in range(1, len(qs)):
        earlier = qs[:j]
        if not any(q.has_unit for q in earlier + [qs[j]]):
            continue
        if not RESULT_MARKER.search(text[earlier[0].end:qs[j].start]):
            continue
        if ASSIGNMENT.search(text[earlier[-1].end:qs[j].start]):
            continue  # "SET lease_expires_at = now() + 30 s": a setting in code, not a result
        if any(q.amount.magnitude == qs[j].amount.magnitude and (q.amount.units == qs[j].amount.units or
                                                                  not q.has_unit) for q in earlier):
            continue  # restating a number is not deriving one ("poll_interval = 5 so picked up within ~5 s")
        steps = check_steps(text, qs, rates)
        if steps.holds and not steps.verified and all(q.amount.dimensionless for q in qs):
            return None  # "4 shards; partition = hash(job_id) % 256": counts that nothing shows are derived
        if steps.holds and not steps.verified and not qs[j].has_unit and sum(q.has_unit for q in earlier) < 2 and \
                all(a == b for a, b in _runs(text, qs)):
            return None  # "down 2 hours → fine, since there are 3": nothing was combined into the bare number
        return j, steps.holds, steps.correction, steps.wrong_at
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


def _same_figure(a: pint.Quantity, b: pint.Quantity) -> bool:
    """"8,300/s" again, or "170k" for "170,000 writes/s" with its unit left off (a figure that large is no
    coincidence)."""
    if a.dimensionality == b.dimensionality:
        return b.magnitude != 0 and abs(a.to(b.units).magnitude / b.magnitude - 1) < 0.01
    return (a.dimensionless or b.dimensionless) and a.magnitude >= 100 and b.magnitude != 0 and \
        abs(a.magnitude / b.magnitude - 1) < 0.01


def calculations(doc: Document) -> list[Calculation]:
    """Every derivation, in document order. One built on a figure an earlier step got wrong does not check
    out either ("50,000 / 60 ≈ 8,300/s" then "8,300/s × 2 s = 16,600 running"): its result is as far off."""
    if "calculations" not in doc.derived:  # several checks of one score ask: worked out once per document
        doc.derived["calculations"] = _calculations(doc)
    return doc.derived["calculations"]


def _calculations(doc: Document) -> list[Calculation]:
    seen: set[str] = set()
    found = []
    every = _sentences(doc)
    rates = stated_rates([sentence for sentence, _ in every])
    wrong_figures: list[tuple[pint.Quantity, str, int]] = []  # (figure, as written, line)
    for sentence, line_of in every:
        key = " ".join(sentence.lower().split())
        hit = find_calculation(sentence, rates)
        if hit is None or key in seen:
            continue
        seen.add(key)
        index, ok, correction, wrong_at = hit
        qs = quantities(sentence)
        derived = qs[index]
        if ok:
            inherited = next(((q, figure) for q in qs[:index] for figure in wrong_figures
                              if _same_figure(q.amount, figure[0])), None)
            if inherited:
                (_, written, line) = inherited[1]
                ok, correction = False, f"built on {written}, which line {line} got wrong"
                wrong_at = index
        if not ok and wrong_at >= 0:
            wrong = qs[wrong_at]
            wrong_figures.append((wrong.amount, sentence[wrong.start:wrong.end].strip(), line_of(wrong.start)))
        dims = frozenset(name for name, p in DIMENSIONS.items() if p.search(sentence))
        found.append(Calculation(Evidence.quote(line_of(derived.start), sentence), dims, ok, correction, sentence))
    return found


def mostly_wrong(doc: Document) -> str:
    """Why the attempt's numbers are no evidence, when most of its derivations are wrong; else ""."""
    found = calculations(doc)
    wrong = sum(not c.checks_out for c in found)
    if wrong >= MOSTLY_WRONG and wrong > len(found) - wrong:
        return f"{wrong} of its {len(found)} derivations do not check out, so its other figures are no estimate"
    return ""


def is_wrong_step_of_mostly_wrong(doc: Document) -> Callable[[str], bool] | None:
    """Whether a sentence holds a derivation that does not check out, in an attempt whose derivations are mostly
    wrong: such a sentence earns nothing in any check (the arithmetic checks still read it, to show the right value).
    None when the derivations are not mostly wrong: one slip in arithmetic that is otherwise right is charged to the
    calculations alone."""
    if not mostly_wrong(doc):
        return None
    wrong = [" ".join(c.sentence.split()) for c in calculations(doc) if not c.checks_out]
    # The sentence comes from the raw text ("= **8,300 executions/s**"), the derivation from the parsed one.
    return lambda sentence: bool(words := " ".join(strip_markup(sentence).split())) and any(words in w for w in wrong)


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
MOSTLY_WRONG = 3  # wrong derivations, and more wrong than right: the arithmetic was not done
ASSUMPTIONS_FOR_FULL = 3


def _credited(doc: Document) -> list[Calculation]:
    """The derivations that check out, unless most do not: then the few right ones are no sign the arithmetic was
    done (a division by 60 right among eleven steps off by 10x), and none is credited."""
    return [] if mostly_wrong(doc) else [c for c in calculations(doc) if c.checks_out]


def derivations(doc: Document) -> Finding:
    found = calculations(doc)
    good = _credited(doc)
    missing = [f"does not check out, not counted: line {c.evidence.line}: {c.evidence.text} ({c.correction})"
               for c in found if not c.checks_out]
    if len(good) < CALCULATIONS_FOR_FULL:
        missing.insert(0, mostly_wrong(doc) or f"{len(good)} of the {CALCULATIONS_FOR_FULL} derivations needed "
                                               "(numbers with units combined into a new number)")
    return Finding(min(CALCULATIONS_FOR_FULL, len(good)) / CALCULATIONS_FOR_FULL, [c.evidence for c in good], missing)


def dimensions(doc: Document) -> Finding:
    good = _credited(doc)
    covered = sorted(set().union(*(c.dimensions for c in good))) if good else []
    fraction = 1.0 if len(covered) >= 3 else 0.5 if len(covered) == 2 else 0.0
    evidence = [Evidence(0, f"derivations cover: {', '.join(covered)}")] if covered else []
    absent = [d for d in DIMENSIONS if d not in covered]
    return Finding(fraction, evidence, [] if fraction == 1 else [f"no derivation about: {', '.join(absent)}"])


# A sentence that qualifies its number is not restating the assumption: "peak", "at 10x", "per worker".
QUALIFIED = re.compile(r"\b(peak|average|avg|mean|median|p\d\d|10\s?[x×]|growth|grow|next year|"
                       r"per (?!(s|sec|second|min|minute|h|hr|hour|d|day|week|month|year)\b)\w+|each|at most|up to|"
                       r"at least|today|later|"
                       r"instead|headroom|retention|per day|daily|\d+\s?(days|weeks|months))\b", re.I)
INCONSISTENT_FACTOR = 2.0


def inconsistencies(doc: Document) -> list[str]:
    """The same counted quantity stated with different values in sections 1 and 2 ("10M jobs" and "2M jobs").

    Only the two sections where the scale is stated: later sections quote other systems' figures and 10x.
    """
    first: dict[tuple[str, str], tuple[int, str, float]] = {}
    found = []
    for unit in doc.section_units(1) + doc.section_units(2):
        for _, sentence in sentences(unit.text):
            if QUALIFIED.search(sentence):
                continue
            for q in quantities(sentence):
                if not q.noun or q.is_multiplier:
                    continue
                key = (q.noun, str(q.amount.dimensionality))
                value = q.amount.to_base_units().magnitude
                if key not in first:
                    first[key] = (unit.section or 0, sentence[q.start:q.end], value)
                    continue
                section, stated, earlier = first[key]
                if section != (unit.section or 0) and earlier and value and \
                        max(value, earlier) / min(value, earlier) > INCONSISTENT_FACTOR:
                    found.append(f"stated differently: '{stated}' in section {section} and "
                                 f"'{sentence[q.start:q.end]}' at line {unit.first_line}")
    return found


def assumptions(doc: Document) -> Finding:
    scoped = [u for u in doc.section_units(1) + doc.section_units(2) if u.kind != "heading"]
    stated = stated_quantities(scoped or doc.content_units())
    distinct: dict[str, tuple[Unit, str]] = {}
    for unit, text in stated:
        distinct.setdefault(text.lower(), (unit, text))
    by_line: dict[int, list[str]] = {}  # a paragraph's numbers, quoted at the lines they are on
    for unit, text in distinct.values():
        by_line.setdefault(unit.line_at(unit.text.find(text)).number, []).append(text)
    evidence = [Evidence.quote(line, "; ".join(texts)) for line, texts in by_line.items()]
    differing = inconsistencies(doc)
    if len(distinct) >= ASSUMPTIONS_FOR_FULL and not differing:
        return Finding(1.0, evidence)
    short = [] if len(distinct) >= ASSUMPTIONS_FOR_FULL else [
        f"{len(distinct)} scale numbers with units stated before the design; {ASSUMPTIONS_FOR_FULL} needed"]
    return Finding(0.5 if distinct else 0.0, evidence, short + differing)
