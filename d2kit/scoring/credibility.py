"""An attempt that gets several different questions wrong has not shown it understands its own words.

Each wrong answer or contradiction already costs the check it spoils. But when they touch several
*different* questions (exactly-once promised, a lease judged on the worker's clock, every replica
firing every job), the right words elsewhere in the attempt are no longer evidence of a design: an
interviewer stops believing them. So for each question answered wrongly beyond the first, the
checks that judge the design keep a quarter less of what they earned. What a reader can verify
without trusting the design (the sections are there, the scale was stated) is not discounted.

One wrong answer costs only its own check: a single slip in a good attempt is not incoherence. Except the wrong answers
that undo a hard part the whole design rests on (``wrong_answers.WrongAnswer.alone``). Exactly-once execution promised
without the job's help is the rubric's no-hire signal of its first criterion: a design built on it has not asked what a
second copy of a job does, so its leases, tokens and failure legs answer a question it never posed; alone it costs the
design's checks a fifth (rubric/calibration/SPLIT.md, "Fourteenth change"). The criterion's other no-hire answers cost
a tenth alone ("Eighteenth change"): a lease judged across machines' clocks (every lease-expiry detection in the
design fires at the wrong time), "we kill the old worker", a distributed lock trusted to keep one holder, and a
re-dispatch that lets the old copy's late write land (each undoes the hard part the failure legs lean on, a worker's
lease and the split brain it causes); an old leader trusted to stop itself when its session or lease ends (a paused
process cannot fence itself, so its dispatches land; "Nineteenth change"), or a leader elected with nothing said of the
failover gap or the old leader at all ("Twenty-second change"); and missed runs skipped with no record,
which breaks the one thing the prompt asks of the design ("we care a lot about not silently dropping one") and
decides the catch-up for the user. With nothing charged, workers' leases with no fencing number checked anywhere (none,
or one nothing compares, "Twenty-second change") and no late write of the old copy refused cost the same tenth
(``UNFENCED``, "Twentieth change"): the criterion's partial for its second hard part, "no token is checked anywhere";
follow-up 1, which already pays for the missing token, is not discounted for it (``Credibility.own_check``).
"""

from __future__ import annotations

from dataclasses import dataclass

# What the candidate was asked, by check: the delivery guarantee is one question wherever it is answered.
QUESTION = {"clarifications": "delivery_semantics", "proof_of_execution": "delivery_semantics"}
# Checks a reader verifies without believing the design.
NOT_DISCOUNTED = frozenset({"sections_present", "assumptions"})
DISCOUNT_PER_QUESTION = 0.25
FLOOR = 0.25
PROMISE_ALONE = 0.8  # what the design's checks keep when the exactly-once promise is the only wrong answer
HARD_PART_ALONE = 0.9  # ... when it is another of the first criterion's no-hire answers (a lease across clocks, ...)


@dataclass(frozen=True)
class Credibility:
    questions: tuple[str, ...]  # the questions answered wrongly or contradicted, sorted
    alone: float = 1.0  # what the design's checks keep if that is the only question: its costliest wrong answer's
    alone_answer: str = ""  # that wrong answer, for the note
    own_check: str = ""  # the check that already pays for an absence (not discounted for it again)

    @property
    def answered_alone(self) -> bool:
        """The only question answered wrongly is answered with a wrong answer that costs more than its check."""
        return self.alone < 1 and len(self.questions) == 1

    @property
    def factor(self) -> float:
        if self.answered_alone:
            return self.alone
        return max(FLOOR, 1 - DISCOUNT_PER_QUESTION * max(0, len(self.questions) - 1))

    def applies_to(self, check_id: str) -> bool:
        return self.factor < 1 and check_id not in NOT_DISCOUNTED and check_id != self.own_check

    def note(self) -> str:
        if self.answered_alone:
            return (f"not credible: {self.alone_answer}, which undoes a hard part the design rests on, so the checks "
                    f"that judge the design keep {self.factor:.0%} of their points")
        return (f"not credible: wrong or contradicted answers on {len(self.questions)} different questions "
                f"({', '.join(self.questions)}), so the checks that judge the design keep "
                f"{self.factor:.0%} of their points")


# The criterion's partial for its second hard part, with nothing else wrong: leases, and no token checked anywhere
# (none, or a number nothing compares). Follow-up 1 (lease_fencing) already pays for it; the rest of the design is
# believed less.
UNFENCED = Credibility(("lease_fencing",), HARD_PART_ALONE,
                       "workers hold leases but no fencing number is checked where a write lands, so a re-dispatched "
                       "job's old copy keeps running and writing", own_check="lease_fencing")


def assess(flawed_checks: list[str], alone: tuple[float, str] = (1.0, "")) -> Credibility:
    """``flawed_checks``: the check of each wrong answer and contradiction found; ``alone``: the costliest wrong
    answer's share kept when it is the only question, and its name."""
    return Credibility(tuple(sorted({QUESTION.get(check, check) for check in flawed_checks})), *alone)
