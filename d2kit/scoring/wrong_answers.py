"""The common wrong answers the answer key names, found in the attempt and charged to the check they spoil.

A wrong answer is a claim, not a word: "the worker compares the lease expiry with its own clock",
"each replica fires every due job", "exactly-once side effects, users need not make jobs idempotent".
When one is found its check keeps at most ``cap`` of its points and the quote is shown. A sentence
that names the wrong answer in order to reject it ("re-dispatching without a token would run two
copies") is a discussion, not a claim, and is not charged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from d2kit.scoring.concepts import SELF_CHECK, store_checks_token
from d2kit.scoring.credibility import HARD_PART_ALONE, PROMISE_ALONE
from d2kit.scoring.document import Document
from d2kit.scoring.evidence import Evidence, Finding, pattern
from d2kit.scoring.negation import affirmed

# A sentence weighing the answer rather than giving it: "would", "naive", "unsafe", "the trap is".
DISCUSSION = pattern(r"\bwould\b", r"\bnaive", r"\bunsafe\b", r"\bwrong\b", r"\btrap\b", r"\bmistake",
                     r"\bdanger", r"\brisk", r"\bbreaks?\b", r"\bnot enough\b", r"\binsufficient", r"\bpitfall",
                     r"\btempting", r"\bfallacy", r"\bcommon answer", r"\brejected\b", r"\bcould\b")


@dataclass(frozen=True)
class WrongAnswer:
    check: str
    name: str
    claim: re.Pattern[str]
    cap: float  # the share of the check's points left at most
    unless: re.Pattern[str] | None = None  # the same sentence qualifying the claim makes it right
    unless_anywhere: re.Pattern[str] | None = None  # ... or any sentence of the attempt
    unless_store_fences: bool = False  # ... or the design's store checks a fencing token (concepts.store_checks_token)
    spoils: tuple[tuple[str, float], ...] = ()  # other checks the same answer undoes, with their caps
    alone: float = 1.0  # what the design's checks keep when this is the only question answered wrongly (credibility)

    def cap_for(self, check_id: str) -> float | None:
        """The share of ``check_id``'s points this answer leaves at most, or None when it does not touch it."""
        return self.cap if check_id == self.check else dict(self.spoils).get(check_id)


# A job that must cooperate for exactly-once (idempotency it implements, a token it checks) is the right answer.
COOPERATION = pattern(r"(job|handler|sink|downstream|author|user|tenant|caller)s?\b.{0,40}(?<!n't )(?<!not )\b"
                      r"(must|needs? to|has to|should|is responsible)",
                      r"(?<!not )(?<!n't )(requires?|needs?)\b.{0,40}(cooperat|idempoten|the job)",
                      r"job'?s (help|cooperation)",
                      r"\bbut\b.{0,60}(side[- ]effect|activit|external|outside)",
                      r"\b(impossible|not (possible|achievable)|cannot be guaranteed|no such thing)",
                      # the limit in other words: "isn't something a scheduler can promise on its own", "cannot be
                      # provided by the scheduler", "isn't possible ... unless the job dedupes", "exactly-once side
                      # effects only if the job checks the key"
                      r"(not|n'?t) something\b.{0,40}\b(can|could) (promise|guarantee|give|offer|provide)",
                      r"\b(cannot|can'?t|can ?not) (be )?(promised?|guaranteed?|provided?)\b",
                      r"n'?t (possible|achievable)",
                      r"\b(only (if|when)|unless) the (job|handler|consumer|task|sink|downstream)s?\b",
                      r"\b(effectively|at[- ]least[- ]once plus)")


# A lease whose expiry is judged across machines' clocks is no lease: a worker behind by the skew runs on after a new
# copy starts, one ahead is cut off early. Follow-up 1's lease half is lost with follow-up 7; its token half stands.
LEASE_EXPIRY = (("lease_fencing", 0.5),)
# The machines whose clocks an attempt compares: "the worker's timestamp against the scheduler's".
ROLE = r"(the )?(workers?|schedulers?|planners?|reapers?|leaders?|servers?|clients?|monitors?|checkers?)"
LIVENESS = r"leases?|expir\w*|heartbeats?|check-?ins?|renew\w*|liveness|timestamps?|stamp(ed|s)?"

# What a fencing number is called, and what it must not be made of (the store has to order it).
TOKEN_NOUN = r"(fencing[_ ])?tokens?|epochs?(?! (ms|milli|seconds?))|generations?"
CLOCK_OR_RANDOM = (r"timestamps?|millis\w*|currenttimemillis|nanotime|wall[- ]?clock|local clock|(worker|client|host)"
                   r"'?s? (own )?clock|uuid\w*|random\w*")


