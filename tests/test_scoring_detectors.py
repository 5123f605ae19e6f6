"""The detectors reward substance, not words: each test pairs the real thing with its imitation."""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from d2kit.scoring.arithmetic import calculations, find_calculation, quantities
from d2kit.scoring.concepts import has_token, token_checked
from d2kit.scoring.document import parse, split_items
from d2kit.scoring.failures import failure_items
from d2kit.scoring.practice import render_attempt_template
from d2kit.scoring.prose import is_name_drop, is_prose
from d2kit.scoring.rubric import load_design_rubric
from d2kit.scoring.scorer import score_text
from d2kit.scoring.tradeoffs import rejections


def _check(text: str, check_id: str) -> float:
    report = score_text(text)
    return next(k.points for c in report.criteria for k in c.checks if k.id == check_id)


def _section(number: int, body: str) -> str:
    return f"## {number}. Section\n\n{body}\n"


# -- arithmetic ---------------------------------------------------------------------------------------

def test_a_derivation_counts_and_a_statement_does_not():
    assert find_calculation("50k executions/minute is ~830/s, so at 200 jobs/s per worker that's 5 workers")
    assert find_calculation("10M jobs × 1 KB = 10 GB of definitions")
    assert find_calculation("Let's say 10M scheduled jobs, 50k executions/minute peak") is None
    assert find_calculation("Jobs run from 100 ms to 6 hours") is None
    assert find_calculation("The lease is 30 s and the heartbeat is 10 s") is None
    assert find_calculation("At 09:00:00 the job fires") is None
    # A bare number after an arrow, with nothing combined into it, is a remark, not a result.
    assert find_calculation("One scheduler down for 2 hours → no problem, since there are 3") is None
    assert find_calculation("830/s for 2 s each → 1,660 running")  # a rate by a time: combined


def test_a_checkable_calculation_that_is_wrong_is_not_counted():
    doc = parse(_section(2, "Storage: 10M jobs × 1 KB = 500 GB.\n\nPeak: 50k/min ≈ 5k/s.\n\nOK: 50k/min ≈ 833/s."))
    found = calculations(doc)
    assert [c.checks_out for c in found] == [False, False, True]
    assert _check(doc_text := _section(2, "Storage: 10M jobs × 1 KB = 500 GB."), "calculations") == 0
    assert "does not check out" in " ".join(score_text(doc_text).criteria[2].checks[0].missing)


def test_a_result_in_other_units_or_with_another_number_than_its_expression_is_wrong():
    wrong = ["Peak: 50,000 / 60 ≈ 8,300 executions/s.",  # the bare numbers give 833
             "Storage: 10M × 1 KB = 10 GB per second of history.",  # no per second anywhere in it
             "Locks: 830/s × 30 s lease = 25,000 locks/s.",  # the units cancel: 25,000 locks
             "Concurrency = 830 ÷ 20 s ≈ 41 concurrent jobs, so 41 workers."]  # Little's law inverted
    right = ["Peak: 50,000 / 60 ≈ 833 executions/s.", "Storage: 10M × 1 KB = 10 GB.",
             "Dead tuples: 3,000 updates/s × 86,400 s ≈ 260M dead tuples/day.",  # over a day, written per day
             "Running at once: 830 × 20 s ≈ 16,700."]  # the unit left off the result
    assert [find_calculation(s)[1] for s in wrong] == [False] * 4
    assert [find_calculation(s)[1] for s in right] == [True] * 4
    # A rate against a rate is no window: judged, not a unit error ("Cannot convert from 1/second to second").
    assert find_calculation("dispatch rate of one worker | 200/s (assumed) | 9,859/s → 1 short-pool process")


def test_a_result_that_opens_the_next_expression_is_checked_too():
    # "A ≈ B × C ≈ D": B, not only D, is a result; here B is 10× too big and D follows from it.
    assert find_calculation("History: 1,200/s × 86,400 s ≈ 1 billion rows/day × 300 B ≈ 300 GB/day.")[1] is False
    assert find_calculation("History: 1,200/s × 86,400 s ≈ 104M rows/day × 300 B ≈ 31 GB/day.")[1] is True
    # An input that follows a result marker is still an input, not a result to check.
    assert find_calculation("10M jobs/day ≈ 116/s, so at 2 s each × 116/s ≈ 232 running.")[1] is True


