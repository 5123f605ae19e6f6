"""Failure analysis, judged per failure: detection AND containment AND recovery, each in that failure's item.

Legs are recognised either by a label with something after it ("Containment: the stale token is
rejected by ...") or by what a sentence says it does ("the reaper notices the lease expired ...").
The nouns themselves do not count on their own, so "Kubernetes handles detection, containment and
recovery" earns nothing, and neither does "it retries", nor the legs' names listed as verbs ("detected,
contained and recovered by Kafka").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from d2kit.scoring.concepts import has_token
from d2kit.scoring.document import (
    PLAIN_LABELS,
    Document,
    Item,
    Unit,
    is_question,
    one_per_lead,
    sentences,
    split_items,
)
from d2kit.scoring.evidence import Evidence, Finding, pattern
from d2kit.scoring.negation import affirmed, is_denied
from d2kit.scoring.prose import word_count

LEGS: dict[str, re.Pattern[str]] = {
    "detection": pattern(
        r"\bdetect(s|ed)?\b", r"\bnotic(e|es|ed)\b", r"heartbeats?\b.{0,40}\b(stop|miss|late|absent|lapse)",
        r"\b(miss(es|ed)?|no) \w*\s?heartbeats?", r"\blease\b.{0,30}\bexpir", r"\bexpir(e|es|ed|y)\b",
        r"\btime[sd]? ?out\b", r"\btimeouts?\b", r"\balerts?\b", r"\bmonitor", r"\bhealth[- ]?checks?\b",
        r"\bprob(e|es|ed)\b", r"\bpages? (the )?on[- ]call", r"\bwatchdog", r"\bwe (know|see|find|learn)\b",
        r"\b(reaper|sweeper|janitor)\b", r"\bmetrics?\b", r"\blag\b", r"\bfails? to (renew|acquire|connect|reach)",
        r"\bconnection (drops|errors?|refused|lost)", r"\bsees?\b", r"\bfinds?\b", r"\bobserv", r"\bdashboard",
        r"\bliveness\b", r"\bstops? (renewing|heartbeating|responding|answering)", r"\bunreachable\b",
        r"\bseen (as|through|in|by|from|when)\b",
        r"\b(lease|claim|session|lock)s?\b.{0,30}\b(lapses?|lapsed|runs? out|ran out)",  # "its claim runs out"
        r"\bsame detection\b", r"\bdetection (is )?(as above|the same)\b",  # the failure before's, by reference
    ),
    "containment": pattern(
        r"\bcontain(s|ed)?\b", r"\bfenc", r"\bisolat", r"\bquarantin", r"\breject", r"\brefus", r"\bstale\b",
        r"\bcannot\b", r"\bcan'?t\b", r"\bonly one\b", r"\bcaps?\b", r"\bcapped\b", r"\blimit",
        r"\bat most\b(?!\s+\d+\s?(ms|s|sec|seconds?|mins?|minutes?|h|hours?)\b)",  # "after at most 60 s" is a time
        r"\bthrottl", r"\bpaus(e|es|ed)\b", r"\bstops? (claim|dispatch|accept|writ|materiali|taking)",
        r"\bread[- ]only\b", r"\bcircuit", r"\bbulkhead", r"\bblast radius", r"\bself[- ]fenc",
        r"\bkills? (itself|its own|the)\b", r"\babort", r"\bback[- ]?pressure", r"\bbounded\b", r"\bno (new|further)\b",
        r"\bblock(s|ed)?\b", r"\bdrain", r"\bsuspend", r"\bshed", r"\bnever\b", r"\bguard", r"\bunique\b",
        r"\bno[- ]op\b", r"\bloses? (its|the) (lease|claim)", r"\bgives? up\b", r"\bbuffer", r"\bignor(e|es|ed)\b",
        r"\bdiscard", r"\b(one|a single|the same) transaction\b", r"\batomic", r"\bdamage (is )?(only|limited)",
        # The blast radius said plainly: "only that box's runs are affected", "the others are unaffected", and the
        # stale writer's "writes fail".
        r"\b(is|are|stays?|remains?|keeps?) (\w+ )?unaffected\b",
        r"\bonly (that|this|its|their|the|one)\b[^.;|]{0,40}\b(is|are) affected\b",
        r"\bonly (that|this|its|their|one)\b[^.;|]{0,40}\b(stall|stop|slow)",
        r"\b(old|stale|zombie|previous|deposed)\b[^.;|]{0,30}\bwrites? fail",
    ),
    "recovery": pattern(
        r"\brecover(s|ed)?\b", r"\bre-?dispatch", r"\bre-?queue", r"\bre-?schedul", r"\bretr(y|ies|ied)\b",
        r"\bre-?run", r"\bresum", r"\breplay", r"\bfail ?over", r"\bfails over\b", r"\bpromot", r"\bcatch(es)?[- ]?up",
        r"\brestart", r"\brebuil", r"\breconcil", r"\btakes? over\b", r"\bback to (ready|the queue)",
        r"\breturns? (it |the \w+ )?to\b", r"\bre-?claim", r"\bre-?elect", r"\bbackfill", r"\bre-?materiali",
        r"\brejoin", r"\bheal", r"\brestor", r"\bpick(s|ed)? (it |them )?up\b",
        r"\b(goes|go|put|puts|moved?) (\w+ ){0,2}back\b", r"\bcontinues?\b", r"\breplac",
        r"\bmoves? (it |the \w+ )?(back|on)\b", r"\bre-?sync", r"\bdrains? (the )?backlog", r"\bbacklog drains",
        # SQS's words: the message "becomes visible again" and "is received again" by another consumer.
        r"\b(visible|available) again\b", r"\bsets? (\w+ ){0,2}back\b",
        r"\b(claimed|received|delivered|planned|handed out|picked up|started|taken|given|assigned) again\b",
        # the run done over, said plainly: "the job runs again on another worker", "the run starts again"
        r"\b(runs?|ran|starts?) (it |the (job|run|task) )?again\b",
        r"\b(another|other|a new|the next) (\w+ )?(worker|runner|consumer|node|replica|planner|scheduler|instance|"
        r"owner|leader|machine|host|process)s? (takes?|claims?|picks?|runs?|receives?|gets?|plans?|handles?)\b",
        r"\b(the |a )?(new|next|fresh|retried) (\w+ )?(attempt|copy|run|execution)s? (finish|complet|succeed|runs? to)",
        r"\bstarts? (a )?(new|fresh|another) (try|attempt|run|copy)", r"\breassign",
        r"\bre-?(produc|publish|enqueu|submit)",
        r"\b(attempt|try) \d+ (runs|finishes|succeeds|starts|completes)\b",  # "attempt 2 runs and finishes normally"
    ),
}
# "Containment: ..." or, in a sentence, "containment is that only its runs are affected".
LABEL = re.compile(
    r"(?:^|(?<=[\s.;(]))\W{0,3}(detect(?:ed|ion|s)?|contain(?:ed|ment|s)?|recover(?:ed|y|s)?|"
    + "|".join(PLAIN_LABELS.values()) + r")\b(?:\W{0,3}[:—–-]|(?<=ion|ent|ery) is)\s*", re.I
)
# Column headings practitioners give the legs: "How we notice | How we limit the damage | How we get back".
LEG_HEADERS: dict[str, re.Pattern[str]] = {
    "detection": pattern(r"\bnotic", r"\bspot", r"\bsymptom", r"\bsignal", r"\balert", r"how we (know|see|find)",
                         r"\bmonitor", r"\bobserv"),
    "containment": pattern(r"limit(ing)? the (damage|blast)", r"blast radius", r"\bmitigat", r"\bprotect",
                           r"\bisolat", r"\bprevent", r"\bsafeguard", r"keep (it|the damage) (small|local)",
                           # "How we limit damage", "What stops the damage", "How we stop it spreading"
                           r"\b(limit|stop)(s|ping)?\b.{0,12}\b(damage|spread\w*)",
                           # the plain label as a heading: "Damage kept small by", "Kept from spreading"
                           r"\bkept (small|from spreading)\b"),
    "recovery": pattern(r"get(ting)? back", r"\bheal", r"\brestor", r"\brepair", r"\bback to normal",
                        r"\bresolution", r"\bfix\b", r"\bremed"),
}
# "Detection: not needed, since ...", or a table's Detection cell "None; no result arrives": a leg that
# opens by saying it is absent is no leg, however many words follow, whether it is labelled or a table's cell.
NO_LEG = re.compile(r"^\W*(not (needed|required|applicable|possible|necessary)|none\b|nothing\b|n/?a\b|no need|"
                    r"unnecessary|impossible|skipped|no (detection|containment|recovery)\b)", re.I)
# "detected, contained and recovered": the legs' names listed, which says none of them.
LEG_NAMES_LISTED = re.compile(r"\b(detect|contain|recover)\w*(\s*(,|/|&|\band\b|\bor\b)\s*(and\s+)?"
                              r"(detect|contain|recover)\w*)+", re.I)
MIN_LEG_WORDS = 3  # after a label: "Detection: yes" is not a leg
MIN_SENTENCE_WORDS = 5

# The failures the prompt names. Each is covered by an item whose title or text matches.
WORKER = r"(worker|executor|runner|consumer|agent|machine)"  # what runs the job, in the words systems use
SCHEDULER = r"(scheduler|planner|dispatcher|coordinator)"
FAILURE_CLASSES: dict[str, re.Pattern[str]] = {
    "worker death": pattern(rf"{WORKER}.{{0,40}}\b(crash|die|dies|died|dying|dead|death|killed|oom|lost|fail)",
                            rf"\b(crash|death|loss) of an? {WORKER}"),
    "worker partition or pause": pattern(r"partition", r"split[- ]brain", r"zombie", r"\bgc\b", r"\bpaus",
                                         r"stall", r"\bhung\b", r"slow worker", r"unreachable", r"\bcut off\b",
                                         r"\bfr(o|ee)z(en|es?)\b"),
    "scheduler death": pattern(rf"{SCHEDULER}.{{0,40}}\b(crash|die|dies|died|dying|dead|down|fail|restart|lost)",
                               r"leader.{0,30}\b(loss|lost|dies|died|dying|fail)",
                               r"replica.{0,30}\b(dies|died|dying|crash|fail)"),
    "store failure": pattern(r"(database|\bdb\b|postgres|storage|primary|\bstore\b|queue|broker|kafka|redis)"
                             r".{0,40}\b(fail|down|crash|outage|unavailable|dies|died|lost)", r"failover"),
}

# The criterion's full mark is about the failures the prompt names; a complete analysis of another one
# (a disk filling up, a job exiting non-zero) is worth half.
NOISY_TENANT = pattern(r"(noisy|heavy|greedy|abusive|one|single|long)\W+(\w+\W+){0,2}(tenant|customer|team)",
                       r"\b(tenant|customer|team)s?\b.{0,40}\b(starv|flood|hog|pins?)")
OFF_PROMPT_SHARE = 0.5


def _names_a_prompt_failure(item: FailureItem) -> bool:
    text = item.text  # the title is part of it; joining the two would read across their seam
    return any(p.search(text) for p in FAILURE_CLASSES.values()) or bool(NOISY_TENANT.search(text))


# Items that need all three legs for full credit, and the share two-leg items can earn at most.
ITEMS_FOR_FULL = 4
TWO_LEG_SHARE = 1 / 12
TWO_LEG_CAP = 1 / 3


@dataclass
class FailureItem:
    title: str
    first_line: int
    legs: dict[str, Evidence] = field(default_factory=dict)
    text: str = ""
    unfenced: bool = False  # a containment leg was refused: nothing in the design fences the old copy

    @property
    def complete(self) -> bool:
        return len(self.legs) == 3

    def missing_legs(self) -> list[str]:
        return [leg for leg in LEGS if leg not in self.legs]


def _leg_of(label: str) -> str:
    plain = next((leg for leg, words in PLAIN_LABELS.items() if re.fullmatch(f"(?:{words}):", label + ":", re.I)),
                 None)
    return plain or {"d": "detection", "c": "containment", "r": "recovery"}[label[0].lower()]


def _header_leg(header: str) -> str | None:
    label = LABEL.match(header + ":")
    if label:
        return _leg_of(label.group(1))
    return next((leg for leg, words in LEG_HEADERS.items() if words.search(header)), None)


def _legs_in_unit(unit: Unit, found: dict[str, Evidence]) -> None:
    header_legs = [_header_leg(h) for h in unit.header] if unit.is_table_body else []
    if any(header_legs):  # a table whose columns are the legs, in whatever words
        for leg, cell in zip(header_legs, unit.cells, strict=False):
            if leg and word_count(cell) >= 3 and not NO_LEG.match(cell):
                found.setdefault(leg, Evidence.quote(unit.first_line, cell))
        # A column whose heading names no leg ("Handling", "How we limit damage") is read as sentences are,
        # for the legs no heading names: the same words score the same in a cell as in a paragraph.
        unnamed = [leg for leg in LEGS if leg not in header_legs]
        for leg, cell in list(zip(header_legs, unit.cells, strict=False))[1:]:
            if leg is None and not NO_LEG.match(cell):
                _legs_in_sentences(unit, cell, unnamed, found)
        return
    text = unit.text
    labels = list(LABEL.finditer(text))
    cuts = [0] + [m.start() for m in labels] + [len(text)]
    for start, end in zip(cuts, cuts[1:], strict=False):
        segment = text[start:end]
        label = LABEL.match(segment)
        if label:
            leg_text = segment[label.end():]
            if word_count(leg_text) >= MIN_LEG_WORDS and not NO_LEG.match(leg_text):
                found.setdefault(_leg_of(label.group(1)), Evidence.of(unit, re.compile(re.escape(label.group(1)))))
            continue
        _legs_in_sentences(unit, segment, list(LEGS), found)


def _legs_in_sentences(unit: Unit, text: str, legs: list[str], found: dict[str, Evidence]) -> None:
    """The ``legs`` that ``text``'s sentences say they do, not by label."""
    for _, sentence in sentences(LEG_NAMES_LISTED.sub(" ", text)):
        if word_count(sentence) < MIN_SENTENCE_WORDS or is_question(sentence):
            continue
        for leg in legs:
            if leg not in found and affirmed(LEGS[leg], sentence):  # "cannot take over" recovers nothing
                found[leg] = Evidence.of(unit, LEGS[leg])