# Exactly-once execution promised, whatever it rests on (two-phase commit, a broker's transactions, the platform).
EXACTLY_ONCE_PROMISE = pattern(
    r"exactly[- ]once\b.{0,60}\b(end[- ]to[- ]end|side[- ]effects?|execution|guarantee)",
    r"(end[- ]to[- ]end|guarantee\w*|provides?|promises?|deliver\w*|achieve\w*)\W+(\w+\W+){0,3}exactly[- ]once",
    r"(users?|tenants?|jobs?|authors?) (don'?t|do not|never) (need|have) to (make|change|write)",
    r"side[- ]effects? (can )?never (happen|run|occur)s? twice",
    r"\b(has|gives?|offers?|with) exactly[- ]once (delivery|execution|processing|semantics)\b.{0,60}\bduplicates?",
    r"duplicates? (don'?t|do not|never|can'?t|cannot|won'?t) (happen|occur)",
    r"\b(every|each|all) (jobs?|runs?)\b.{0,20}\b(runs?|execut\w*|fires?|happens?) exactly[- ]once")


# A leader's own term, how it stops on its own, and what fences an old leader instead: its epoch (term, generation,
# revision) compared where it writes, or a unique key that refuses the old leader's occurrence.
OWN_TERM = r"(session|lease|keep-?alive|leader key|ttl|ephemeral node)s?"
STOPS_ITSELF = (r"\b(stops?|exits?|shuts? down|steps? down|quits?|rejoins?|halts?|abdicates?|"
                r"los(es|t) (its )?leadership)\b")
OLD_LEADER = r"\b(old|deposed|paused|zombie|stale|previous|former) leader\b"
LEADER_FENCED = pattern(r"\bleader'?s?\b.{0,60}\b(fenc\w*|epoch|term|generation|revision)s?\b",
                        r"\b(fenc\w*|epoch|term|generation|revision)s?\b.{0,60}\bleader\b",
                        rf"\b(unique|primary key|conditional|on conflict)\b.{{0,80}}{OLD_LEADER}",
                        rf"{OLD_LEADER}.{{0,80}}\b(unique|primary key|conditional|on conflict|refused|rejected)\b",
                        # the old leader's write fails ("the old leader's tx fails"), not its own keepalive
                        rf"{OLD_LEADER}.{{0,80}}\b(tx|transactions?|inserts?|writes?|updates?|commits?) "
                        r"(\w+ ){0,2}fail(s|ed)?\b")

# A job's cursor, the next fire time it keeps, and where a skip moves it: past now, over every missed time.
CURSOR = r"next[_ ](fire|run)(_at|_time)?"
PAST_THE_MISSED = r"[^.;|]{0,30}\b(next|first)\b[^.;|]{0,40}(\bafter now|\bfuture\b)"

# "Each schedule has a setting: run them all, run only the latest, or skip": options, not a choice.
CATCH_UP_OPTIONS = pattern(r"\bor (skip|run only|run the (latest|most recent)|only the (latest|most recent)|"
                           r"run (them )?all|run (each|every))\b", r"\b(run|fire) them all\W+(\w+\W+){0,6}or\b")