def test_a_derivation_built_on_a_figure_an_earlier_step_got_wrong_does_not_check_out():
    wrong = parse(_section(2, "Peak: 10M/day ≈ 1,160/s.\n\nRunning: 1,160/s × 2 s ≈ 2,320 at once.\n\n"
                              "Workers: 10M jobs × 1 KB = 10 GB."))
    right = parse(_section(2, "Peak: 10M/day ≈ 116/s.\n\nRunning: 116/s × 2 s ≈ 232 at once.\n\n"
                              "Workers: 10M jobs × 1 KB = 10 GB."))
    found = calculations(wrong)
    assert [c.checks_out for c in found] == [False, False, True]
    assert "built on 1,160/s" in found[1].correction
    assert [c.checks_out for c in calculations(right)] == [True, True, True]


def test_conversions_are_checked_however_they_are_phrased():
    assert find_calculation("10 million runs per day works out to about 1,150 per second.")[1] is False
    assert find_calculation("10 million runs per day works out to about 116 per second.")[1] is True
    assert find_calculation("It amounts to 10M × 1 KB = 10 TB.")[1] is False
    # Dividing a daily rate by the seconds in a day is the conversion itself, not a rate divided by a time.
    assert find_calculation("10M per day / 86,400 s = 116/s.")[1] is True
    assert find_calculation("10M per day / 86,400 s = 1,157/s.")[1] is False


def test_a_rate_of_messages_times_their_size_is_a_byte_rate():
    """"830 msg/s × 1 KB ≈ 0.8 MB/s" is right: "msg" is messages (not "ms" and a "g"), and a rate times a size is a
    byte rate. Counted things abbreviated as practitioners write them are rates of those things."""
    assert find_calculation("Kafka: 830 msg/s × 1 KB ≈ 0.8 MB/s.")[1] is True
    assert find_calculation("Kafka: 830 msg/s × 1 KB ≈ 8 MB/s.")[1] is False
    assert find_calculation("Peak: 8,300 exec/s × 2 KB ≈ 16.6 MB/s of payloads.")[1] is True
    # a unit abbreviation is a unit only as a word: 500 users are not 500 microseconds
    assert [q.noun for q in quantities("We expect 500 users and 40 msgs per run.")] == ["user", "msg"]


def test_a_rate_kept_for_a_retention_window_is_an_amount():
    """"12.5 GB/day, so ~375 GB for 30 days", or "TTL at 30 days ≈ 360 GB" with the 12 GB/day stated before: a byte
    rate over its retention window is what is stored, and a wrong total shows the right one."""
    assert find_calculation("Run history: 25M runs/day × 500 B ≈ 12.5 GB/day, so ~375 GB for 30 days.")[1] is True
    wrong = find_calculation("Run history: 25M runs/day × 500 B ≈ 12.5 GB/day, so ~3.75 TB for 30 days.")
    assert wrong[1] is False and "375 GB" in wrong[2], wrong
    doc = parse(_section(2, "History: 30M runs/day × 400 B ≈ 12 GB/day.\n\nTTL at 30 days ≈ 360 GB.\n\n"
                            "Kept for 14 days ≈ 1.7 TB."))
    assert [c.checks_out for c in calculations(doc)] == [True, True, False]


def test_a_percentage_is_a_share():
    """"20% × 830/s ≈ 166/s" is right and "≈ 16,600/s" wrong: a percentage is a hundredth of its number."""
    assert find_calculation("Long jobs: 20% × 830/s ≈ 166/s.")[1] is True
    assert find_calculation("Long jobs: 20% × 830/s ≈ 16,600/s.")[1] is False
    assert find_calculation("Concurrent long runs: 0.2% × 830/s = 1.7/s, each for 1 h.")[1] is True