def _analyse(item: Item) -> FailureItem:
    result = FailureItem(title=item.title, first_line=item.first_line, text=item.text)
    for unit in item.units:
        if unit.kind != "heading":
            _legs_in_unit(unit, result.legs)
    return result


# "A worker dying is detected by ...; ... A history host dying is detected by ...": a paragraph that walks through
# several failures opens each with the failure, in its first words, and how it is noticed.
FAILURE_OPENING = re.compile(r"^\W*(\S+\s+){0,6}?\S*?(dies|dying|died|dead|death|crash(es|ed|ing)?|fails|failing|"
                             r"failure|fail ?over|partition(s|ed)?|paus(es|ed)|outage|goes down|is down|lost|loss|"
                             r"flood(s|ing)?|stall(s|ed)?|hangs|hung|unreachable|noisy)\b", re.I)


def _opens_a_failure(sentence: str) -> bool:
    """Not a leg's label ("Recovered: back to READY, DEAD after 5 tries"): that continues the failure before it."""
    return not LABEL.match(sentence) and bool(FAILURE_OPENING.match(sentence)) and \
        affirmed(LEGS["detection"], sentence) is not None


# A worker cut off or paused while its job still runs: the damage is the old copy's writes, and what contains it is a
# token the store checks (the rubric's containment leg: "a refused stale token").
UNFENCED_WORKER = re.compile(rf"\b{WORKER}s?\b|\bzombie", re.I)


