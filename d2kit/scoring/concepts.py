"""The hard parts, the clarifications and the hidden follow-ups: did the document address each?

Each detector looks for a mechanism, not a buzzword, and most need two things in the same
paragraph or list item: a fencing token *and* the write path that checks it; a catch-up rule *and*
the per-job policy that exposes it; a storage limit *and* a number. Found only in a bare list or
a fragment, a part earns half (see evidence.credit).
"""

from __future__ import annotations

import re

from d2kit.scoring.arithmetic import mostly_wrong, quantities, stated_quantities
from d2kit.scoring.contradictions import denials
from d2kit.scoring.document import Document, Unit
from d2kit.scoring.evidence import (
    LIST_CREDIT,
    Evidence,
    Finding,
    both,
    combine,
    component,
    credit,
    pattern,
)

# The guarantee in plain words: "a run may happen more than once but is never lost" is at-least-once.
AT_LEAST_ONCE_PLAIN = (r"(more than once|twice|again)\b.{0,40}\b(never|not) (\w+ ){0,2}(lost|dropped|skipped|"
                       r"missed|silently)",
                       r"\bnever (\w+ ){0,3}(lost|dropped|skipped|missed)\b.{0,40}\b(more than once|twice|duplicat)",
                       r"\b(runs?|happens?|executes?|fires?) (\w+ )?one or more times\b")
SEMANTICS = pattern(r"at[- ]least[- ]once", r"at[- ]most[- ]once", r"exactly[- ]once", *AT_LEAST_ONCE_PLAIN)
# "Exactly one time", as plain write-ups say exactly-once ("we cannot promise a run happens exactly one time").
EXACTLY_ONCE = r"(exactly[- ]once|exactly one time)"
DELIVERY_LIMIT = pattern(
    rf"{EXACTLY_ONCE}.{{0,120}}\b(not (achievable|possible)|impossible|cannot|can'?t|requires?|needs?|only with|"
    r"only if|cooperat|effectively)",
    rf"(idempoten|fencing|dedup).{{0,120}}\b({EXACTLY_ONCE}|duplicate|twice|more than once|retr(y|ies)|re-?run)",
    r"at[- ]least[- ]once.{0,120}\bidempoten",
    rf"({EXACTLY_ONCE}|duplicate|twice|more than once).{{0,120}}\b(idempoten|fencing|dedup)",
    r"at[- ]least[- ]once.{0,160}\b(drop|ignore|skip|discard|detect)s? (the )?(repeats?|duplicates?|second (run|copy))",
    r"(can'?t|cannot|can ?not|no way to|never) (promise|guarantee|offer)\W+(\w+\W+){0,2}"
    rf"(only[- ]once|{EXACTLY_ONCE})",
    r"\b(make|makes|making) (a |the )?(repeats?|duplicates?|retr(y|ies)|re-?runs?|second runs?) harmless",
    # "No engine can make a side-effecting job exactly-once": the limit, said by denying the promise.
    rf"\b(no|nothing|nobody|no one)\b (\w+ ){{0,3}}(can|could|will) (\w+\W+){{0,5}}{EXACTLY_ONCE}",
    # The same limit in the words practitioners use for it: the system says what it cannot make happen once
    # ("the scheduler can't make a side-effecting job happen exactly once", "exactly-once isn't something the
    # scheduler can promise"), or what the job does instead ("the job has to dedupe on the run id", "handlers must be
    # idempotent", "running it twice is harmless").
    r"\b(can'?t|cannot|can ?not|won'?t|will not|doesn'?t|does not)\b (\w+ ){0,2}(make|promise|guarantee|give|offer|"
    rf"provide|deliver|ensure)\b.{{0,60}}\b(only[- ]once|{EXACTLY_ONCE})",
    rf"{EXACTLY_ONCE}\b.{{0,80}}(\bnot|n'?t) (something|a thing|a promise|a property)\b.{{0,40}}\b(can|could) (promise|"
    r"guarantee|give|offer|provide)",
    r"\b(running|run|runs|doing|executing|firing|re-?running) (it |them |a job |the job |jobs )?(twice|again|more than "
    r"once)\b.{0,20}\b(is|are|must be|should be|has to be|stays?) (harmless|safe|a no-?op)",
    r"\b(job|handler|task|consumer|sink|downstream)s?\b.{0,40}\b(has to|have to|must|needs? to|should)\b.{0,10}\b"
    r"(dedupe?|deduplicate|be idempotent)",
)

LATENCY = pattern(r"\blate\b", r"latency", r"lateness", r"\bon time\b", r"start(s|ed)? within", r"fires? within",
                  r"\bdelay", r"\bjitter", r"\btolerance", r"\bslo\b", r"\bp9\d\b.{0,30}\bstart")