def test_plain_words_for_a_rate_and_for_running_at_once_count_as_those_dimensions():
    doc = parse(_section(2, "50,000 runs a minute is about 830 a second.\n\n"
                            "At 20 s each, 830 a second × 20 s ≈ 16,600 jobs at the same time.\n\n"
                            "A job's description is 1 KB, so 10 million jobs is 10 GB."))
    assert {"throughput", "concurrency", "storage"} <= set().union(*(c.dimensions for c in calculations(doc)))


def test_a_backlogs_drain_time_is_checked():
    assert find_calculation("Catch-up is admitted at 500/s, so 40,000 late runs clear in 8 seconds.")[1] is False
    assert find_calculation("Catch-up is admitted at 500/s, so 40,000 late runs clear in 80 seconds.")[1] is True
    assert find_calculation("40,000 late runs released at 500 a second with jitter drain in about 80 s.")[1] is True


def test_a_result_the_clause_says_a_quantity_reaches_is_checked():
    # "so one queue tops out at N": the subject and a verb of reaching stand between the marker and the result.
    batch = "A claim transaction takes ~10 ms and grabs 100 rows, so one queue tops out at {}."
    assert find_calculation(batch.format("1,000 claims/s"))[1] is False
    assert find_calculation(batch.format("10,000 claims/s"))[1] is True
    assert find_calculation("At 830/s and 2 KB per run, so the history table grows to 14 GB per day.")[1] is False
    assert find_calculation("At 830/s and 2 KB per run, so the history table grows to 140 GB per day.")[1] is True


def test_a_rate_left_implicit_is_excused_only_when_the_document_states_it():
    stated = parse(_section(2, "Executions: 72M runs/day.\n\nHistory: 72M × 300 B ≈ 21.6 GB/day."))
    unstated = parse(_section(2, "Executions: 72M runs in all.\n\nHistory: 72M × 300 B ≈ 21.6 GB/day."))
    assert [c.checks_out for c in calculations(stated)] == [True]
    assert [c.checks_out for c in calculations(unstated)] == [False]


def test_a_limit_resting_on_mostly_wrong_arithmetic_is_no_estimate():
    limit = _section(8, "The database breaks first at about 2,000 claims/s because of lock contention, so we "
                        "partition it.")
    right = _section(2, "Peak: 50k/min ≈ 833/s.\n\nStorage: 10M × 1 KB = 10 GB.\n\nRunning: 833/s × 20 s ≈ 16,700.")
    wrong = _section(2, "Peak: 50k/min ≈ 8,300/s.\n\nStorage: 10M × 1 KB = 10 TB.\n\nRunning: 833/s × 20 s ≈ 1,670.")
    assert _check(right + limit, "storage_limits") == 4
    assert _check(wrong + limit, "storage_limits") == 2


def test_a_growth_factor_is_not_an_estimate_of_the_stores_limit():
    vague = _section(8, "At 10x the database breaks first because of lock contention, so we partition it.")
    numbered = _section(8, "The database breaks first at about 2,000 jobs/s because of lock contention, "
                           "so we partition it.")
    assert _check(vague, "storage_limits") < _check(numbered, "storage_limits") == 4


# -- failures -----------------------------------------------------------------------------------------

def test_it_retries_is_not_a_failure_analysis():
    text = _section(7, "- Worker crashes: it retries.\n- Scheduler crashes: it restarts and retries.\n"
                       "- Database down: retry with backoff.")
    assert all(len(item.legs) <= 1 for item in failure_items(parse(text)))
    assert _check(text, "failure_triads") == 0


def test_naming_the_legs_is_not_having_them():
    text = _section(7, "- Worker crash: Kubernetes handles detection, containment and recovery for us.\n"
                       "- Scheduler crash: Detection: yes. Containment: yes. Recovery: yes.\n"
                       "- Database fails: detected, contained and recovered by Kafka, which holds the leases.")
    assert [len(item.legs) for item in failure_items(parse(text))] == [0, 0, 0]


COMPLETE_FAILURE = ("Detection: the reaper sees the lease expire 30 s after the last heartbeat. "
                    "Containment: the attempt's fencing token is retired, so its writes are rejected. "
                    "Recovery: the occurrence returns to ready and another worker claims it.")


