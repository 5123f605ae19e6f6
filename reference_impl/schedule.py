"""Fire times: cron expressions read in an IANA time zone, with DST made explicit per job.

Cron is evaluated on *local wall-clock time* (croniter over naive datetimes), then each wall time is
mapped to instants. Two days a year that mapping is not one-to-one, and the job says what it wants:

``dst_gap`` -- the wall time does not exist (spring forward, e.g. 02:30 in Europe/Berlin on the last
Sunday of March):

* ``shift`` (default): run at the same offset after the gap -- 02:30 becomes 03:30 local. If that
  lands on a fire time the cron has anyway, the two are one occurrence (the unique key dedups them).
* ``skip``: do not run; the occurrence is still recorded, as ``skipped`` with reason ``dst_gap:skip``.

``dst_overlap`` -- the wall time happens twice (fall back, e.g. 02:30 on the last Sunday of October):

* ``first`` (default): run once, at the first (summer-time) instant.
* ``both``: run at both instants.

All results are UTC instants; nothing here reads a clock -- callers pass the database's ``now``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

# How far before the cursor to start scanning local wall times, so that an ambiguous hour whose
# first instant lies before the cursor still yields its second instant after it.
_DST_SCAN_MARGIN = timedelta(hours=3)


@dataclass(frozen=True)
class Schedule:
    kind: str  # 'once' | 'cron'
    run_at: datetime | None = None
    cron: str | None = None
    timezone: str = "UTC"
    dst_gap: str = "shift"
    dst_overlap: str = "first"


@dataclass(frozen=True)
class FireTime:
    at: datetime  # UTC instant
    skip_reason: str | None = None  # set when the schedule itself says "recorded but not run"


def _is_real(local: datetime, zone: ZoneInfo) -> bool:
    """A naive wall time exists in ``zone`` when it survives a round trip through UTC."""
    aware = local.replace(tzinfo=zone)
    return aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == local


def instants_for_wall_time(local: datetime, schedule: Schedule) -> list[FireTime]:
    """Map one naive local wall time to the fire instants the job's DST policy asks for."""
    zone = ZoneInfo(schedule.timezone)
    early = local.replace(tzinfo=zone, fold=0)
    late = local.replace(tzinfo=zone, fold=1)
    if not _is_real(local, zone):
        # In a gap, fold=0 reads the wall time with the pre-transition offset: that is the instant
        # "the same distance after the gap started" -- 02:30 becomes 03:30 on a one-hour jump.
        shifted = early.astimezone(UTC)
        if schedule.dst_gap == "skip":
            return [FireTime(shifted, "dst_gap:skip")]
        return [FireTime(shifted)]
    if early.utcoffset() != late.utcoffset():  # ambiguous: this wall time happens twice
        first, second = early.astimezone(UTC), late.astimezone(UTC)
        if schedule.dst_overlap == "both":
            return [FireTime(first), FireTime(second)]
        return [FireTime(first)]
    return [FireTime(early.astimezone(UTC))]


def _dst_margin(zone: ZoneInfo, at: datetime) -> timedelta:
    """Instants of consecutive wall times come out of order only near a DST transition; scan a margin
    around ``at`` only when one is near (a per-second cron in UTC must not pay for it)."""
    before = (at - _DST_SCAN_MARGIN).astimezone(zone).utcoffset()
    after = (at + _DST_SCAN_MARGIN).astimezone(zone).utcoffset()
    return _DST_SCAN_MARGIN if before != after else timedelta(0)


