"""Is a mention denied? "There is no fencing token" names the mechanism and says it is absent.

A match is denied when its clause puts a negation in front of it ("no", "never", "without",
"instead of", "don't need") or a rejection after it ("... rejected", "... is not needed"). Clauses
end at punctuation, at "and", and at the words that start a new claim ("because", "but", "so"), so
"a stale worker can never write, because the store checks its token" still credits the token, and two
negations affirm. "or" does not end one: a negation covers every item it lists ("we don't use leases or
heartbeats" denies both).
"""

from __future__ import annotations

import re

CLAUSE_BREAK = re.compile(r"[,;:.()\u2014\u2013]|\s-\s|\b(because|but|so|which|while|whereas|although|though|"
                          r"however|then|where|when|if|unless|since|and)\b", re.I)
# "no two workers", "no longer holds the lease": quantities and time, not denials; "after 20 s without
# a heartbeat" describes the expiry, it does not deny the heartbeat.
NEGATOR = re.compile(
    r"\b(no(?!\s+(two|other|more|later|sooner|matter|longer|earlier|less|one else)\b)|not(?!\s+only\b)|never|"
    r"without(?!\s+(a |any |successful |valid |its )*(heartbeat|renew|ack|response|reply|progress))|"
    r"nor|neither|instead of|rather than|cannot|(i|we) (have )?(rejected|ruled out|decided against|turned down)|"
    # "nothing here uses a lease": nothing in the design has it
    r"nothing( \w+)? (uses|has|needs|relies on)|"
    r"(do|does|did|is|are|was|were|ca|could|would|should|wo|have|has|need)n'?t)\b",
    re.I,
)
AFTER = re.compile(
    r"^[\w\s'-]{0,30}?(\*\*)?\s*[:\u2014\u2013(]\s*(was |were |is |are )?rejected\b|"
    # "Fencing is not needed", and as a label or a table row says it: "Fencing: not needed", "| Lease | Not used |"
    r"^[\w\s'-]{0,30}?((\*\*)?\s*[:|\u2014\u2013]\s*)?\b(not needed|unnecessary|not used|isn'?t used|"
    r"(is|are) not (used|needed|required)|not required)\b|"
    # absence said in prose after the mechanism: "leases are deliberately absent", "... something we left out"
    r"^[\w\s'-]{0,45}?\b(absent|left out|omitted|not part of (the|this|our) design)\b",
    re.I,
)


def _clause_start(text: str, start: int) -> int:
    before = [m.end() for m in CLAUSE_BREAK.finditer(text, 0, start)]
    return before[-1] if before else 0


def is_denied(text: str, start: int, end: int) -> bool:
    """Whether the mention at text[start:end] is negated in its own clause, or rejected right after it."""
    clause_start = _clause_start(text, start)
    # Two negations affirm: "no write lands without a valid token".
    # Searched in the whole text so a negator's lookahead sees past the mention ("without a heartbeat").
    negators = [m for m in NEGATOR.finditer(text) if clause_start <= m.start() and m.end() <= start]
    if len(negators) % 2:
        return True
    return bool(AFTER.match(text[end:end + 80]))


def affirmed(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The first match of ``pattern`` in ``text`` that is not denied."""
    return next((m for m in pattern.finditer(text) if not is_denied(text, m.start(), m.end())), None)