def test_three_legs_in_any_layout():
    headings = _section(7, f"### Worker crashes\n\n{COMPLETE_FAILURE}")
    bold_and_bullets = _section(7, "**Worker crashes**\n\n" + "\n".join(
        f"- {leg}." for leg in COMPLETE_FAILURE.rstrip(".").split(". ")))
    table = _section(7, "| Failure | Detection | Containment | Recovery |\n|---|---|---|---|\n"
                        "| Worker crashes | lease expires after 30 s | fencing token retired, writes rejected "
                        "| occurrence returns to ready |")
    prose = _section(7, "**Worker crashes.** The reaper notices the expired lease, the stale fencing token is "
                        "rejected by the store, and the occurrence is re-dispatched to another worker.")
    # The layout check's "table" rewrite of bold_and_bullets: the legs in a one-column table under the lead.
    bold_and_one_column_table = _section(7, "**Worker crashes**\n\n| Item |\n|---|\n" + "\n".join(
        f"| {leg}. |" for leg in COMPLETE_FAILURE.rstrip(".").split(". ")))
    for text in (headings, bold_and_bullets, table, prose, bold_and_one_column_table):
        items = failure_items(parse(text))
        assert len(items) == 1 and items[0].complete, text


@pytest.mark.parametrize("recovery", ["attempt 2 runs elsewhere", "attempt 2 finishes normally",
                                      # the run done over, in plain words
                                      "the job runs again on another worker", "the run starts again after a delay"])
def test_the_numbered_next_attempt_running_is_the_recovery(recovery: str):
    text = _section(7, f"- Worker cut off mid-run: the reaper notices its lease expire by the database clock; its "
                       f"writes carry the old token and are refused; {recovery}.")
    items = failure_items(parse(text))
    assert len(items) == 1 and items[0].complete, [item.legs for item in items]


@pytest.mark.parametrize("labels", [("Noticed", "Kept small", "Back to normal"),
                                    ("Found", "Kept from spreading", "Back to normal"),
                                    ("Seen", "Contained", "Back"), ("seen", "held", "fixed")])
def test_plain_labels_name_the_legs(labels: tuple[str, str, str]):
    """The legs labelled inline as plain write-ups label them, as a table headed so already reads them."""
    noticed, kept, back = labels
    text = _section(7, f"- A worker machine dies. {noticed}: its hold is not renewed for 30 s by the database clock. "
                       f"{kept}: only that machine's runs are affected. {back}: the runs are handed to other machines "
                       f"within a minute.")
    items = failure_items(parse(text))
    assert len(items) == 1 and items[0].complete, [item.legs for item in items]


def test_terse_labels_on_one_line_name_the_legs():
    """A failure with its three legs in one line, labelled tersely: one label read makes the line read by its labels,
    so the terse set is read whole (with only "seen" known, "held" and "fixed" were lost)."""
    text = _section(7, "- Worker dies — seen: lease expires in 30 s; held: its attempt number is stale, so its late "
                       "writes are refused; fixed: re-queued, runs again within ~35 s.")
    items = failure_items(parse(text))
    assert len(items) == 1 and items[0].complete, [item.legs for item in items]


@pytest.mark.parametrize("bullet", ["", "- "])
def test_one_leg_per_line_with_the_failure_named_on_each_is_one_failure(bullet: str):
    """"Worker crash, detection: ..." then "Worker crash, containment: ...": the legs of one failure, one per line, its
    name said again on each (or shortened), are that failure's legs, as they are under one bullet."""
    lines = ["Worker crash, detection: the reaper sees its lease expire 30 s after the last renewal.",
             "Worker crash, containment: only that worker's runs are affected; its tenant slot is released.",
             "Worker crash, recovery: the run goes back to ready and another worker claims it.",
             "Database primary failure (10 min) — detected: the health check fails for 10 s.",
             "Database primary failure — contained: claims fail while it is down, so nothing is half written.",
             "Database primary failure — recovered: the standby is promoted and the workers reconnect to it."]
    items = failure_items(parse(_section(7, "\n".join(bullet + line for line in lines))))
    assert [item.complete for item in items] == [True, True], [(item.title, item.legs) for item in items]
    # different failures, one leg each, stay apart
    scattered = [lines[0], "Scheduler crash, containment: its transaction rolls back and nothing is half written.",
                 "Store failure, recovery: the standby is promoted and the workers reconnect to it."]
    items = failure_items(parse(_section(7, "\n".join(bullet + line for line in scattered))))
    assert [len(item.legs) for item in items] == [1, 1, 1], [(item.title, item.legs) for item in items]


