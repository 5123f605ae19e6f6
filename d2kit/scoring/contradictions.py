"""Claims the attempt contradicts elsewhere: a mechanism said to be used in one sentence and denied in another.

"We use fencing tokens so we do not need leases" and, later, "workers pull jobs; leases track them":
the attempt both has and has not got leases. Each contradiction is flagged with both quotes, and the
check the mechanism belongs to keeps at most half its points: an interviewer would not know which
of the two designs to believe. A rejected alternative is not a contradiction of a sentence that
merely names it; only a sentence that puts the mechanism to use ("we use", "via", "with", "each
execution gets") contradicts its denial.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from d2kit.scoring.document import Document
from d2kit.scoring.evidence import Evidence, Finding, pattern
from d2kit.scoring.negation import AFTER

CONTRADICTED_CAP = 0.5


@dataclass(frozen=True)
class Mechanism:
    name: str
    check: str
    mention: re.Pattern[str]


MECHANISMS = (
    Mechanism("leases", "lease_fencing", pattern(r"\bleases?\b")),  # "sees no heartbeat" is an observation
    Mechanism("fencing tokens", "lease_fencing", pattern(r"fencing tokens?", r"\bfencing\b")),
    Mechanism("leader election", "replica_double_fire", pattern(r"leader election", r"\ba leader\b",
                                                                r"\bthe leader\b")),
    Mechanism("a unique key on (job, fire time)", "replica_double_fire",
              pattern(r"unique (key|constraint|index) on \(?job")),
)
# A denial of the mechanism itself, right before it: "no leases", "we do not need leases", "without a fencing
# token", and in prose: "we deliberately do not put a unique key on (job, fire time)", "nothing here uses a lease".
# Not "one lost packet never costs a lease": that denies a loss, not the lease.
# Not "does not hold the lease past its expiry": holding, keeping and taking are what a lease's holder does.
DENIAL_BEFORE = re.compile(r"\b(no|without|(do|does|did|need)(n't| not)( need| use| have| require| put| add| want)?|"
                           r"never (use|need|put|add)s?|not (need|use|require)s?|"
                           r"nothing( \w+)? (uses|has|needs))\s+((any|a|an|the|such)\s+)?$", re.I)
# The clause puts the mechanism to use, rather than naming it. Not "compared with a leader": a comparison names the
# alternative the design is measured against.
USE = pattern(r"\bwe (use|rely on|keep|have|add|take|hold|run)\b", r"\b(uses|relies on|holds?|renews?|takes?|"
              r"tracks?|checks?|stores?|gets?|carries|carry|compares?)\b", r"\b(is|are) (used|kept|held|renewed|"
              r"stored|checked|compared)\b", r"(?<!compared )(?<!comparing )(?<!contrasted )\b(via|through|with|by)\b")


@dataclass(frozen=True)
class Contradiction:
    mechanism: Mechanism
    used: Evidence
    denied: Evidence

    def note(self) -> str:
        return (f"contradiction: {self.mechanism.name} used at line {self.used.line} (\"{self.used.text}\") and "
                f"denied at line {self.denied.line} (\"{self.denied.text}\")")


def _used_and_denied(doc: Document, mechanism: Mechanism) -> tuple[Evidence | None, Evidence | None]:
    """The first sentence of the design (section 9 rejects by design) that puts ``mechanism`` to use, and the first
    that denies it."""
    used = denied = None
    for unit in (u for u in doc.content_units() if u.section != 9):
        for _, sentence in unit.statements():
            for match in mechanism.mention.finditer(sentence):
                if _denies(sentence, match.start(), match.end()):
                    denied = denied or Evidence.of(unit, re.compile(re.escape(sentence[:40])))
                elif USE.search(sentence):
                    used = used or Evidence.of(unit, re.compile(re.escape(sentence[:40])))
    return used, denied


def find(doc: Document) -> list[Contradiction]:
    found = []
    for mechanism in MECHANISMS:
        used, denied = _used_and_denied(doc, mechanism)
        if used and denied and used != denied:
            found.append(Contradiction(mechanism, used, denied))
    return found


# Policies a design may deny having ("there are no per-customer quotas", "no catch-up policy: ..."). Not
# contradictions when also described: a v1 without caps and a later step that adds them is a plan, not two designs.
POLICIES = (
    Mechanism("tenant caps", "tenant_isolation",
              pattern(r"(per[- ])?(tenant|customer|team|account)s?'? (concurrency )?"
                      r"(caps?|limits?|quotas?|maximums?)\b",
                      r"\bconcurrency (caps?|limits?)\b")),
    Mechanism("catch-up policy", "catch_up",
              pattern(r"(catch[- ]?up|misfire|missed[- ]runs?) (policy|policies|settings?|options?|rules?)\b")),
)


def denials(doc: Document) -> dict[str, Evidence]:
    """The mechanisms the design says it does not have ("we deliberately have no lease"), each with the sentence that
    says so: what such a sentence denies earns nothing anywhere in the attempt, whatever other sentences describe."""
    if "denials" not in doc.derived:  # every check of one score asks: worked out once per document
        doc.derived["denials"] = {mechanism.name: denied for mechanism in MECHANISMS + POLICIES
                                  if (denied := _used_and_denied(doc, mechanism)[1])}
    return doc.derived["denials"]


# A sentence that argues the mechanism away, whatever the words: its need made conditional on something the design
# does not do ("fencing tokens only matter if you re-dispatch"), or put down to what others habitually build ("so you
# invent leases, then fencing tokens", "the machinery people reach for"), or called overkill. Generic constructions,
# each in at least three tuning files (rubric/calibration/SPLIT.md, twelfth change), not one writer's phrases.
DISMISSAL = pattern(r"\bonly (exists?|arises?|matters?|needed|necessary|required) (if|when)\b",
                    r"\b(you|people|teams|most (answers|designs)) (invent|bolt on|reach for)\b",
                    r"\b(is|are|would be) overkill\b")
# "no lease timer can catch a pause": a claim about what the mechanism can do, not a denial that it exists.
ABILITY_AFTER = re.compile(r"^\s*(\w+\s+)?(can|could|will|would|ever|alone|by itself)\b", re.I)


# Where the argument stops and the design's own choice begins: "leases are overkill here, so we use a fencing
# token", "we use a fencing token because leases are overkill". A dismissal denies only what it shares a stretch
# of the sentence with, none of these between them.
STANCE_BREAK = re.compile(r"[;:\u2014]|\s-\s|\b(so|but|instead|whereas|while|rather|therefore|hence|because|since|"
                          r"we (use|rely on|keep|have|add|take|hold|run|choose|pick|go with|want))\b", re.I)


def _dismissed(sentence: str, start: int, end: int) -> bool:
    """Whether a dismissal in ``sentence`` argues away the mention at sentence[start:end]."""
    for match in DISMISSAL.finditer(sentence):
        between = sentence[end:match.start()] if match.start() >= end else sentence[match.end():start]
        if (match.start() < end and match.end() > start) or not STANCE_BREAK.search(between):
            return True
    return False


def _denies(sentence: str, start: int, end: int) -> bool:
    if AFTER.match(sentence[end:end + 80]) or _dismissed(sentence, start, end):
        return True
    return bool(DENIAL_BEFORE.search(sentence[max(0, start - 40):start])) and not ABILITY_AFTER.match(sentence[end:])


def charge(check_id: str, finding: Finding, found: list[Contradiction]) -> Finding:
    """``finding`` capped at half when a mechanism of ``check_id`` is both used and denied, with both quotes."""
    mine = [c for c in found if c.mechanism.check == check_id]
    if not mine:
        return finding
    return Finding(min(finding.fraction, CONTRADICTED_CAP), finding.evidence,
                   [c.note() for c in mine] + finding.missing)
