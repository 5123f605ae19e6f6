"""Cron in a time zone across DST, with the per-job dst_gap / dst_overlap policy (schedule.py)."""

from datetime import UTC, datetime

import pytest

from reference_impl.schedule import Schedule, fire_times, next_fire_after, validate_cron

NY = "America/New_York"  # 2026: spring forward Mar 8 02:00 -> 03:00; fall back Nov 1 02:00 -> 01:00


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def at(fires) -> list[str]:
    return [f.at.isoformat() for f in fires]


def test_0230_on_spring_forward_day_shifts_by_default():
    job = Schedule("cron", cron="30 2 * * *", timezone=NY)
    fires = fire_times(job, utc(2026, 3, 7, 12), utc(2026, 3, 9, 12))
    # Mar 7 02:30 EST = 07:30Z; Mar 8 02:30 does not exist -> 03:30 EDT = 07:30Z; Mar 9 02:30 EDT = 06:30Z
    assert at(fires) == ["2026-03-08T07:30:00+00:00", "2026-03-09T06:30:00+00:00"]
    assert all(f.skip_reason is None for f in fires)


def test_0230_on_spring_forward_day_can_skip_and_is_recorded():
    job = Schedule("cron", cron="30 2 * * *", timezone=NY, dst_gap="skip")
    fires = fire_times(job, utc(2026, 3, 7, 12), utc(2026, 3, 9, 12))
    assert [(f.at.isoformat(), f.skip_reason) for f in fires] == [
        ("2026-03-08T07:30:00+00:00", "dst_gap:skip"),  # still a row: skipped with its reason
        ("2026-03-09T06:30:00+00:00", None),
    ]


def test_0130_on_fall_back_day_runs_once_by_default():
    job = Schedule("cron", cron="30 1 * * *", timezone=NY)
    fires = fire_times(job, utc(2026, 10, 31, 12), utc(2026, 11, 2, 12))
    # Nov 1 01:30 happens at 05:30Z (EDT) and again at 06:30Z (EST): 'first' keeps 05:30Z
    assert at(fires) == ["2026-11-01T05:30:00+00:00", "2026-11-02T06:30:00+00:00"]


def test_0130_on_fall_back_day_can_run_at_both_instants():
    job = Schedule("cron", cron="30 1 * * *", timezone=NY, dst_overlap="both")
    fires = fire_times(job, utc(2026, 10, 31, 12), utc(2026, 11, 2, 12))
    assert at(fires) == ["2026-11-01T05:30:00+00:00", "2026-11-01T06:30:00+00:00", "2026-11-02T06:30:00+00:00"]


def test_both_instants_come_out_in_order_and_the_cursor_resumes_between_them():
    job = Schedule("cron", cron="*/20 1 * * *", timezone=NY, dst_overlap="both")
    fires = fire_times(job, utc(2026, 11, 1, 5, 10), utc(2026, 11, 1, 7))
    assert at(fires) == sorted(at(fires))
    assert len(fires) == 5  # 01:20 and 01:40 EDT, then 01:00, 01:20, 01:40 EST
    # resuming after the first instant of 01:20 finds the rest, in order, without repeats
    assert next_fire_after(job, fires[0].at) == fires[1].at


def test_one_shot_fires_once_inside_the_window_only():
    job = Schedule("once", run_at=utc(2026, 1, 1, 9))
    assert at(fire_times(job, utc(2026, 1, 1), utc(2026, 1, 2))) == ["2026-01-01T09:00:00+00:00"]
    assert fire_times(job, utc(2026, 1, 1, 9), utc(2026, 1, 2)) == []  # already materialised
    assert next_fire_after(job, utc(2026, 1, 1, 9)) is None


def test_enumeration_is_bounded():
    every_second = Schedule("cron", cron="* * * * * *")
    assert len(fire_times(every_second, utc(2026, 1, 1), utc(2026, 1, 2), limit=500)) == 500


@pytest.mark.parametrize("expression", ["61 * * * *", "* * *", "not a cron", "* * * * * * * *"])
def test_invalid_cron_is_rejected_with_a_reason(expression):
    with pytest.raises(ValueError):
        validate_cron(expression)


def test_a_hashed_field_is_stable_per_job_and_spreads_a_fleet():
    from reference_impl.schedule import resolve_hashed

    assert resolve_hashed("H 0 * * *", "nightly-report") == resolve_hashed("H 0 * * *", "nightly-report")
    minutes = {resolve_hashed("H 0 * * *", f"nightly-{i}").split()[0] for i in range(200)}
    assert len(minutes) > 40 and all(0 <= int(m) <= 59 for m in minutes)  # spread over the hour, not all at :00
    for i in range(50):
        minute, hour, day, _, weekday = resolve_hashed("H(10-19) H H * H", f"job-{i}").split()
        assert 10 <= int(minute) <= 19 and 0 <= int(hour) <= 23 and weekday in {str(d) for d in range(7)}
        start, step = resolve_hashed("H/15 * * * *", f"job-{i}").split()[0].split("/")
        assert int(start.split("-")[0]) < 15 and step == "15"
    assert resolve_hashed("0 9 * * THU", "x") == "0 9 * * THU"  # an H inside a name is not a hashed field
    validate_cron(resolve_hashed("H H(0-5) H * H", "any"))