def _assert_each_failure_keeps_its_legs(failures: list[list[str]]) -> None:
    """Each failure's lines, one per line or a paragraph each, read as one complete failure."""
    for layout in ("\n".join, "\n\n".join):
        text = _section(7, "\n\n".join(layout(lines) for lines in failures))
        items = failure_items(parse(text))
        assert [item.complete for item in items] == [True] * len(failures), [(i.title, i.legs) for i in items]


def test_leg_lines_under_a_failure_named_on_its_own_line_are_its_legs():
    """"Worker dies." on a line, then "Detected: ...", "Contained: ...", "Recovered: ..." on the lines under it, in
    paragraphs or one per line without bullets: the labelled lines are that failure's legs, as they are under a bullet
    (each labelled line was read as a failure of its own)."""
    failures = [["Worker dies.", "Detected: heartbeats stop and its lease passes by database time, within 45 s.",
                 "Contained: only runs on that worker are affected; its slots are removed from the pool.",
                 "Recovered: runs go back to pending and are dispatched again with the attempt number plus one."],
                ["Scheduler node dies.", "Detected: its shard lease rows stop being renewed, expiry after 10 s.",
                 "Contained: only its shards pause; the other nodes keep firing theirs.",
                 "Recovered: surviving nodes take the shards over and fire anything due from next_fire_at."]]
    _assert_each_failure_keeps_its_legs(failures)
    # a failure line with no legs under it stays a failure of its own, not another's leg
    items = failure_items(parse(_section(7, "\n\n".join(["\n".join(failures[0]), "Store failure: nothing planned."]))))
    assert len(items) == 2


def test_plain_labelled_lines_under_a_failure_named_on_its_own_line_are_its_legs():
    """The same layout with the legs' plain labels ("Noticed:", "Kept small:", "Back to normal:"), which the failure
    reader knows inline: each labelled line goes on the failure above it (each was read as a failure of its own)."""
    failures = [["Worker process dies mid-run.", "Noticed: its hold runs out by the database clock within 30 s.",
                 "Kept small: a dead process writes nothing; only its own runs wait.",
                 "Back to normal: the run is handed out again with the next try number."],
                ["One planner dies.", "Noticed: an alert fires when a job's bookmark falls 60 s behind.",
                 "Kept small: its open transaction rolls back, so nothing half-planned is visible.",
                 "Back to normal: the other planners pick its jobs up on their next loop."]]
    _assert_each_failure_keeps_its_legs(failures)
    # a line that is no label ("Found" without its colon) stays a failure of its own
    items = failure_items(parse(_section(7, "\n".join([*failures[0], "Found jobs pile up after an outage."]))))
    assert len(items) == 2


@pytest.mark.parametrize("label", ["Damage stopped", "Damage limited", "Damage contained"])
def test_the_damage_stopped_as_a_label_is_the_containment_leg(label: str):
    """"Damage stopped:" on the line under a failure named on its own line is its containment, as a column headed
    "What stops the damage" already is (h22-01: each such line was read as a failure of its own, 0 of 5 complete)."""
    failures = [["Worker process dies mid-run.", "Noticed: its hold runs out by the database clock within 30 s.",
                 f"{label}: a dead process writes nothing; the sweeper's update is conditional on the old try.",
                 "Back to normal: the run is handed out again with the next try number."],
                ["One planner dies.", "Noticed: an alert fires when a job's bookmark falls 60 s behind.",
                 f"{label}: its open transaction rolls back, so nothing half-planned is visible.",
                 "Back to normal: the other planners pick its jobs up on their next loop."]]
    _assert_each_failure_keeps_its_legs(failures)
    # the words without their colon are no label: the line stays a failure of its own
    items = failure_items(parse(_section(7, "\n".join([*failures[0], "Damage stopped spreading after the outage."]))))
    assert len(items) == 2