WRONG_ANSWERS: tuple[WrongAnswer, ...] = (
    WrongAnswer("delivery_semantics", "exactly-once execution promised without the job's cooperation",
                EXACTLY_ONCE_PROMISE, 0.0, COOPERATION, alone=PROMISE_ALONE),  # the rubric's "none"
    WrongAnswer("delivery_semantics", "at-most-once said to guarantee that every job runs", pattern(
        r"at[- ]most[- ]once\b.{0,100}\b(guaranteed to (run|fire|execute)|always (runs|fires)|"
        r"every (job|run) (is guaranteed|runs|will run))"), 0.0,
                unless=pattern(r"\b(not|never|may not|might not|no)\b (\w+ )?(guaranteed|always|every)")),
    WrongAnswer("delivery_semantics", "a new idempotency key for each retry (a retry must carry the same key)", pattern(
        r"idempoten\w* keys?\b.{0,60}\b(regenerat\w*|changes?|new|fresh|different)\b.{0,40}\b(every|each|on) "
        r"(retry|retries|attempt|re-?run)",
        r"\b(new|fresh|different|regenerated) idempoten\w* key"), 0.5),
    # The same promise is a wrong answer to the clarifying question and to what at-least-once promises the user
    # (follow-up 5), whatever mechanism it rests on; all three are one question for the credibility discount.
    WrongAnswer("clarifications", "exactly-once chosen as the delivery guarantee", pattern(
        r"(delivery|guarantee|semantics)\W+(\w+\W+){0,2}exactly[- ]once",
        r"^\W*exactly[- ]once (execution|delivery|processing)\b", EXACTLY_ONCE_PROMISE.pattern), 0.8, COOPERATION),
    WrongAnswer("proof_of_execution", "at-least-once presented as exactly-once to the user", pattern(
        r"(users?|tenants?|jobs?|authors?) (don'?t|do not|never) (need|have) to (make|change|write)",
        r"side[- ]effects? (can )?never (happen|run|occur)s? twice"), 0.5),
    WrongAnswer("proof_of_execution", "exactly-once promised to the user instead of what at-least-once promises",
                EXACTLY_ONCE_PROMISE, 0.5, COOPERATION, alone=PROMISE_ALONE),
    WrongAnswer("lease_fencing", "fencing tokens offered as a replacement for leases", pattern(
        r"(fenc\w*|tokens?)\b.{0,60}\b(instead of|replaces?|so we (do not|don'?t) need)\b.{0,20}\b"
        r"(leases?|heartbeats?)",
        r"(don'?t|do not|no) need (leases|heartbeats)"), 3 / 8),
    WrongAnswer("lease_fencing", "a random fencing token compared for order", pattern(
        r"(uuid|random)\w*\b.{0,120}\b(greater|monoton|higher|newer|larger|compar)",
        r"(greater|monoton|higher|newer|larger|compar)\w*\b.{0,120}\b(uuid|random)"), 3 / 8),
    WrongAnswer("lease_fencing", "a fencing token the store cannot order (minted by the worker, a clock reading, a "
                "random id)", pattern(
        r"token\w*\b.{0,60}\bgenerated by the worker", r"worker (generates|mints|creates|picks) (a |its |the )?"
        r"(\w+ ){0,2}token",
        # what the token is made of: a clock reading or a random id. Readings of different machines' clocks are
        # not ordered, and a random id has no order; whatever the sentence calls it, the store cannot compare them.
        rf"\b({TOKEN_NOUN})\b[^.;|]{{0,30}}\b(is|are|=|uses?|comes? from|taken from|based on|set to|derived from|"
        rf"made (from|of)|generated from)\b[^.;|]{{0,40}}\b({CLOCK_OR_RANDOM})",
        r"\bfencing[_ ]tokens?\s+(timestamp\w*|datetime)\b"), 3 / 8,
                unless=pattern(rf"\b(never|not|no|instead of|rather than)\b[^.;|]{{0,20}}\b({CLOCK_OR_RANDOM})")),
    WrongAnswer("lease_fencing", "a fencing token treated as a timer (a lease expires; a token only orders writes)",
                pattern(r"fencing tokens? (expir\w*|times? out|runs? out|has a ttl)"), 3 / 8),
    WrongAnswer("lease_fencing", "a distributed lock trusted to keep one holder (a paused holder outlives its expiry)",
                pattern(r"(redis|zookeeper|etcd|distributed|setnx)\W+(\w+\W+){0,3}lock\w*\b.{0,80}\b(ensures?|"
                        r"guarantees?|so that|means) (that )?(only one|no two|never|a single)"), 3 / 8,
                unless_store_fences=True, alone=HARD_PART_ALONE),
    WrongAnswer("lease_fencing", "the old copy stopped by a kill sent to it (a partitioned worker never receives it)",
                pattern(r"\b(send|sends|sent|sending|issues?|issued)\b.{0,20}\b(kill|terminat\w*|stop|shutdown)\b"
                        r".{0,40}\b(old|first|previous|original|stale|zombie)\b",
                        r"\b(old|first|previous|original|stale|zombie) (worker|copy|attempt|instance|host)\b.{0,20}\b"
                        r"(is |gets )?(sent|given) an? (kill|stop|terminate)",
                        r"\bwe kill the (old|first|previous|stale|zombie)\b"), 3 / 8, unless_store_fences=True,
                alone=HARD_PART_ALONE),
    WrongAnswer("lease_fencing", "fencing tokens said to stop a second copy from running (they stop its writes)",
                pattern(r"fenc\w*\b.{0,80}\b(two workers|second copy|two copies|split[- ]brain)\b.{0,30}\b(never|"
                        r"impossible|cannot|can'?t)\b",
                        r"(split[- ]brain|a second copy|two copies)\b.{0,20}\b(is |are )?impossible"), 3 / 8,
                # "the primary key (job_id, due_at) makes a second copy impossible": a second row of the occurrence,
                # which a unique key does refuse (follow-up 2's answer, not a token's)
                unless=pattern(r"\b(primary|unique|composite) key\b", r"\bunique (constraint|index)\b")),
    WrongAnswer("lease_fencing", "the token not checked where the write lands (the lease trusted to be exclusive)",
                pattern(r"(write path|store|database|sink|storage|downstream|service)s?\b.{0,30}\b(does not|doesn'?t|"
                        r"do not|don'?t|never|need not|needn'?t)\b.{0,20}\b(check|verify|validate|compare)\w*\b.{0,20}"
                        r"\b(fencing )?tokens?",
                        r"\bno need to (check|verify|validate) the (fencing )?tokens?",
                        r"\btokens?\b.{0,80}\b(write path|store|database|sink|storage|downstream|service)s?( layer)?\b"
                        r".{0,10}\b(does not|doesn'?t|do not|don'?t|need not|needn'?t|never)( need to)? (check|verify|"
                        r"validate|compare)",
                        r"\b(worker|job|client)s?\b.{0,20}\bchecks?\b.{0,30}\btokens?\b.{0,20}\b(itself|"
                        r"against its own)", SELF_CHECK.pattern), 3 / 8,
                # "there is no fencing token, and storage never checks one": an absence, said as such
                unless=pattern(r"\b(no|without( a| any)?) (fencing )?tokens?\b")),
    WrongAnswer("lease_fencing", "the re-dispatched copy given the same token (the old copy's writes still pass)",
                pattern(r"(re-?dispatch\w*|re-?assign\w*|retr(y|ied|ies)|both (sides|copies|workers)|"
                        r"old and (the )?new)\b.{0,60}\bsame (fencing )?token",
                        r"\bsame (fencing )?token\b.{0,60}\b(re-?dispatch\w*|both (sides|copies|workers)|"
                        r"old and (the )?new)"), 3 / 8,
                unless=pattern(r"\b(never|not|n'?t|no)\b (\w+ ){0,2}(the )?same (fencing )?token")),
    WrongAnswer("lease_fencing", "the stale copy's write accepted: whichever copy writes last wins (re-dispatch "
                "without a token)", pattern(
        r"\b(last|latest|later) (write|writer|report|status|result|copy)s?\b.{0,10}\bwins\b",
        r"\bwhatever (arrives|lands|is written|comes) last\b",
        r"\boutcome is whatever the (later|last|latest|newer)"), 3 / 8, unless_store_fences=True,
                alone=HARD_PART_ALONE),
    WrongAnswer("lease_fencing", "a claim that never expires (a dead or partitioned worker keeps its job)", pattern(
        r"(lease|lock|claim|reservation)\w*\b.{0,40}\b(forever|indefinitely|until (it|the worker) (comes back|returns|"
        r"reconnects|recovers))",
        r"\b(locked|leased|claimed|held) (forever|indefinitely)\b"), 3 / 8,
                unless=pattern(r"\b(not|never|no|instead of|rather than|without)\b (\w+ ){0,3}(forever|indefinitely)",
                               r"\b(or|unless)\b.{0,40}\b(expir\w*|runs? out|times? out|lapses?)")),
    WrongAnswer("lease_fencing", "a claim that lasts the whole run with nothing renewing it (a dead worker keeps its "
                "job for hours)", pattern(
        r"(lease|lock|claim|reservation)s?\b.{0,30}\bnever (expires?|times? out|runs? out|lapses?)",
        r"(lease|lock|claim|reservation)s? (lasts?|is held|holds?) (as long as|for the (whole|entire|full)) (the )?"
        r"(job|run|execution)"), 3 / 8,
                unless=pattern(r"\b(renew\w*|heartbeat\w*|extend\w*|keep[- ]?alive)")),
    WrongAnswer("tenant_isolation", "the noisy tenant given priority, or more workers, instead of isolation", pattern(
        r"(tenant|customer|team)'?s?\b.{0,60}\b(given|gets?|get) (a )?(higher )?priority",
        r"\b(autoscal\w*|add(ing)? more workers)\b.{0,60}\b(noisy|tenant|starv)",
        r"\b(noisy|heavy) (tenant|customer)\b.{0,60}\b(autoscal\w*|add(ing)? more workers)"), 1 / 3),
    WrongAnswer("tenant_isolation", "a tenant cap that is unlimited (no cap)", pattern(
        r"\b(caps?|limits?|quotas?|maximums?)\b.{0,40}\b(unlimited|infinite)\b"), 1 / 3,
                unless=pattern(r"\b(never|not|no) (\w+ )?(unlimited|infinite)")),
    WrongAnswer("clocks", "a lease or due time judged on another node's clock", pattern(
        r"worker\w*'?s? (own |local )(wall[- ]?)?clock\w*.{0,80}\b(lease|expir|own)",
        r"(lease|expir)\w*.{0,80}\bworker\w*'?s? (own |local )(wall[- ]?)?clock",
        r"worker_local", r"(each|every) (replica|node|scheduler) uses its own (wall[- ]?)?clock",
        # a reading sent to another node; not a worker that "gives up" or lets time "pass on" its own clock
        r"(sends?|passes?|gives?)\b(?! (up|on)\b).{0,50}\bits (own )?(system\.)?(nanotime|monotonic)\w*",
        r"compar\w*\b.{0,60}\b(with|against|to) (its|their) own (\w+ ){0,2}clock",
        r"\bntp\b.{0,60}\b(keeps?|guarantees?|ensures?|solves?)\b.{0,40}\b(sync|skew|clocks?)",
        r"clock skew is solved by",
        r"compar\w*\b.{0,60}\btimestamps?\b.{0,60}\b(with|against|to)\b.{0,20}\b(its|their|the \w+'?s?) own clock",
        r"\bntp\b.{0,80}\b(comparable|in sync|synchroni[sz]ed|keeps?|guarantees?|ensures?|solves?)\b",
        # "every host runs NTP and stays within a few milliseconds": the same trust, said as a bound
        r"\bntp\b.{0,80}\b(stays?|is|are|be|kept|keeps?( \w+){0,3}) within\b",
        # the same bound said of the skew, with chrony as NTP's daemon: "all hosts run chrony against the same NTP
        # servers, and the fleet shows skew well under 100 ms, so a 60-second lease leaves plenty of margin"
        r"\b(ntp|chrony)\b.{0,80}\bskew\b.{0,20}\b(under|below|within|less than)\b",
        # the worker's clock setting the lease another node judges: "rewrites lease_expires_at from the worker's clock"
        r"\b(lease|expir)\w*\b.{0,80}(?<!never )(?<!not )\b(from|by) the worker'?s? (own |local )?(wall[- ]?)?clock",
        r"(in sync|synchroni[sz]ed)\b.{0,40}\b(by|with|via|using) ntp",
        r"\bskew (is|becomes) (zero|eliminated|impossible)\b",
        r"worker'?s? (own )?timestamps? (can|could) be compared",
        # a heartbeat stamped by the worker's wall clock and judged by another node's
        r"\b(with|using|stamped (with|by)) (their|its) (own )?local (wall[- ]?)?(clock|time|timestamp)s?\b"), 0.0,
                # "NTP keeps them close, but we never compare clocks: only the database's now() decides"; "lease times
                # are set with the database's now(), so the worker's own clock doesn't matter"
                unless=pattern(r"\b(never|not|don'?t|do not|nobody) (compares?|relys?|relies|depends?|trusts?)\b",
                               # "NTP keeps the wall clocks close, but nothing correctness-related depends on that"
                               r"\bnothing\b(\s[\w-]+){0,2}\s(depends?|relies|rests?) on\b",
                               r"\bonly the (database|db|store|server)'?s?\b",
                               r"\bclocks? (\w+ ){0,3}(doesn'?t|does not|don'?t|do not|never) matters?\b",
                               # due times read on the reader's own clock are what every scheduler does: the wrong
                               # answer is a lease, a heartbeat or an expiry judged across machines
                               rf"^(?!.*\b({LIVENESS})).*\b(due|fire|firing|scheduled|trigger)[ _-]?(times?|at)\b"),
                spoils=LEASE_EXPIRY, alone=HARD_PART_ALONE),
    WrongAnswer("clocks", "readings of different machines' clocks compared (a monotonic clock orders one machine's "
                "times only)", pattern(
        r"monotonic clocks?\b.{0,30}\b(is |are )?(compared|synchroni[sz]ed|shared) (across|between)",
        r"(absolute|wall[- ]?clock) (\w+[- ]){0,2}timestamps?\b.{0,20}\bcompared (across|between) "
        r"(nodes|machines|hosts|servers)",
        r"compar\w*\b.{0,60}\b(with|against|to) the (worker|other node|remote node|client)'?s? (wall[- ]?)?clock",
        # one role's stamp against another's, the answer key's words in the attempts' roles: "comparing the worker's
        # timestamp against the scheduler's is accurate enough", "comparing timestamps between the planner and the
        # worker is safe"
        rf"compar\w*\b.{{0,20}}\b{ROLE}'?s? (\w+[- ]){{0,2}}(timestamps?|clocks?|time)\b.{{0,10}}\b(with|against|to) "
        rf"(the |its |their )?{ROLE}'?s?\b",
        rf"compar\w*\b.{{0,20}}\btimestamps? (between|across) {ROLE}s? and {ROLE}s?\b"),
                0.0,
                unless=pattern(r"\b(not|never|cannot|can'?t|isn'?t|aren'?t|meaningless|only (on|within|valid)|nobody|"
                               r"no one)\b"),
                spoils=LEASE_EXPIRY, alone=HARD_PART_ALONE),
    WrongAnswer("replica_double_fire", "leader election alone, with nothing on the failover gap or a paused old "
                "leader", pattern(r"\b(only|just) (the )?leader\b.{0,60}\b(fires?|dispatch\w*|reads?|publish\w*|"
                                  r"schedul\w*|runs?)\b",
                                  # the same answer given as an argument: "duplicates cannot happen, because there is
                                  # only ever one scheduler", with nothing on the failover gap or a paused old one
                                  r"\b(because|since|as) (there is |there'?s )?(only|just|exactly) (ever )?(one|a "
                                  r"single) (active )?(scheduler|leader|dispatcher|planner)s?\b"), 0.6,
                # the old leader discussed: fenced, or paused ("a GC pause on the leader"); not a leader that pauses
                # its own work ("the leader pauses scanning"), which is no word on a deposed leader
                unless_anywhere=pattern(r"(old|former|stale|paused|zombie|previous|deposed|wak\w+) leader",
                                        r"leader\b.{0,60}\b(fenc|epoch|term|token|gc|(is|was|gets|got|being) "
                                        r"paused)\b",
                                        r"\b(gc|garbage[- ]collection|stop[- ]the[- ]world) paus\w*.{0,60}\bleader",
                                        r"\b(fenc\w*|epoch|term|token)\b.{0,60}\bleader", r"failover gap",
                                        r"unique\b.{0,40}\b(fire|schedul|run|due)"), alone=HARD_PART_ALONE),
    # The old leader named, but trusted to stop itself when its own session or lease ends: "a paused process cannot
    # fence itself" (the criterion's hire signal). It wakes from a pause still leading until it hears so, and its
    # dispatches land meanwhile, unless the leader's writes carry an epoch the store or workers compare, or the store's
    # unique key refuses the old leader's occurrence (LEADER_FENCED, anywhere in the design).
    WrongAnswer("replica_double_fire", "the old leader trusted to stop itself when its session or lease ends (a paused "
                "process cannot fence itself)", pattern(
        rf"\bleader\b[^.;]{{0,80}}\b{OWN_TERM}(_|\b[^.;]{{0,40}}\b)(expir\w*|ends?|lapses?|times? out)\b[^.;]{{0,60}}"
        rf"{STOPS_ITSELF}",
        rf"\bleader\b[^.;]{{0,40}}\b(los(es|t|ing)|fail\w* to (renew|keep)|cannot renew)\b (its |the )?(\w+ )?"
        rf"{OWN_TERM}\b[^.;]{{0,60}}{STOPS_ITSELF}",
        # the leader reading its own lease's time left before it acts ("checks that its lease has more than 3 s left
        # before each batch"): DDIA's lease bug, a pause between the check and the write outlives the lease
        rf"\bleader\b[^.;]{{0,40}}\b(checks?|verif\w*|confirms?|makes sure)\b[^.;]{{0,20}}\b(its|the) (own )?"
        rf"{OWN_TERM}\b[^.;]{{0,40}}\b(left|remaining|still (valid|held|live|alive)|not (yet )?expired)\b",
        # the new leader waits out the old one's lease, trusting it stopped when the lease did
        r"\bnew leader only (starts|begins|takes over|acts)\b[^.;]{0,40}\bafter\b[^.;]{0,40}\b(old|previous|former) "
        r"leader'?s? (\w+ )?(lease|session|key)"), 0.6, unless_anywhere=LEADER_FENCED, alone=HARD_PART_ALONE),
    WrongAnswer("replica_double_fire", "a check whether the run already happened, then a separate write (two replicas "
                "both pass the check)", pattern(
        r"check(s|ed|ing)? (whether|if) (it|the job|the run|the occurrence|a run|this run) (has )?(already )?"
        r"(ran|run|fired|been (run|fired|dispatched|scheduled)|exists)\b.{0,40}\b(before|then|first)",
        r"\b(before|first)\b.{0,30}\bcheck(s|ing)? (whether|if) (it|the job|the run)\b.{0,20}\balready"), 0.6,
                unless=pattern(r"\b(same transaction|atomic\w*|unique|conditional|compare[- ]and|lock(ed|s)?|"
                               r"for update|if not exists|on conflict)\b")),
    WrongAnswer("replica_double_fire", "every replica fires every due job", pattern(
        r"(each|every|all) (of the )?(\w+ ){0,2}(replicas?|schedulers?|nodes?|followers?|instances?) (also )?"
        r"(fires?|runs?|dispatch\w*|triggers?) "
        r"((every|each|all|the same) (\w+ )?(jobs?|fire times?|occurrences?)|(\w+ ){0,4}it sees|it)\b",
        r"(all|every|both) (of the )?(\w+ ){0,2}(replicas|schedulers|nodes|followers|instances) (can )?(also )?"
        r"(fire|run|dispatch|trigger)\b.{0,40}\b(at the same time|simultaneously|concurrently)",
        r"(fire|run)s? (it )?(together|up to (three|3|two|2) times)",
        r"(replicas|schedulers|nodes|instances) (each|all) (also )?(fire|run|dispatch|trigger)s? "
        r"(every|each|all|the same) (\w+ )?(jobs?|fire times?|occurrences?|runs?)\b",
        # every replica its own leader: "three leaders, one per replica"
        r"\b(two|three|several|multiple|many|\d+) leaders\b.{0,30}\b(one )?(per|for each|on each|in each) "
        r"(replica|node|scheduler|instance)", r"(other|all) replicas (also|were already) fir",
        r"\b(having|letting|lets?|makes?) (all|every|each) (of the )?(\w+ ){0,2}(replicas?|schedulers?|nodes?|"
        r"instances?) (fire|run|dispatch)\b",
        # every replica its own leader: "each node is the leader for all jobs", "every replica elects itself"
        r"(each|every|all) (of the )?(\w+ ){0,2}(replicas?|schedulers?|nodes?|instances?) (is|are) (the |a )?"
        r"leaders? (for|of) (all|every)\b",
        r"(each|every|all) (of the )?(\w+ ){0,2}(replicas?|schedulers?|nodes?|instances?) elects? (itself|themselves)"),
        0.0,
        # "I chose a leader over letting all three nodes fire": the alternative weighed and not taken
        unless=pattern(r"\b(over|instead of|rather than|not) (having|letting|making) (all|every|each)\b")),
    WrongAnswer("replica_double_fire", "a second occurrence overwrites the first (the last insert wins) instead of "
                "being refused", pattern(r"\b(latest|last)[- ](\w+[- ]){0,2}(insert|write|writer|replica)'?s?"
                                         r"( \w+)? wins\b"), 0.6),
    WrongAnswer("replica_double_fire", "a node without quorum carries on as leader (two leaders)", pattern(
        r"(los(es|t|ing) (its |the )?quorum|without (a )?quorum|in the minority)\b.{0,80}\b(continues?|keeps? "
        r"(running|serving|accepting|writing|firing)|stays? (the )?leader|read[- ]write)"), 0.0,
                unless=pattern(r"\b(steps? down|stops?|refuses?|read[- ]only|cannot|can'?t)\b")),
    WrongAnswer("catch_up", "missed runs skipped silently, with no record", pattern(
        r"\bskip(s|ped|ping)? (all |every |the )*(missed|overdue|past[- ]due)\b",
        # the skip said as the cursor moved past the missed times: "recomputes next_run_at as the next occurrence
        # after now()", "advances next_fire_at to the next fire time after now", "moves next_run_at forward to the
        # next future time"
        rf"\b{CURSOR}\b[^.;|]{{0,40}}\b(recomputed|moved|advanced|set|reset)\b{PAST_THE_MISSED}",
        rf"\b(recomputes?|advances?|moves?|sets?|resets?)\b[^.;|]{{0,10}}\b{CURSOR}\b{PAST_THE_MISSED}"), 1 / 3,
                unless=pattern(r"\b(record\w*|rows?|reasons?|mark\w*|logged|status|state)\b",
                               CATCH_UP_OPTIONS.pattern,
                               # the latest missed time run first, then the cursor moved on: a catch-up, not a skip
                               r"\b(fires?|runs?|gets?) (\w+ ){0,2}once\b",
                               r"\b(latest|most recent|last) (missed|occurrence|fire|run)"),
                # a fire time skipped with no record is one at-least-once cannot account for ("succeeded at least
                # once, or dead with a reason"): follow-up 5's records, without what they promise
                spoils=(("proof_of_execution", 0.5),), alone=HARD_PART_ALONE),
    WrongAnswer("catch_up", "every missed run fired at once", pattern(
        r"(all|every) (the |[\d,.]+k? )?(missed|overdue|past-due)\b.{0,60}\b(at once|immediately|in one burst|"
        r"together)",
        r"fires? every (job|occurrence|run|execution)\b.{0,60}\b(in the past|has passed|missed)",
        r"(run|fire)s? them all\b"), 1 / 3,
                unless=CATCH_UP_OPTIONS),
    WrongAnswer("catch_up", "the catch-up released at an unlimited rate (a storm)", pattern(
        r"\b(admission|release|drain|dispatch|catch[- ]up) (rate|limit)\W+(\w+\W+){0,2}"
        r"(unlimited|infinite|unbounded)\b",
        r"\b(unlimited|infinite|unbounded) (admission|release|drain|catch[- ]up) rate"), 1 / 3,
                unless=pattern(r"\b(never|not|no) (\w+ )?(unlimited|infinite|unbounded)")),
    WrongAnswer("proof_of_execution", "the logs, or a status set at hand-off, as proof that a job ran", pattern(
        r"(know|tell|prove|confirm|see|check)\w*\b.{0,40}\b(ran|run|executed|succeeded)\b.{0,30}\b(from|in|by "
        r"(checking|reading|grepping)) (the )?logs?\b",
        r"\blogs?\b.{0,30}\b(prove|show|tell us|confirm)\w*\b.{0,30}\b(it |the job |a job )?(ran|run|executed)\b",
        r"\b(marked|set to|status (is )?set to|becomes?) ['\"`]?(done|complete|completed|succeeded|finished)\b.{0,40}"
        r"\bwhen (it is |the job is )?(handed|sent|published|dispatched|enqueued|pushed|put on)"), 1 / 3),
    WrongAnswer("storage_limits", "the store said not to scale, with no number", pattern(
        r"(postgres\w*|mysql|sql|relational databases?|the database|rdbms)\b.{0,20}\b(doesn'?t|does not|can'?t|"
        r"cannot|won'?t|will not|is not (built|made) to) (\w+ )?scale"), 0.25,
                unless=pattern(r"\d")),
    WrongAnswer("storage_limits", "the store declared limitless", pattern(
        r"(removes?|eliminates?) (all )?(lock )?contention", r"scales? (infinitely|without (a )?limit|forever)",
        r"(postgres|the database|the store) is fine at\b"), 0.25,
                unless=pattern(r"\b(but|until|breaks?|limits?|ceiling|falls? behind|saturat\w*)\b")),
)