TIME_TARGET = pattern(r"\d\s?(ms|s|sec|seconds?|mins?|minutes?)\b")
ORDERING = pattern(r"\bordering\b", r"\bordered\b", r"serializ", r"serialis", r"\bfifo\b", r"in order(?! to)",
                   r"\bsequential", r"one at a time", r"\boverlap")
TENANCY = pattern(r"multi-?tenan", r"noisy neighbo",
                  r"(tenant|customer|team|account)s?\b.{0,80}\b(isolat|fair|caps?\b|quota|share|limit|trust)",
                  r"(isolat|fair|caps?\b|quota|limit).{0,80}\btenants?\b", r"single (trusted )?(user|tenant)")

# The words practitioners use for the same mechanisms (SQS, Chubby, ZooKeeper, Raft, Cassandra, DynamoDB,
# Quartz, Kubernetes CronJob, Kleppmann's fencing tokens), textbook or plain, so the mechanism earns the
# point whatever it is called.
TENANT = r"(tenant|customer|team|account|org(anization)?|client)s?"
LEASE = pattern(r"\blease", r"heartbeat", r"visibility timeout", r"check(s|ed)?[- ]?ins?\b", r"keep[- ]?alive",
                r"time[- ]limited (claim|lock|ownership|reservation)",
                r"renew\w* (its |the |a )?(claim|lock|reservation|ownership)",
                r"claims? (with|that has) (an? )?(expiry|ttl|deadline)",
                r"(claim|lock|reservation|ownership|session)s? (expires?|runs? out|times? out|lapses?)",
                r"(ephemeral (node|key)|session) .{0,40}(expir|ttl|alive)",
                r"(extends?|renews?|pushes? (back|forward)) (the |its )?(expiry|deadline|visibility)",
                r"\b(claimed|locked|leased|reserved|held)_until\b", r"\brenew(s|ed|als?)? every \d",
                r"\b(expires|lease|claim|deadline)_at\b", r"\b(extends?|renews?) (it|them) every",
                r"\bholds?\b.{0,30}\b(runs? out|expir\w*|times? out|lapses?)")
LIVENESS = pattern(r"\brenew", r"expir", r"\bttl\b", r"\bmiss(es|ed)?\b", r"time[sd]? ?out", r"\bdead\b",
                   r"\bdie[sd]?\b", r"\bstops?\b", r"\bevery \d")
# What a fencing number is called: textbook, product (SQS's receive count, Raft's term) and plain ("turn number").
FENCE_NUMBER = (r"(fenc(e|ing)|epoch|generation|version|ticket|sequence|lease|attempt|claim|owner(ship)?|delivery|"
                r"receive|term|token|turn|try)")
FENCING = pattern(r"\bfenc", r"\bepoch", r"monotonic(ally)?( increasing)? (token|counter|version|number|id)",
                  r"lease (version|generation)", r"\bgeneration\b", r"version (number|counter)",
                  r"\bsequencer\b", r"\b(raft )?term number",
                  # what only grows must be a number the store can compare, not a tally ("the worker count only grows")
                  rf"(\b{FENCE_NUMBER}|\bcounter|\bnumber|\bindex|\bid|_id)s?\b[^.;|]{{0,60}}\b(only|ever) (ever )?"
                  r"(grows|increases|goes up)",
                  # the fencing token's textbook definition, "a number that increases every time the lock is granted":
                  # "a counter that goes up every time the run is handed out"
                  rf"(\b{FENCE_NUMBER}|\bcounter|\bnumber)s?\b[^.;|]{{0,60}}\b(grows|increases|goes up) (every|each) "
                  r"time\b",
                  # a number the store compares for order, named as practitioners name one: an attempt, claim,
                  # ticket, sequence, generation, lease or try number (SQS's receive count, ZooKeeper's zxid). Not any
                  # '<noun> count': "the retry count is incremented" counts retries, it fences nothing.
                  rf"\b{FENCE_NUMBER}[_ ](number|no|num|count|counter|version)\b(?! of)"
                  r".{0,80}\b(higher|greater|highest|bigger|larger|newer|increment|bump|older|lower|stale)",
                  r"\bzxid",
                  # an id minted anew at each claim and matched where the holder writes ("every claim gets a fresh
                  # lease_id ... WHERE lease_id = ?"): the stale holder's id no longer matches (SQS's receipt handle)
                  r"\b(new|fresh|different) `?(lease|claim|attempt|owner)[_ ](id|token)\b", r"\breceipt handle",
                  # what each take adds one to: a number or version is an order ("the run's turn number"); a
                  # count or counter tallies ("increments the retry counter") unless it is a fencing noun's.
                  r"(adds? one to|increments?|bumps?) (the |its |a )?(\w+'s )?(\w+ )?(number|version)\b",
                  rf"(adds? one to|increments?|bumps?) (the |its |a )?(\w+'s )?{FENCE_NUMBER}[_ ](count|counter)\b")