def test_a_turn_number_is_a_fencing_number_for_a_cut_off_workers_containment():
    """A partitioned worker's containment needs a fencing number somewhere in the design; plain write-ups call it a
    turn number as others call it a ticket or generation number."""
    partition = _section(7, "- A worker is cut off while its job keeps running. Noticed: its hold runs out after 30 s "
                            "by the database clock. Kept small: its late writes are refused. Back to normal: the run "
                            "is handed to another worker.")
    turn = _section(4, "Runs: run key, status, holder, turn number (goes up by one at each hand-out).")
    assert not failure_items(parse(partition))[0].complete
    assert failure_items(parse(turn + partition))[0].complete


def test_a_try_number_the_store_compares_is_a_fencing_number():
    """Plain write-ups call the attempt number a try number ("try_no"): compared for order where the writes land, it
    fences as an attempt number does. A count of tries allowed is no such number."""
    try_number = _section(4, "Every write the handler makes carries (run_id, try_no); the customer's table keeps the "
                             "highest try number seen per run and refuses a lower try number.")
    limit = _section(4, "Each job has max tries of 5; after the last try the run is marked dead and its owner is told.")
    assert has_token(parse(try_number)) and not has_token(parse(limit))


def test_an_id_minted_anew_at_each_claim_and_matched_on_write_is_a_fencing_token():
    """"Every claim gets a fresh lease_id; Complete is an UPDATE ... WHERE lease_id = ?": the stale holder's id no
    longer matches the row, as SQS's receipt handle does. An id given once to the job is no such token."""
    fresh = _section(4, "Every claim writes a fresh lease_id to the run row; heartbeats and Complete are UPDATE ... "
                        "WHERE run_id = ? AND lease_id = ?, so a stale worker's write is rejected.")
    once = _section(4, "Every job gets a job_id when it is created; Complete is UPDATE ... WHERE job_id = ?.")
    assert token_checked(parse(fresh)) and not has_token(parse(once))


def test_a_number_that_goes_up_every_time_the_run_is_handed_out_is_a_fencing_number():
    """The fencing token's textbook definition ("a number that increases every time the lock is granted") in plain
    words; a tally that grows is not one."""
    counter = _section(4, "Each run row records which worker holds it, until when the hold is valid, and a counter "
                          "that goes up every time the run is handed out.")
    tally = _section(4, "Each run row records which worker holds it, until when the hold is valid, and how many "
                        "times it failed; the retry count is incremented on each failure.")
    assert has_token(parse(counter)) and not has_token(parse(tally))


def test_legs_must_be_in_the_same_failure():
    scattered = _section(7, "- Worker crash: the reaper notices the expired lease after 30 seconds.\n"
                            "- Scheduler crash: its transaction rolls back and the unique key rejects duplicates.\n"
                            "- Database failure: a replica is promoted and everyone reconnects to it.")
    assert not any(item.complete for item in failure_items(parse(scattered)))


# -- rejected alternatives ----------------------------------------------------------------------------

def test_a_rejection_needs_a_reason_and_a_list_of_names_earns_little():
    names = parse(_section(9, "- Kafka\n- RabbitMQ\n- Redis\n- Cassandra\n- Airflow"))
    reasoned = parse(_section(9, "- Kafka as the queue: rejected because a delayed job has no place in a log, "
                                 "so we would still need a store of future fire times."))
    assert rejections(names).fraction <= 2 / 15
    assert rejections(reasoned).fraction == pytest.approx(1 / 3, abs=1e-3)


# -- prose, altitude, gaming --------------------------------------------------------------------------