# "Worker crash, detection: ...", then "Worker crash, containment: ..." on the next line: one failure written one leg
# per line with its name said again on each (h20-12, h20-05). The lines are one failure, as the same legs under one
# bullet are.
NAMED_LEG = re.compile(r"^\W*(?P<name>[^,:;.—–|()]{3,60}?(?:\s*\([^()]{0,60}\))?)\s*(?:,|\s[—–-])\s*"
                       r"(?P<leg>detect(?:ed|ion|s)?|contain(?:ed|ment|s)?|recover(?:ed|y|s)?)\b\W{0,3}[:—–-]", re.I)


def _same_failure(name: str, other: str) -> bool:
    """One name is the other's first words: "Worker partitioned" and "Worker partitioned while running"."""
    first, second = sorted((name.lower().split(), other.lower().split()), key=len)
    return second[:len(first)] == first


def _join_named_legs(items: list[Item]) -> list[Item]:
    joined: list[Item] = []
    name, legs = "", set()  # the failure the item before named, and the legs it has labelled so far
    for item in items:
        named = NAMED_LEG.match(item.text)
        leg = _leg_of(named.group("leg")) if named else ""
        if named and joined and name and _same_failure(name, named.group("name")) and leg not in legs:
            joined[-1] = Item(title=name, units=joined[-1].units + item.units)
            legs.add(leg)
            continue
        joined.append(item)
        name, legs = (named.group("name").strip(), {leg}) if named else ("", set())
    return joined