FENCE_CHECK = pattern(r"\bcheck", r"\bverif", r"\breject", r"\bcompar", r"\bguard", r"\bconditional",
                      r"where\b.{0,40}token", r"\bstale\b", r"\bolder\b", r"\bhigher\b", r"\brefus",
                      r"\bonly accept", r"\bhighest\b")
WRITE_PATH = pattern(r"\bwrite", r"\bcommit", r"\bcomplet", r"\bstorage\b", r"\bsink\b", r"downstream",
                     r"side[- ]effect", r"\bledger", r"the job'?s own", r"\boutput", r"\bupdate", r"\bresults?\b")
# The rubric's full mark has two checkers: the scheduler's store on completion, and what the *job* writes to (its
# sink, the downstream service, the results store). A token checked only when the run reports done leaves the
# zombie's side effects unfenced: the old copy's writes land before it ever reports.
JOB_WRITE_PATH = pattern(r"\bsinks?\b", r"downstream", r"side[- ]effect", r"\bledger", r"the job'?s (own )?\w*\s?"
                         r"(writes?|outputs?|effects?|stores?|database|sinks?)", r"\bjob (writes|output)",
                         r"\b(every|each|any) write\b", r"\b(results?|payments?|billing|output) (store|table|service|"
                         r"database|api)s?\b", r"\b(target|external|third[- ]party) (store|system|service|database)",
                         r"\bwrites? (the job|it) makes\b", r"\b(its|their) (own )?writes\b")
# A token checked where something lands: on completion or any write (follow-up 1's first checker), and on the job's
# own writes (its second).
CHECKED_ON_A_WRITE = both(FENCE_CHECK, WRITE_PATH)
CHECKED_ON_THE_JOBS_WRITES = both(FENCE_CHECK, JOB_WRITE_PATH)

# "Jobs may check this token if they want; it is up to the job": a check nobody must make is a token nothing checks.
OPTIONAL_CHECK = pattern(r"\b(may|might|could|can optionally|optionally)\b.{0,30}\b(check|verif|compar|reject)",
                         r"up to the (job|author|user|tenant)", r"if (it|they) (wants?|chooses?|likes?)")
# "The worker checks its own fencing token before each write": the holder vouching for itself. A token fences a
# stale holder only when the store it writes to is the one that checks (the worker may be the paused one).
SELF_CHECK = pattern(r"\b(worker|client|job|holder|process)s?\b.{0,30}\b(checks?|verif\w*|validat\w*|compar\w*)\b"
                     r".{0,20}\b(its|their) own\b.{0,20}\btokens?",
                     r"\b(worker|client|holder)s? (itself|themselves) (checks?|verif\w*|validat\w*)\b.{0,30}\btokens?",
                     # the holder doing the checking, whatever it checks with the token ("the token is sent with the
                     # kill request, so the old worker can verify it"): the check that fences is made by another
                     r"\btokens?\b[^.;]{0,80}\b(worker|client|holder)s? (\w+ ){0,2}(checks|verifies|validates|can "
                     r"(check|verify|validate))\b",
                     r"\b(worker|client|holder)s? (\w+ ){0,2}(checks|verifies|validates|can (check|verify|validate))\b"
                     r"[^.;]{0,80}\btokens?\b")
NOT_THE_STORES_CHECK = pattern(OPTIONAL_CHECK.pattern, SELF_CHECK.pattern)

# Quartz's fire time, Temporal's scheduled time, Oozie's nominal time, Airflow's logical date, a planned time, and the
# column many write-ups give it, scheduled_for (the underscore: "scheduled for review" is no fire time).
FIRE_TIME = (r"((fire|scheduled|schedule|run|due|trigger|planned|nominal|logical)[_ ]?"
             r"(time|at|minute|timestamp|date|moment)|scheduled_for)\b")
# The leader guard and the unique key, apart from the rest: a design that denies one ("there is no leader
# election", "we deliberately do not put a uniqueness constraint on (job, fire time)") has not got it, whatever
# other sentences say of it (contradictions.denials).
LEADER_GUARD = (r"leader (election|lease)", r"elect\w*.{0,20}\bleader", r"\bleader\b.{0,40}\belect", r"only the leader")
UNIQUE_KEY = (
    # A uniqueness guarantee counts when it is on the fire time, not on any column pair: not across a clause
    # ("next_run_at, deleted_at); unique (org_id, name)" makes the name unique, not the fire time).
    rf"unique[^|;.]{{0,40}}{FIRE_TIME}", rf"{FIRE_TIME}[^|;.]{{0,40}}\bunique", rf"\(job(_id)?, ?{FIRE_TIME}",
    rf"(primary|unique|composite) key\b[^|]{{0,30}}\b({FIRE_TIME}|minute)", r"\(job(_id)?, ?(the )?(\w+ )?minute\)",
    r"keyed (by|on) (the )?job\b[^|]{0,30}\b(minute|fire|planned|scheduled|due)", r"duplicate[- ]key",
    r"\bunique (pair|combination)\b")