def test_sentences_versus_lists_of_names():
    assert is_prose("The reaper sees the lease expire and returns the occurrence to ready.")
    assert not is_prose("fencing tokens, leases, heartbeats, idempotency keys, leader election")
    assert is_name_drop("We use Kafka for the queue, Redis for locks, ZooKeeper for leader election and Cassandra.")
    assert not is_name_drop("We store jobs in Postgres and claim them with SKIP LOCKED.")


KEYWORDS = ("fencing token, lease, heartbeat, at-least-once, exactly-once, idempotency key, unique (job_id, fire_at), "
            "leader election, misfire policy, per-tenant cap, fair queuing, separate pools, SKIP LOCKED, clock skew, "
            "monotonic clock, execution records, detection, containment, recovery, Kafka, rejected, 833/s")


def test_a_keyword_stuffed_template_earns_little():
    stuffed = "# Design\n\n" + "".join(
        _section(n, "\n".join(f"- {k.strip()}" for k in KEYWORDS.split(","))) for n in range(1, 10))
    assert score_text(stuffed).total < 25


def test_the_empty_template_scores_nothing():
    design = load_design_rubric()
    assert score_text(render_attempt_template(design, 45, datetime(2024, 1, 1))).total == 0


def test_pasting_the_prompt_and_the_templates_hints_earns_little():
    template = render_attempt_template(load_design_rubric(), 45, datetime(2024, 1, 1))
    assert score_text(template.replace("<!--", "").replace("-->", "")).total < 20


def test_a_question_is_not_an_answer():
    asked = _section(1, "Delivery semantics: at-least-once or at-most-once? Do we need a fencing token on writes?")
    answered = _section(1, "We deliver at-least-once, and every write carries a fencing token the store checks.")
    assert _check(asked, "delivery_semantics") == 0 and _check(asked, "lease_fencing") == 0
    assert _check(answered, "delivery_semantics") > 0 and _check(answered, "lease_fencing") > 0


def test_class_hierarchies_are_too_low():
    code = _section(4, "```python\nclass Job(BaseModel):\n    schedule: str\n\nclass CronJob(Job):\n    pass\n```")
    assert _check(code, "not_too_low") == 0


def test_some_code_level_detail_earns_the_partial_with_a_quote_for_it():
    text = _section(4, "The CronJob subclass inherits from Job and overrides next_fire().")
    check = next(k for c in score_text(text).criteria for k in c.checks if k.id == "not_too_low")
    assert 0 < check.points < check.max_points
    assert check.evidence and check.missing  # the points are explained, and so is what kept the rest


def test_a_deep_dive_on_the_console_with_an_aside_on_dispatch_is_about_the_ui():
    console = ("- **Jobs page:** a table of jobs with a status badge, filters by label and a search box.\n"
               "- **Job detail page:** a cron builder, a chart of the last runs and Run now and Pause buttons.\n"
               "- **Run detail page:** the attempts on a timeline, the live log and a Retry button.\n\n")
    aside = "If a worker dies, the queue makes the message visible again and another worker picks it up."
    dispatch = ("Workers claim a run with a conditional update and renew a 30 s lease; when a worker dies its "
                "lease runs out, and a run whose lease ran out is claimed again with a higher fencing token. "
                "The sink refuses a write whose token is lower than the highest it has seen.")
    assert _check(_section(6, console + aside), "time_on_hard_parts") == 0
    assert _check(_section(6, console + dispatch), "time_on_hard_parts") > 0


def test_a_deep_dive_that_names_the_hard_parts_without_their_roles_is_no_time_on_them():
    named = ("Exactly-once dispatch is the hardest part of this system, and leader election and fencing matter a "
             "lot. Leases and heartbeats are important too, and so is avoiding split brain at every level.")
    explained = ("A worker's claim lasts 30 s by the database clock and is renewed every 10 s; a claim nobody "
                 "renews expires and the run is claimed again with a higher fencing token; the store rejects a "
                 "write carrying an older one.")
    padding = " ".join(["The API and the data model are simple and follow common conventions."] * 3)
    # the words half only, not the deep dive's (a tenth less: leases named and no fencing number checked)
    assert 0.9 <= _check(_section(6, named) + _section(7, padding * 3), "time_on_hard_parts") <= 1
    assert _check(_section(6, explained) + _section(7, padding * 3), "time_on_hard_parts") == 2