def failure_items(doc: Document) -> list[FailureItem]:
    items = [_analyse(one) for item in _join_named_legs(split_items(doc.sections.get(7)))
             for one in one_per_lead(item, _opens_a_failure)]
    if items and not has_token(doc):
        # Re-dispatch with no token anywhere contains nothing: the old copy keeps running and writing.
        for item in items:
            if _analysed(FAILURE_CLASSES["worker partition or pause"], item.text) and \
                    UNFENCED_WORKER.search(item.text) and item.legs.pop("containment", None):
                item.unfenced = True
    return items


UNFENCED_NOTE = (" (its containment needs a fencing token, and the design has none: the old copy keeps running "
                 "and its writes still land)")


def triads(doc: Document) -> Finding:
    items = failure_items(doc)
    if not items:
        return Finding(0.0, missing=["Section 7 (failure and recovery) has no failures to analyse."])
    complete = [i for i in items if i.complete]
    two_legged = [i for i in items if len(i.legs) == 2]
    off_prompt = [i for i in complete if not _names_a_prompt_failure(i)]
    counted = len(complete) - (1 - OFF_PROMPT_SHARE) * len(off_prompt)
    fraction = min(ITEMS_FOR_FULL, counted) / ITEMS_FOR_FULL
    fraction += min(TWO_LEG_CAP, TWO_LEG_SHARE * len(two_legged))
    def tag(item: FailureItem) -> str:
        return item.title if item.complete else f"{item.title}, two legs of three"

    evidence = [Evidence(ev.line, f"[{tag(i)}] {ev.text if LABEL.match(ev.text) else f'{leg}: {ev.text}'}")
                for i in complete + two_legged for leg, ev in i.legs.items()]
    missing = [f"'{i.title}' (line {i.first_line}) has no {' and no '.join(i.missing_legs())}"
               + (UNFENCED_NOTE if i.unfenced else "") for i in items if not i.complete]
    if len(complete) < ITEMS_FOR_FULL:
        missing.insert(0, f"{len(complete)} of the {ITEMS_FOR_FULL} failures needed have all three legs.")
    if off_prompt and counted < ITEMS_FOR_FULL:
        missing.append("not a failure the prompt names (worker, partition, scheduler, store, noisy tenant), half "
                       "credit: " + ", ".join(f"'{i.title}'" for i in off_prompt))
    return Finding(round(min(1.0, fraction), 4), evidence, missing)