def _cron_fire_times(schedule: Schedule, after: datetime, until: datetime | None,
                     limit: int = 1) -> list[FireTime]:
    """Cron fire times in (after, until], ascending, at most ``limit``; with until=None, just the first.

    Wall times are walked in order, but near a DST change their instants are not (an ambiguous hour
    yields 01:00 summer, 01:00 winter, 01:15 summer ...), so there the scan runs a margin past the
    goal and sorts.
    """
    zone = ZoneInfo(schedule.timezone)
    walker = croniter(schedule.cron, (after - _dst_margin(zone, after)).astimezone(zone).replace(tzinfo=None))
    found: dict[datetime, FireTime] = {}
    goal = until
    while True:
        local = walker.get_next(datetime)
        for fire in instants_for_wall_time(local, schedule):
            if fire.at > after:
                found.setdefault(fire.at, fire)
        if found and (until is None or len(found) == limit) and (goal is None or goal is until):
            goal = min(found) if until is None else max(found)  # enough found: stop a margin past it
        if goal is not None:
            instant = local.replace(tzinfo=zone, fold=0).astimezone(UTC)
            if instant > goal + _dst_margin(zone, goal):
                break
    ordered = sorted(found.values(), key=lambda f: f.at)
    if until is None:
        return ordered[:1]
    return [f for f in ordered if f.at <= until][:limit]


def fire_times(schedule: Schedule, after: datetime, until: datetime, limit: int = 100_000) -> list[FireTime]:
    """Fire times in (after, until], ascending; the first ``limit`` of them (a long outage of a
    per-second cron must not be enumerated in one go)."""
    if schedule.kind == "once":
        run_at = schedule.run_at
        return [FireTime(run_at)] if run_at is not None and after < run_at <= until else []
    if until <= after:
        return []
    return _cron_fire_times(schedule, after, until, limit)


def next_fire_after(schedule: Schedule, after: datetime) -> datetime | None:
    """The first fire time strictly after ``after`` (None when a one-shot job has fired)."""
    if schedule.kind == "once":
        return schedule.run_at if schedule.run_at is not None and schedule.run_at > after else None
    return _cron_fire_times(schedule, after, None)[0].at


# Hashed fields, as Jenkins' ``H`` (and the SRE book's cron chapter): real schedules bunch at :00 and midnight,
# so ``H`` lets a field take a value hashed from the job's name -- stable, so the same job always fires at the
# same time, but different per job, so a fleet of "H 0 * * *" spreads over the hour instead of firing at once.
# ``H`` takes the field's whole range (day of month: 1-28, every month has those), ``H(a-b)`` a value in
# a..b, ``H/n`` every n starting at a hashed offset below n.
_FIELD_RANGES = ((("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 28), ("month", 1, 12),
                  ("day of week", 0, 6), ("second", 0, 59)))
_HASHED = re.compile(r"H(?:\((\d+)-(\d+)\))?(?:/(\d+))?")


def resolve_hashed(expression: str, seed: str) -> str:
    """The expression with every ``H`` field replaced by its value for ``seed`` (the job's name). Raises
    ValueError naming the field for a malformed or out-of-range ``H``."""
    fields = expression.split()
    resolved = []
    for index, text_ in enumerate(fields):
        if not text_.startswith("H") or index >= len(_FIELD_RANGES):
            resolved.append(text_)
            continue
        name, low, high = _FIELD_RANGES[index]
        match = _HASHED.fullmatch(text_)
        if match is None:
            raise ValueError(f"{name} field '{text_}': a hashed field is H, H(a-b) or H/n")
        a, b, step = match.groups()
        first, last = (int(a), int(b)) if a is not None else (low, high)
        if not low <= first <= last <= high:
            raise ValueError(f"{name} field '{text_}': the range must lie within {low}-{high}")
        digest = int.from_bytes(hashlib.sha256(f"{seed}|{index}".encode()).digest()[:8], "big")
        if step is not None:
            if not 1 <= int(step) <= last - first + 1:
                raise ValueError(f"{name} field '{text_}': the step must be 1 to {last - first + 1}")
            resolved.append(f"{first + digest % int(step)}-{last}/{step}")
        else:
            resolved.append(str(first + digest % (last - first + 1)))
    return " ".join(resolved)


def validate_cron(expression: str) -> None:
    """Raise ValueError with a readable message for an invalid cron expression."""
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise ValueError(
            f"expected 5 fields (minute hour day month weekday) or 6 (seconds last), got {len(fields)}"
        )
    if not croniter.is_valid(expression):
        raise ValueError(f"'{expression}' is not a valid cron expression")
    try:
        croniter(expression).get_next(datetime)
    except CroniterBadDateError:
        raise ValueError(f"'{expression}' never fires (e.g. 30 February)") from None