OTHER_DOUBLE_FIRE_GUARDS = (
    r"\b(put|create|insert|write)[- ]if[- ](absent|not[- ]exists)",
    r"on conflict", r"dedup(e|lication)? key", r"\bcas\b", r"compare[- ]and[- ]swap",
    r"conditional (update|write|insert|put)", r"for update", r"skip locked", r"claim (row|the row)",
    r"optimistic (lock|concurrency)", r"advisory lock", r"\bpartition(ed)? ownership", r"consistent hash",
    r"\bshard(ed)? ownership", r"compare[- ]and[- ]set", r"if not exists", r"lightweight transaction",
    r"condition(al)? expression", r"\bif (generation|version|state|owner|holder)\s*=",
    r"(slice|bucket|partition|shard|range)s? (owner|ownership)",
    r"owns?\b.{0,20}\b(slice|bucket|partition|shard|range)s?\b", r"attribute_not_exists",
    r"(one|a single) (owner|planner|dispatcher) (per|for each) (slice|bucket|partition|shard)",
    # partitioned ownership in any words for the part: "each of the 512 pieces has exactly one owner at a time"
    r"\b(exactly|only) one owner\b",
    # SKIP LOCKED in plain words: "row locks, skipping rows someone else holds".
    r"\brow locks?\b", r"\bskip(s|ping)? (the )?rows?\b",
    # a put-if-absent in plain words: "created only if no item with this key exists", "written only if not there"
    r"\bonly if (it is )?(absent|not there|(it )?(does not|doesn'?t) (already )?exist|no (row|item|record|entry)\b"
    r"[^.;|]{0,30}\bexists)",
)
DOUBLE_FIRE_MECHANISM = pattern(*UNIQUE_KEY, *OTHER_DOUBLE_FIRE_GUARDS, *LEADER_GUARD)
REPLICAS = pattern(r"replica", r"(several|multiple|four|three|two|each|both|other|a second|the second) "
                   r"(schedulers?|planners?|dispatchers?|instances|coordinators?|owners?|pollers?|scanners?|"
                   r"consumers?|leaders|"
                   r"nodes|standbys)",
                   r"more than one (scheduler|planner|dispatcher|owner|poller|consumer)",
                   r"both (replicas|schedulers)", r"\btwice\b", r"double[- ]?(fire|dispatch|run)",
                   r"duplicate")
WHY = pattern(r"because", r"\bso that\b", r"\bwhich means\b", r"rather than", r"instead of", r"\bif (a|the|one) "
              r"(replica|leader|scheduler)", r"whichever", r"however (it|many)", r"no matter", r"failover",
              r"\bwhy\b", r"failure profile", r"\bwithout\b", r"switch[- ]?over", r"\btake-?over", r"\beven if\b",
              r"\bhand-?over\b", r"\brebalanc", r"single point of failure",
              r"\bno (single )?(leader|master|boss|coordinator|primary)\b")

CATCH_UP = pattern(r"misfire", r"catch[- ]?up", r"backfill", r"\bcoalesc", r"thundering herd", r"late[- ]start",
                   r"\bstampede",
                   r"starting[- ]?deadline", r"missed (\w+ )?(times?|minutes?|occurrences?|runs?)",
                   r"missed (run|fire|occurrence|tick|execution|job|time)", r"most recent (occurrence|run|fire)",
                   r"after (an? )?(outage|downtime)", r"fire times? (that )?(have |has )?passed",
                   r"(was|is|been) down for",
                   # plain words: "jobs that should have run during the outage"
                   r"should have (run|fired|started)\b.{0,40}\b(during|while)\b.{0,20}\b(outage|downtime|down)\b")
PER_JOB_POLICY = pattern(r"per[- ]job", r"\bpolic(y|ies)\b", r"configurable", r"job'?s own", r"on the job",
                         r"each job (has|chooses|picks|sets|carries|says|decides|declares)",
                         r"\brule\b.{0,40}\b(per|each) job", r"(each|every|per) (schedule|job)\b.{0,30}\b(setting|"
                         r"rule|option|choice)\b",
                         r"the (user|owner) (chooses|picks|decides|sets)")
PACING = pattern(r"rate[- ]limit", r"\bpac(e|ed|ing)\b", r"admission", r"token bucket", r"\bspread", r"\bjitter",
                 r"throttl", r"drain(s|ed)? at", r"per second", r"/s\b")

