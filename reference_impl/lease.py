"""The worker's side of a lease: when to stop trusting it.

The database decides leases (``lease_expires_at = now() + lease`` on ITS clock; only d2_reap compares it).
A worker cannot read that clock, and must never compare its wall clock with it -- wall clocks are skewed
and jump. What a worker does know, by its own monotonic clock, is when it *sent* its last heartbeat that
the database answered. The database set the expiry no earlier than that moment plus the lease, so:

    trusted_until = monotonic time the last acknowledged heartbeat (or the claim) was sent + lease - margin

is a lower bound on the real expiry whatever either wall clock says. Past it, the worker stops trusting the
attempt: it tells the handler to stop (``ctx.cancelled``) and expects its writes to be refused. Measured on
one node with one clock: elapsed time, never absolute timestamps compared across nodes.

A heartbeat the database *refused because it is down* (restarting, failing over: it answered, and said so) is
evidence too: while it is down nobody can reap, and once it is back the scheduler replicas reap nothing for a
grace of one heartbeat period (scheduler.py), by which time this worker's retried heartbeat has renewed the
lease. So such an answer moves the lower bound to ``sent_at + heartbeat period``: a handler survives an outage
of any length as long as the database keeps answering that it is down. A heartbeat that got no answer at all
(a partition looks like that) moves nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# Stop trusting a little before the lower bound: the handler needs time to notice and stop.
SAFETY_MARGIN_FRACTION = 0.1
# Per pool: a long job is up to hours of work, so a database failover (typically tens of seconds) must not
# expire its lease; a short job is cheap to run again, and a short lease finds a dead worker sooner.
POOL_LEASE_SECONDS = {"short": 30.0, "long": 120.0}
HEARTBEAT_SECONDS = 10.0  # at most: three heartbeats per lease when the lease is shorter than 30 s


def heartbeat_period(lease_seconds: float) -> float:
    return min(HEARTBEAT_SECONDS, lease_seconds / 3)


@dataclass
class Lease:
    lease_seconds: float
    sent_at: float = field(default_factory=time.monotonic)  # monotonic time of the claim request
    trusted: bool = True
    down_answer_at: float | None = None  # monotonic send time of the last heartbeat refused by a database that is down

    @property
    def trusted_until(self) -> float:
        renewed = self.sent_at + self.lease_seconds * (1 - SAFETY_MARGIN_FRACTION)
        if self.down_answer_at is None:
            return renewed
        return max(renewed, self.down_answer_at + heartbeat_period(self.lease_seconds) * (1 - SAFETY_MARGIN_FRACTION))

    def database_down(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` was answered: the database is down (the module docstring says why that
        keeps the lease)."""
        if self.trusted:
            self.down_answer_at = max(self.down_answer_at or sent_at, sent_at)

    def renewed(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` (monotonic) was acknowledged for this attempt."""
        if self.trusted:
            self.sent_at = max(self.sent_at, sent_at)

    def check(self, now: float | None = None) -> bool:
        """Still trusted at ``now`` (monotonic)? Once distrusted, never trusted again."""
        if self.trusted and (time.monotonic() if now is None else now) >= self.trusted_until:
            self.trusted = False
        return self.trusted