def test_an_idempotency_key_on_the_create_call_is_not_the_limit_of_the_guarantee():
    api = _section(1, "Runs are at-least-once. POST /v1/jobs takes an Idempotency-Key header so a client's retry "
                      "doesn't create two jobs.")
    runs = _section(1, "Runs are at-least-once, so a run can happen twice: each job must be idempotent on its run id.")
    assert _check(api, "delivery_semantics") == 2 and _check(runs, "delivery_semantics") == 4


def test_a_unique_constraint_counts_for_double_fire_only_on_the_fire_time():
    name_only = _section(4, "jobs(id, org_id, name, next_run_at, deleted_at); unique (org_id, name) for the list page.")
    fire_time = _section(4, "runs(id, job_id, fire_at, status); unique (job_id, fire_at), so a second insert fails.")
    assert _check(name_only, "replica_double_fire") == 0
    assert _check(fire_time, "replica_double_fire") > 0
    # the fire time's column as many write-ups name it
    scheduled_for = _section(4, "executions keyed by (job_id, scheduled_for), so a second insert of an occurrence "
                                "fails.")
    assert _check(scheduled_for, "replica_double_fire") > 0


def test_parts_with_exactly_one_owner_each_are_partitioned_ownership():
    """Partitioned ownership, whatever the parts are called ("pieces", "groups"): each has exactly one owner at a
    time, so one due time is fired by one scheduler copy. Owners named without saying there is one are not a guard."""
    owned = _section(6, "The due times are split into 512 pieces; each piece has exactly one owner at a time among "
                        "the three scheduler copies, and ownership moves through the store.")
    named = _section(6, "The due times are split into 512 pieces, and the three scheduler copies read them.")
    assert _check(owned, "replica_double_fire") > 0 and _check(named, "replica_double_fire") == 0


def test_a_row_for_each_planned_run_is_an_execution_record():
    """The rubric's partial mark for "did it run?" is execution records, whatever the row is called."""
    for record in ("There is a runs table with one row for each planned run, with its state and outcome.",
                   "A runs table holds a row per scheduled run: its state, its worker and the outcome."):
        assert _check(_section(4, record), "proof_of_execution") > 0, record


def test_the_promise_said_plainly_is_what_at_least_once_promises():
    records = "Each attempt gets its own row in the attempts table, with its state and outcome."
    promise = " Our promise is that every due run happens at least once, or it is marked dead with a reason."
    assert _check(_section(6, records + promise), "proof_of_execution") > _check(_section(6, records),
                                                                               "proof_of_execution")


def test_plain_words_for_missed_runs_and_for_the_stores_limit():
    missed = _section(7, "If the database is down, jobs that should have run during the outage are picked up when "
                         "it is back, as each job's own setting says, paced at 100 per second.")
    assert _check(missed, "catch_up") == 3
    limit = _section(8, "At about 8,300 due jobs per second the index on next_run_at becomes a hot spot and lock "
                        "contention climbs, so we would partition the jobs table by job id.")
    assert _check(limit, "storage_limits") == 4


def test_items_split_by_bullets_when_there_are_no_headings():
    doc = parse(_section(9, "Preamble that is not an item.\n\n- First\n  continued\n- Second"))
    assert [item.title for item in split_items(doc.sections[9])] == ["First continued", "Second"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.sampled_from(["## 7. Failure and recovery", "## 2. Scale", "- ", "| a | b |", "|---|---|", "```", "",
                     "**Worker dies.** Detection: the lease expires.", "50k/min ≈ 833/s", "<!--", "-->", "### x"]),
    st.text(max_size=40)), max_size=30))
def test_any_text_scores_between_0_and_100_with_real_line_numbers(parts: list[str]):
    text = "\n".join(parts)
    report = score_text(text)
    assert 0 <= report.total <= 100
    line_count = len(text.splitlines())
    for criterion in report.criteria:
        assert 0 <= criterion.points <= criterion.max_points
        for check in criterion.checks:
            assert all(0 <= e.line <= line_count for e in check.evidence)