TENANT_CAPS = pattern(rf"(per[- ]{TENANT}|{TENANT}).{{0,40}}\b(cap|limit|quota|max)", r"concurrency (cap|limit)",
                      r"\bquotas?\b", rf"\b(cap|limit|maximum)s? (per|for each|on each) {TENANT}",
                      rf"{TENANT}\W+(\w+\W+){{0,2}}(slots?|maximums?)\b",
                      rf"{TENANT}\b.{{0,60}}\b(fixed|own|set) share\b",
                      r"\b(at|over|past|above|reached) (their|its) (share|limit|cap|quota|maximum)\b",
                      rf"{TENANT}\b.{{0,30}}\b(at most|no more than|up to) \d+\b.{{0,30}}\b"
                      r"(running|at once|concurrent|at a time|in flight|going)")
FAIR_QUEUING = pattern(r"fair[- ]?(queu|shar|schedul)", r"\bweighted\b", r"(shares?|claims?)\b.{0,30}\bby weight",
                       r"round[- ]robin", r"\bdrr\b", r"deficit", rf"fair(ly)? between {TENANT}",
                       rf"(take|serve|pick)s? {TENANT} in turn", rf"(one|each) queue per {TENANT}")
DURATION_POOLS = pattern(r"(separate|dedicated|own) (worker )?pools?", r"pools? (by|for) (expected )?duration",
                         r"long (jobs|runs) (only )?(run )?on (the )?(long|separate|dedicated|own)",
                         r"(jobs|runs) (longer than|over|above)\b.{0,30}\b(own|separate|dedicated|long)\b.{0,20}"
                         r"(machines|pool|workers|fleet|queue)",
                         r"(separate|dedicated|own) (machines|fleet|queue) for (long|short)",
                         r"long[- ]running (pool|queue|workers)", r"(short|long) pool", r"\bbulkhead",
                         r"pools? of workers for",
                         r"(separate|dedicated|own) (set|group|fleet|pool) of (machines|workers|hosts|nodes|runners)")

EXECUTION_RECORDS = pattern(r"execution (record|row|history|log|table)s?", r"attempts? (table|row|record)s?",
                            # a workflow engine's record: "every attempt is a history event", "the event history"
                            r"(event|workflow) history",
                            r"(every|each) (attempt|run|execution) is an? (history )?event",
                            r"run (record|history|table)s?", r"occurrence (row|record|table)s?", r"\baudit",
                            r"executions table",
                            r"row (for|per) (every |each )?((planned|scheduled) )?(attempt|occurrence|run|execution)",
                            r"(every|each) (attempt|run|execution|occurrence) (gets|has|is) (a|its own) (row|record)")
DISPATCHED_VS_COMPLETED = pattern(
    r"(dispatch\w*|scheduled|started|claimed|handed out).{0,60}\b(vs\.?|versus|is not|isn'?t|not the same|rather than|"
    r"different from)\b.{0,30}complet",
    r"(dispatch\w*|scheduled|started|claimed|handed out)\W+(\w+\W+){0,2}≠.{0,30}complet",
    r"complet\w*.{0,60}\b(vs\.?|versus|is not|isn'?t|not the same|different from).{0,30}dispatch",
    r"dispatched.{0,40}\b(but|and) (not |never )?(completed|finished|succeeded)",
    r"(terminal|final) state", r"succeeded\b.{0,80}\b(dead|failed|lost)", r"completion (record|ack)",
    r"\b(tell|distinguish|separate)s?\b.{0,30}\b(handed|sent|dispatched|started|given)\b.{0,40}\b(from|and)\b.{0,20}\b(finished|completed|"
    r"done|succeeded)",
)
PROMISE = pattern(r"at[- ]least[- ]once (means|promises|guarantee)", r"(promise|guarantee)s? (the user|that)",
                  r"idempoten", r"\bwhat we (promise|guarantee)\b",
                  # "the promise I am making is that every due run happens at least once", "our promise is that"
                  r"\b(promise|guarantee)\b.{0,25}\b(is|are) that\b")

# The store, or the table and index the design keeps in it ("the index on next_run_at becomes a hot spot").
STORAGE = pattern(r"postgres", r"skip locked", r"\bdatabase\b", r"\bsql\b", r"\bstore\b", r"\bstorage\b",
                  r"\b(jobs?|runs?|executions?|schedules?) table\b", r"\bindex(es)? on\b")
STORAGE_LIMIT = pattern(r"\bbreaks?\b", r"stops? (working|scaling)", r"\blimits?\b(?!\s*\d)", r"ceiling", r"saturat",
                        r"tops? out", r"contention", r"vacuum", r"dead tuples", r"\bbloat", r"bottleneck",
                        r"falls over",
                        r"runs out", r"\bfirst to (go|break)", r"max(es)? out", r"at around", r"beyond")
STORAGE_NEXT = pattern(r"partition", r"\bshard", r"\bbatch", r"move (to|the)", r"switch to", r"replace",
                       r"split", r"separate (table|queue)", r"\bkafka\b", r"in-memory", r"timer wheel",
                       r"delay queue", r"next step", r"then we")

