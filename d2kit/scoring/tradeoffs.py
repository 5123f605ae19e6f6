"""Rejected alternatives, judged per item of section 9: the alternative AND the reason it lost.

Every item of section 9 names an alternative by being there; it earns the points only with a reason
("because", "would", "costs", "instead", ...) inside a sentence long enough to say what the cost is.
An alternative without a reason is worth a little, and only up to a cap: a list of product names
under the heading is the anti-pattern section 9 exists to expose. A paragraph that rejects several
alternatives, a sentence each ("I turned down A: ... I turned down B because ..."), is several items:
the same content as a list.
"""

from __future__ import annotations

import re

from d2kit.scoring.concepts import FENCING, LEASE, double_fire_guard
from d2kit.scoring.contradictions import denials
from d2kit.scoring.document import Document, Item, Unit, one_per_lead, split_items
from d2kit.scoring.evidence import Evidence, Finding, pattern
from d2kit.scoring.negation import affirmed
from d2kit.scoring.prose import REASON, is_prose
from d2kit.scoring.wrong_answers import COOPERATION

REJECTIONS_FOR_FULL = 3
MIN_REJECTION_WORDS = 10
TERSE_SHARE = 2 / 3
# An alternative to the API's format is plumbing ("GraphQL", "offset pagination"); the prompt is lost by spending
# the time there. A rejection of one earns half unless it also touches a part that can fail.
PLUMBING = pattern(r"graphql", r"\bgrpc\b", r"\brest(ful)?\b", r"\bxml\b", r"\bjson\b", r"\bsoap\b",
                   r"paginat", r"\bsdk\b", r"openapi", r"swagger", r"\bui\b", r"front[- ]?end", r"oauth", r"\bjwt",
                   r"api (key|version)")
LOAD_BEARING = pattern(r"\bstor(e|age)\b", r"database", r"\bqueue", r"\blease", r"\bleader", r"schedul", r"worker",
                       r"dispatch", r"partition", r"\block", r"consensus", r"\bclock", r"\bfenc", r"duplicate",
                       r"exactly[- ]once", r"at[- ]least[- ]once", r"fail ?over", r"replica")
PLUMBING_SHARE = 0.5  # a reason written as a fragment ("failover gap, still needs fencing") is still a reason
# The name of the alternative ends at its label: "etcd instead of ZooKeeper: considered" has no reason.
TITLE_LABEL = re.compile(r"^.{1,80}?(?::|\s[—–]\s|\s-\s|\s\|\s)")
# "Postgres: rejected because we use Postgres": a reason that says the alternative is in the design.
SELF_USE = re.compile(r"\b(because|although|though|but|as|since)\b.{0,20}\bwe (already |also |still )?"
                      r"(use|chose|picked|have|run)\b(?P<what>(\s+[\w-]+){0,3})", re.I)
# "... but we already run DynamoDB": what the design uses is named, and it is another thing than the alternative.
STOPWORDS = frozenset({"a", "an", "the", "one", "it", "them", "that", "this", "these", "those", "for", "in", "at",
                       "as", "and", "to", "of", "on", "here", "anyway", "already", "too", "its", "our"})
PRONOUNS = frozenset({"it", "them", "that", "this", "these", "those", "one"})  # the alternative, referred back to


def _uses_the_alternative(item: Item) -> bool:
    """A reason says the design uses the alternative itself ("Postgres: rejected because we use Postgres", "... because
    we use it"), not another thing it names ("... but we already run DynamoDB")."""
    title = {w.lower() for w in re.findall(r"[\w-]+", item.title)}
    for match in SELF_USE.finditer(item.text):
        named = [w.lower() for w in re.findall(r"[\w-]+", match.group("what"))]
        content = [w for w in named if w not in STOPWORDS]
        if not content or named[0] in PRONOUNS or any(w in title for w in content):
            return True
    return False
# "RabbitMQ: only at-least-once": faulting an alternative for lacking exactly-once, which no system gives on its
# own, is the delivery question's wrong answer used as a reason; unless the item says why nothing gives it.
WRONG_PREMISE = pattern(r"\b(doesn'?t|does not|cannot|can'?t|won'?t|no|never)\b (\w+ ){0,2}exactly[- ]once",
                        r"\bonly (gives? |offers? |provides? )?at[- ]least[- ]once",
                        r"exactly[- ]once is (\w+ )?better",
                        # at-least-once itself rejected for exactly-once: the promise no system keeps on its own
                        r"\b(rejected|turned down|ruled out|decided against)\W+(\w+\W+){0,2}at[- ]least[- ]once",
                        r"\bin favou?r of exactly[- ]once")