@dataclass(frozen=True)
class Charge:
    wrong: WrongAnswer
    evidence: Evidence
    sentence: str  # as the unit reads it: redaction drops each piece of it, whatever lines it spans

    def covers(self, sentence: str) -> bool:
        words = " ".join(sentence.split())
        return bool(words) and words in " ".join(self.sentence.split())


def charges(doc: Document) -> list[Charge]:
    """Every wrong answer the attempt gives, with the sentence that gives it (once per wrong answer)."""
    found = []
    units = [u for u in doc.content_units() if u.section != 9]  # section 9 names wrong answers to reject them
    whole = " ".join(u.statement_text for u in units)
    store_fences = store_checks_token(doc)
    for wrong in WRONG_ANSWERS:
        if wrong.unless_anywhere and wrong.unless_anywhere.search(whole) or wrong.unless_store_fences and store_fences:
            continue
        for unit in units:
            hit = next((s for _, s in unit.statements() if affirmed(wrong.claim, s) and not DISCUSSION.search(s)
                        and not (wrong.unless and wrong.unless.search(s))), None)
            if hit:
                found.append(Charge(wrong, Evidence.of(unit, wrong.claim), hit))
                break
    return found


def charge(check_id: str, finding: Finding, found: list[Charge]) -> Finding:
    """``finding`` with its fraction capped by the wrong answers charged to ``check_id``, each quoted."""
    mine = [c for c in found if c.wrong.cap_for(check_id) is not None]
    if not mine:
        return finding
    cap = min(c.wrong.cap_for(check_id) for c in mine)
    notes = [f"wrong answer, costs points (line {c.evidence.line}): {c.wrong.name}: \"{c.evidence.text}\""
             for c in mine]
    return Finding(min(finding.fraction, cap), finding.evidence, notes + finding.missing)