ONE_CLOCK = pattern(r"(database|\bdb|postgres|server|store)'?s? (own )?(clock|now\(\)|time)", r"single clock",
                    r"one clock", r"monotonic", r"elapsed time", r"\bstopwatch",
                    r"never compare(s|d)? (a |the )?(wall )?(clocks|times?|timestamps?)", r"same clock",
                    r"(on|by) (its|one|a single|the same) (own )?(machine|node)'?s? (clock|timer)",
                    r"time(s|stamps?)? (written|taken) (by|on) (one|the same) (machine|node)",
                    r"(decided|judged|measured|checked) (only )?(by|on) (the )?(store|database|db|server)\b",
                    r"its own now\(\)", r"the only clock")
SKEW = pattern(r"clock skew", r"\bskew", r"\bntp\b", r"\bdrift", r"wall[- ]clock",
               r"clocks? (that )?(may |can |will )?(disagree|differ|drift)",
               # chrony's and NTP's word for it: "alert if any host's offset exceeds 500 ms"
               r"\b(clock|host'?s?) offsets?\b", r"\boffsets?\b.{0,30}\b(time (service|server)|ntp|chrony)")


def _deep_dive_first(doc: Document) -> list[Unit]:
    """All units, the deep dive and failure sections first: where a mechanism is explained, not just named."""
    return doc.section_units(6) + doc.section_units(7) + [u for u in doc.content_units() if u.section not in (6, 7)]


def _designed(doc: Document) -> list[Unit]:
    """Where the design's own mechanisms are: everything but section 9, which names what was *not* built and why
    ("I rejected a leader cluster because it brings split brain, clock skew and fencing"). A mechanism named only
    there is not in the design; the reason it was chosen may still be given there."""
    return [u for u in _deep_dive_first(doc) if u.section != 9]


def clarifications(doc: Document) -> Finding:
    units = doc.content_units()
    scale_units = doc.section_units(1) + doc.section_units(2) or units
    stated = stated_quantities([u for u in scale_units if u.kind != "heading"])
    if len(stated) >= 2:
        scale_credit = max(credit(u) for u, _ in stated)
        scale = Finding(scale_credit, [Evidence.of(stated[0][0])], [])
    elif stated:
        scale = Finding(LIST_CREDIT, [Evidence.of(stated[0][0])], ["scale: only one number with a unit"])
    else:
        scale = Finding(0.0, missing=["scale: no numbers with units in sections 1-2"])
    latency_question = "latency tolerance: is a job firing 30 s late a bug or a shrug?"
    latency = component(units, LATENCY, latency_question, also=TIME_TARGET, deniable=False)
    if not latency.evidence:
        latency = component(units, LATENCY, latency_question, deniable=False)
        if latency.evidence:
            latency.fraction *= LIST_CREDIT
            latency.missing.append("latency tolerance: no start-delay target with a number")
    return combine([
        (0.2, scale),
        (0.2, component(units, SEMANTICS, "delivery semantics: at-least-once or at-most-once?",
                        deniable=False)),
        (0.2, latency),
        (0.2, component(units, ORDERING, "ordering: do jobs of one tenant or one schedule need serialising?",
                        deniable=False)),
        (0.2, component(units, TENANCY, "multi-tenancy: isolation and fairness, or one trusted user?",
                        deniable=False)),
    ])


# "Exactly-once: impossible, so we don't try" says what cannot be had, not which guarantee the design gives.
CHOSEN_SEMANTICS = pattern(r"at[- ]least[- ]once", r"at[- ]most[- ]once", *AT_LEAST_ONCE_PLAIN,
                           r"exactly[- ]once(?!\W+(\w+\W+){0,3}(is |was )?(impossible|not (possible|achievable)))")


# An idempotency key on the API's create call ("so a client's retry doesn't create two jobs") makes submitting
# safe; it says nothing of what a run that happens twice does.
API_IDEMPOTENCY = pattern(r"\b(creat\w*|submit\w*|register\w*) (two|a duplicate|duplicate|the same) "
                          r"(jobs?|schedules?)\b", r"\bheader\b")


def delivery_semantics(doc: Document) -> Finding:
    units = doc.content_units()
    return combine([
        (0.5, component(units, CHOSEN_SEMANTICS, "no delivery guarantee is chosen")),
        (0.5, component(units, DELIVERY_LIMIT,
                        "nothing says exactly-once execution needs the job's cooperation (idempotency, fencing)",
                        unless=API_IDEMPOTENCY)),
    ])


def _unless_denied(doc: Document, mechanism: str, units: list[Unit]) -> tuple[list[Unit], list[str]]:
    """``units``, or none when the design denies ``mechanism`` ("we deliberately have no lease"): a sentence that
    describes it elsewhere ("a lease is a promise that expires") does not give it back."""
    denied = denials(doc).get(mechanism)
    if denied is None:
        return units, []
    return [], [f"the design says it has no {mechanism} (line {denied.line}: \"{denied.text}\")"]