# A sentence that opens by rejecting something: one alternative of a paragraph that rejects several.
REJECTION_LEAD = re.compile(r"^\W*(i|we)\s+(also\s+)?(turned down|rejected|ruled out|decided against|passed on|"
                            r"considered and rejected|considered|chose not to|did not (choose|pick|use))\b", re.I)
# ... or by naming it, as a bullet would: "Redis timers: loses acknowledged writes on failover." (a name of up to six
# words and a colon). The same rejections run together in a paragraph are the same items as one per bullet; a label
# that is the verdict or its reason ("Rejected here: ...", "Why: ...") names no other alternative.
NAME_LEAD = re.compile(r"^\W*(?!(rejected|rejecting|reject|why|reason|because|but|however|verdict|instead)\b)"
                       r"[^\s:.;]+( [^\s:.;]+){0,5}:\s", re.I)

# The partitioned worker's answer (a lease that expires, a token the store checks) and the replicas' answer (more
# than one scheduler, kept from firing together): rejecting one while the design puts nothing in its place is a
# follow-up's wrong answer given as a reason (re-dispatch without a token; one scheduler, so nothing survives its
# death). Each is (what the item rejects, what in the design would stand in its place).
REPLICATED_SCHEDULER = pattern(r"\bleader", r"\bconsensus\b", r"\b(raft|paxos|zookeeper|etcd)\b",
                               r"\bdistributed (scheduler|lock)", r"\bcluster of (schedulers|nodes|servers)",
                               r"\b(replicated|redundant|standby|multiple|several) (\w+ )?(scheduler|node|server)s?\b",
                               r"\breplicas?\b")
# The delivery question's answer: exactly-once effects need the job's cooperation, its writes deduplicated on a key.
# Rejecting idempotent handlers while no sentence of the design asks the job for anything is the exactly-once promise
# given as a reason ("I rejected requiring idempotent handlers because exactly-once dispatch removes duplicates").
JOB_COOPERATION = pattern(r"\bidempoten")
# "Kafka: overkill", "a job table: unnecessary, the crontab is simpler": the rubric's no-hire signal, an opinion of
# the alternative, not what it would cost or break here. A reason that is only such words is no reason; one that
# also names how the alternative fails or what it strains ("simpler, but when it pauses all runs are late") is one.
OPINION = pattern(r"\boverkill\b", r"\bover-?engineer\w*", r"\bunnecessary\b", r"\bnot (really )?needed\b",
                  r"\bno need\b", r"\bsimpler\b", r"\btoo (heavy|complex|complicated|much( \w+)?)\b",
                  r"\bheavy-?weight\b", r"\bnot worth (it)?\b", r"\bno (real )?benefit\b",
                  r"\b(complicated|complex|harder) to (operate|run|reason about)\b", r"\breinvent\w* the wheel\b",
                  # a rhetorical dismissal: "why reinvent the wheel when the library does it", "why bother"
                  r"\bwhy (bother|reinvent\w*|build|write|roll)\b[^.;]*")
# "overkill at under 2 runs a second": our scale is not a property of the alternative; "a pod per run at 833 runs a
# second" is one, so a number outside the opinion's own "at/for N" counts as saying what it would cost.
OPINION_SCALE = re.compile(rf"(?:{OPINION.pattern})(?:\s+(?:for|at)\s+(?:only |under |about |~)?[\d.,]+[^\s,;.]*"
                           r"(?:\s(?:runs?|jobs?|fires?|writes?|executions?|per|a|/)\S*)*)?", re.I)
FAILURE_PROFILE = pattern(r"\blate\b", r"\bdelay", r"\bpaus", r"\bstall", r"\bcontention\b", r"\bhot\b",
                          r"\bbottleneck", r"\bceiling\b", r"\blimits?\b", r"\bblocks?\b", r"\blos(e|es|t|ing)\b",
                          r"\bdouble", r"split[- ]brain", r"\bfail", r"\bscal(e|es|ing)\b", r"\bdown\b")
NAMED_ONLY_SHARE = 1 / 15  # 1 point of 15 each
NAMED_ONLY_CAP = 2 / 15


def _after_title(unit: Unit, item: Item) -> str:
    """The text of ``unit`` after the alternative's name, where its reason must be."""
    if unit.has_columns:  # the first column names it, the others say why
        return " | ".join(unit.cells[1:])
    if unit is not item.units[0]:
        return unit.text
    label = TITLE_LABEL.match(unit.text)
    return unit.text[label.end():] if label else unit.text


def _follow_up_answers(doc: Document) -> tuple[tuple[re.Pattern[str], re.Pattern[str] | None], ...]:
    """(what an item rejects, what in the design would stand in its place); nothing stands in the place of a
    mechanism the design says it has not got ("we deliberately have no lease"), however it describes it."""
    denied = denials(doc)
    return ((LEASE, None if "leases" in denied else LEASE),
            (FENCING, None if "fencing tokens" in denied else FENCING),
            (REPLICATED_SCHEDULER, double_fire_guard(doc)),
            (JOB_COOPERATION, COOPERATION))


