"""The worker's side of a lease: when to stop trusting it.

The database decides leases (``lease_expires_at = now() + lease`` on ITS clock; only d2_reap compares it).
A worker cannot read that clock, and must never compare its wall clock with it -- wall clocks are skewed
and jump. What a worker does know, by its own monotonic clock, is when it *sent* its last heartbeat that
the database answered. The database set the expiry no earlier than that moment plus the lease, so:

    trusted_until = monotonic time the last acknowledged heartbeat (or the claim) was sent + lease - margin

is a lower bound on the real expiry whatever either wall clock says. Past it, the worker stops trusting the
attempt: it tells the handler to stop (``ctx.cancelled``) and expects its writes to be refused. Measured on
one node with one clock: elapsed time, never absolute timestamps compared across nodes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# Stop trusting a little before the lower bound: the handler needs time to notice and stop.
SAFETY_MARGIN_FRACTION = 0.1


@dataclass
class Lease:
    lease_seconds: float
    sent_at: float = field(default_factory=time.monotonic)  # monotonic time of the claim request
    trusted: bool = True

    @property
    def trusted_until(self) -> float:
        return self.sent_at + self.lease_seconds * (1 - SAFETY_MARGIN_FRACTION)

    def renewed(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` (monotonic) was acknowledged for this attempt."""
        if self.trusted:
            self.sent_at = max(self.sent_at, sent_at)

    def check(self, now: float | None = None) -> bool:
        """Still trusted at ``now`` (monotonic)? Once distrusted, never trusted again."""
        if self.trusted and (time.monotonic() if now is None else now) >= self.trusted_until:
            self.trusted = False
        return self.trusted