# A lease the leader or the election holds ("the leader holds a 10 s lease in etcd", "etcd lease expires after
# 10 s; a follower takes over"): the replicas' question (follow-up 2), not a partitioned worker's (follow-up 1).
LEADER = pattern(r"\bleader\w*", r"\belect\w*", r"\bfollower", r"\bmaster\b", r"\bprimary\b",
                 r"\bcoordinator", r"\bscheduler replicas?\b")
WORK_HOLDER = pattern(r"\b(workers?|jobs?|runs?|executions?|tasks?|claims?|attempts?|consumers?|executors?|"
                      r"messages?|occurrences?)\b")


def _a_workers_lease(unit: Unit) -> bool:
    """The unit has a lease sentence that is not only the leader's."""
    return any(LEASE.search(sentence) and not (LEADER.search(sentence) and not WORK_HOLDER.search(sentence))
               for _, sentence in unit.statements())


def lease_fencing(doc: Document) -> Finding:
    designed = _designed(doc)
    lease_units, lease_denied = _unless_denied(doc, "leases", designed)
    units, token_denied = _unless_denied(doc, "fencing tokens", designed)
    finding = combine([
        (3 / 8, component([u for u in lease_units if _a_workers_lease(u)], LEASE,
                          "no worker lease or heartbeat that expires", also=LIVENESS)),
        (2 / 8, component(units, FENCING, "no fencing token per attempt")),
        (1.5 / 8, component(units, FENCING, "the fencing token is not checked on completion or on any write",
                            also=CHECKED_ON_A_WRITE, unless=NOT_THE_STORES_CHECK)),
        (1.5 / 8, component(units, FENCING, "the fencing token is not checked where the job's own writes land "
                            "(its sink, the downstream service): a zombie's side effects still land",
                            also=CHECKED_ON_THE_JOBS_WRITES, unless=NOT_THE_STORES_CHECK)),
    ])
    return _with_notes(lease_denied + token_denied, finding)


def _with_notes(notes: list[str], finding: Finding) -> Finding:
    return Finding(finding.fraction, finding.evidence, notes + finding.missing) if notes else finding


def double_fire_guard(doc: Document) -> re.Pattern[str]:
    """The double-fire mechanisms the design may have: not the leader guard or the unique key it denies."""
    denied = denials(doc)
    return pattern(*OTHER_DOUBLE_FIRE_GUARDS,
                   *(() if "a unique key on (job, fire time)" in denied else UNIQUE_KEY),
                   *(() if "leader election" in denied else LEADER_GUARD))


# A fencing number in any words, as little as "a higher ticket": enough to say the design has one, not to credit it.
ANY_TOKEN = pattern(FENCING.pattern, r"\btokens?\b", rf"\b{FENCE_NUMBER}[_ ](number|no|num|version)\b",
                    r"\b(higher|newer|larger|greater|bigger) (\w+ )?(ticket|token|number|epoch|generation|version)")


def _token_units(doc: Document) -> list[Unit]:
    """The designed units, less those where the attempt denies having fencing tokens."""
    return _unless_denied(doc, "fencing tokens", _designed(doc))[0]


def has_token(doc: Document) -> bool:
    """The design has a fencing number of some kind (epoch, generation, ticket, token), not denied."""
    return bool(component(_token_units(doc), ANY_TOKEN, "").fraction)


def token_checked(doc: Document) -> bool:
    """A fencing number the design has is compared where a write or a completion lands: "increments the attempt
    count" that nothing ever compares fences nothing (the rubric's partial, "no token is checked anywhere")."""
    return bool(component(_token_units(doc), ANY_TOKEN, "", also=CHECKED_ON_A_WRITE,
                          unless=NOT_THE_STORES_CHECK).fraction)


# The copy still running when its job is handed out again, and its late writes refused: what the rubric's no-hire
# answer ("re-dispatches on a timeout with no word about the copy still running") never does, in any words.
OLD_COPY = pattern(r"\bstill (running|finish)", r"\bkeeps? running\b",
                   r"\b(old|first|original|previous|stale|zombie|partitioned|paused|earlier|abandoned) (copy|worker|"
                   r"attempt|run|execution|holder)\b", r"\bzombie", r"\bcomes? back\b", r"\breconnects?\b",
                   r"\bpartition heals\b", r"\blate (result|write|completion|report|ack)s?\b",
                   r"\b(from|of) that worker\b")
REFUSED = pattern(r"\breject", r"\brefus", r"\bignor", r"\bdiscard", r"\bnot accepted\b", r"\bthrown away\b")
# "When the old worker reconnects it discards its state": the old copy giving up its own work is the holder fencing
# itself (as SELF_CHECK), not its late write refused by the store; a paused or cut-off copy may never get to do it.
SELF_DISCARD = re.compile(r"\b(discard|drop|abandon|ignor|throw)(s|ed|es)?\s+(away\s+)?(its|their)\s+(own\s+)?"
                          r"(state|work|job|run|copy|results?|progress|lease|claim)s?\b", re.I)