def _rejects_what_the_design_lacks(item: Item, design: list[Unit], answers) -> bool:
    """``item`` rejects a follow-up's answer and no sentence of the design (outside section 9) has anything in its
    place. Section 9 alone has no design to judge it against."""
    return bool(design) and any(rejected.search(item.title) and not (in_place and any(
        affirmed(in_place, sentence) for unit in design for _, sentence in unit.statements()))
               for rejected, in_place in answers)


def _only_opinion(reason: str) -> bool:
    """The reason says nothing once its opinions ("overkill", "simpler", "too complex") are taken out."""
    if not OPINION.search(reason):
        return False
    rest = OPINION_SCALE.sub(" ", reason)
    return not re.search(r"\d", rest) and not any(p.search(rest) for p in (REASON, LOAD_BEARING, FAILURE_PROFILE))


def _opens_rejection(sentence: str) -> bool:
    return bool(REJECTION_LEAD.match(sentence) or NAME_LEAD.match(sentence))


def rejections(doc: Document) -> Finding:
    section = doc.sections.get(9)
    if section is None:
        return Finding(0.0, missing=["No section 9: nothing was explicitly rejected."])
    items = [one for item in split_items(section) for one in one_per_lead(item, _opens_rejection)]
    if not items:
        return Finding(0.0, missing=["Section 9 is empty."])
    reasoned, named_only = [], []
    missing = []
    credit = 0.0
    design = [u for u in doc.content_units() if u.section != 9]
    answers = _follow_up_answers(doc)
    for item in items:
        has_sentence = any(u.prose or (u.has_columns and u.words >= MIN_REJECTION_WORDS) for u in item.units)
        reason_unit = next((u for u in item.units if REASON.search(_after_title(u, item))), None)
        if reason_unit is not None and _uses_the_alternative(item):
            named_only.append(item)
            missing.append(f"'{item.title}' (line {item.first_line}): contradicts itself, the reason says the "
                           "design uses it")
        elif reason_unit is not None and WRONG_PREMISE.search(item.text) and not COOPERATION.search(item.text):
            named_only.append(item)
            missing.append(f"'{item.title}' (line {item.first_line}): the reason is a wrong answer, faulting it for "
                           "lacking exactly-once execution, which no system gives without the job's cooperation")
        elif reason_unit is not None and _rejects_what_the_design_lacks(item, design, answers):
            named_only.append(item)
            missing.append(f"'{item.title}' (line {item.first_line}): rejects a follow-up's answer (a lease that "
                           "expires, a token the store checks, replicas kept from firing together, the job's "
                           "idempotent writes) and the design puts nothing in its place")
        elif reason_unit is not None and _only_opinion(" ".join(_after_title(u, item) for u in item.units)):
            named_only.append(item)
            missing.append(f"'{item.title}' (line {item.first_line}): the reason is an opinion (\"overkill\", "
                           "\"simpler\"), not what the alternative would cost or break here")
        elif reason_unit is not None and item.words >= MIN_REJECTION_WORDS:
            quote = Evidence.of(reason_unit, REASON)
            shown = quote.text if quote.text.startswith(item.title) else f"[{item.title}] {quote.text}"
            reasoned.append(Evidence(quote.line, shown))
            terse = not (has_sentence or is_prose(item.text))
            plumbing = bool(PLUMBING.search(item.title)) and not LOAD_BEARING.search(item.text)
            credit += (TERSE_SHARE if terse else 1.0) * (PLUMBING_SHARE if plumbing else 1.0)
            if terse:
                missing.append(f"'{item.title}' (line {item.first_line}): the reason is a fragment, not a sentence")
            if plumbing:
                missing.append(f"'{item.title}' (line {item.first_line}): an alternative to the API's format, not "
                               "to a part that can fail: half credit")
        else:
            named_only.append(item)
            why = "no reason given" if reason_unit is None else "the reason is too short to say what it costs"
            missing.append(f"'{item.title}' (line {item.first_line}): {why}")
    fraction = min(REJECTIONS_FOR_FULL, credit) / REJECTIONS_FOR_FULL
    fraction += min(NAMED_ONLY_CAP, NAMED_ONLY_SHARE * len(named_only))
    if len(reasoned) < REJECTIONS_FOR_FULL:
        missing.insert(0, f"{len(reasoned)} of the {REJECTIONS_FOR_FULL} reasoned rejections needed.")
    named = [Evidence(item.first_line, f"[{item.title}] named, without a reason") for item in named_only]
    return Finding(round(min(1.0, fraction), 4), reasoned + named, missing)
