"""The worker's lease trust (lease.py): elapsed time on its own monotonic clock, never wall clocks."""

from reference_impl.lease import SAFETY_MARGIN_FRACTION, Lease


def test_trust_ends_before_the_database_could_expire_the_lease():
    lease = Lease(lease_seconds=10, sent_at=100.0)
    limit = 100.0 + 10 * (1 - SAFETY_MARGIN_FRACTION)
    assert lease.check(now=limit - 0.01)
    assert not lease.check(now=limit)


def test_an_acknowledged_heartbeat_extends_trust_from_when_it_was_sent():
    lease = Lease(lease_seconds=10, sent_at=100.0)
    lease.renewed(sent_at=105.0)
    assert lease.check(now=113.0)  # 105 + 9 > 113
    lease.renewed(sent_at=101.0)  # an older acknowledgement never moves trust backwards
    assert lease.trusted_until == 105.0 + 9.0


def test_once_distrusted_a_lease_is_never_trusted_again():
    lease = Lease(lease_seconds=10, sent_at=100.0)
    assert not lease.check(now=200.0)
    lease.renewed(sent_at=199.0)  # a late acknowledgement cannot resurrect it: the attempt may be reaped
    assert not lease.check(now=199.5)