def unfenced_redispatch(doc: Document) -> bool:
    """Workers hold leases that expire, no fencing number is checked where a write lands (none, or one nothing
    compares), and nothing refuses the late writes of the copy still running: the first criterion's partial for its
    second hard part ("no token is checked anywhere"), which its no-hire answer says as a re-dispatch "with no word
    about the copy still running"."""
    if not lease_fencing(doc).fraction or token_checked(doc):
        return False
    return not any(OLD_COPY.search(sentence) and REFUSED.search(SELF_DISCARD.sub(" ", sentence))
                   for unit in _designed(doc) for _, sentence in unit.statements())


def store_checks_token(doc: Document) -> bool:
    """Someone other than its holder checks a fencing number: a lock or a kill on top of that is an extra."""
    return bool(component(_designed(doc), FENCING, "", also=FENCE_CHECK, unless=NOT_THE_STORES_CHECK).fraction)


def replica_double_fire(doc: Document) -> Finding:
    units = _designed(doc)
    guard = double_fire_guard(doc)
    mechanism = component(units, guard,
                          "no mechanism (unique (job, fire time), claim CAS, leader lease) stops a double fire")
    # The rubric's partial is "a mechanism named without its failure profile": the why is what makes it full.
    return combine([
        (0.4, mechanism),
        (0.2, component(units, guard, "the mechanism is not tied to several scheduler replicas", also=REPLICAS)),
        # Once a mechanism is used, rejecting another with a reason ("we rejected SKIP LOCKED because ...") is
        # the reason for the choice.
        (0.4, component(_deep_dive_first(doc) if mechanism.evidence else units, guard,
                        "no reason or failure profile for the mechanism chosen", also=WHY,
                        deniable=not mechanism.evidence)),
    ])


def catch_up(doc: Document) -> Finding:
    units = _deep_dive_first(doc)
    policy_units, denied = _unless_denied(doc, "catch-up policy", units)
    return _with_notes(denied, combine([
        (1 / 3, component(units, CATCH_UP, "nothing says what happens to fire times missed during downtime")),
        (1 / 2, component(policy_units, CATCH_UP, "catch-up is not exposed as a per-job policy", also=PER_JOB_POLICY)),
        (1 / 6, component(units, CATCH_UP, "the catch-up is not paced (thundering herd)", also=PACING)),
    ]))


def tenant_isolation(doc: Document) -> Finding:
    units = doc.content_units()
    cap_units, denied = _unless_denied(doc, "tenant caps", units)
    return _with_notes(denied, combine([
        (1 / 3, component(cap_units, TENANT_CAPS, "no per-tenant concurrency cap")),
        # Round-robin over index buckets or weighted partitions is fair to rows, not to tenants: the fairness has to
        # be said of whom it is fair between (tenants, customers, teams).
        (1 / 3, component(units, FAIR_QUEUING, "no fair queuing between tenants", also=pattern(rf"\b{TENANT}\b"))),
        (1 / 3, component(units, DURATION_POOLS, "no separate worker pools by expected duration")),
    ]))


def proof_of_execution(doc: Document) -> Finding:
    units = doc.content_units()
    return combine([
        (0.5, component(units, EXECUTION_RECORDS, "no execution record per attempt")),
        (1 / 3, component(units, DISPATCHED_VS_COMPLETED, "dispatched is not distinguished from completed")),
        (1 / 6, component(units, PROMISE, "nothing says what at-least-once promises the user")),
    ])


def storage_limits(doc: Document) -> Finding:
    # Section 8 is where a limit belongs; look there first so its evidence is the one quoted.
    units = doc.section_units(8) + [u for u in doc.content_units() if u.section != 8]
    # A limit computed from arithmetic that is mostly wrong is not an estimate of it.
    numbered = [] if (wrong := mostly_wrong(doc)) else [
        u for u in units if any(q.has_unit and not q.is_multiplier for q in quantities(u.text))]
    return combine([
        (0.25, component(units, STORAGE, "no reason or limit given for the store", also=STORAGE_LIMIT)),
        (0.5, component(numbered, STORAGE, wrong or "the store's breaking point is not estimated with a number",
                        also=STORAGE_LIMIT)),
        (0.25, component(units, STORAGE_LIMIT, "nothing says what replaces or relieves the store",
                         also=both(STORAGE, STORAGE_NEXT))),
    ])


def clocks(doc: Document) -> Finding:
    units = _deep_dive_first(doc)
    return combine([
        (0.75, component(units, ONE_CLOCK, "leases and due times are not decided by one clock")),
        (0.25, component(units, SKEW, "clock skew between nodes is not acknowledged")),
    ])
