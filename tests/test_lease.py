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


def test_a_database_that_answers_it_is_down_keeps_the_lease_trusted_one_heartbeat_past_each_answer():
    lease = Lease(lease_seconds=30, sent_at=100.0)  # heartbeat period 10 s
    for answered_down_at in range(105, 200, 5):  # an outage far longer than the lease
        lease.database_down(sent_at=float(answered_down_at))
        assert lease.check(now=answered_down_at + 0.5)
    assert lease.trusted_until == 195.0 + 10 * (1 - SAFETY_MARGIN_FRACTION)
    assert not lease.check(now=195.0 + 9.0)  # the database went silent: no answer is no evidence


def test_a_down_answer_cannot_resurrect_a_distrusted_lease():
    lease = Lease(lease_seconds=30, sent_at=100.0)
    assert not lease.check(now=130.0)
    lease.database_down(sent_at=131.0)
    assert not lease.check(now=131.5)