# "A network partition doesn't really apply here": a failure named to be waved away is not analysed.
DISMISSED = re.compile(r"^[\w\s'-]{0,30}?\b((does|do)(n'?t| not) (really |even )?(apply|arise|come up)|"
                       r"(can|could)(n'?t| not) (really |even )?(happen|occur)|(is|are)(n'?t| not) (really )?"
                       r"(a concern|an issue|a problem|a risk|relevant|applicable)|not applicable)\b", re.I)


def _analysed(class_pattern: re.Pattern[str], text: str) -> bool:
    """Whether ``text`` names the failure class other than to deny or dismiss it."""
    return any(not is_denied(text, m.start(), m.end()) and not DISMISSED.match(text[m.end():m.end() + 80])
               for m in class_pattern.finditer(text))


def coverage(doc: Document) -> Finding:
    items = failure_items(doc)
    result = Finding(0.0)
    for name, class_pattern in FAILURE_CLASSES.items():
        matching = [i for i in items if _analysed(class_pattern, i.text)]
        best = max(matching, key=lambda i: len(i.legs), default=None)
        if best is None or len(best.legs) < 2:
            result.missing.append(f"{name}: not analysed with detection, containment and recovery")
            continue
        share = 1.0 if best.complete else 0.5
        result.fraction += share / len(FAILURE_CLASSES)
        result.evidence.append(Evidence(best.first_line, f"{name}: '{best.title}'"))
        if share < 1:
            result.missing.append(f"{name}: '{best.title}' has no {' and no '.join(best.missing_legs())}")
    result.fraction = round(result.fraction, 4)
    return result
