"""The GPU broker's tenant quotas (agentgate/dispatch/broker/_quota.py) through preemption: a
tenant never holds more GPUs than its quota allows, counting the leases it still holds for their
grace. (The broker's other rules are in tests/test_broker*.py.)"""

from __future__ import annotations


def test_a_tenant_preempting_its_own_lease_while_another_is_reclaimed_stays_within_its_quota() -> None:
    """R17 (left open there): a request nominated by preemption was granted as soon as its
    victims ended, without counting its tenant's other notified leases, still held for their
    grace: research (at most 12 GPUs) held its new gang and its reclaimed lease, 16, for the
    rest of that lease's 300 s grace. It now waits for them, and gets its GPUs when they end."""
    from agentgate.dispatch.broker import Broker, GangRequest, TenantQuota, synthetic_topology

    now = [0.0]
    quotas = [
        TenantQuota("research", nominal=8, cohort="lab", borrowing_limit=4),
        TenantQuota("prod", nominal=8, cohort="lab"),
    ]
    broker = Broker(synthetic_topology(4, 8), quotas, clock=lambda: now[0], ttl_s=600.0, grace_s=120.0)
    broker.submit(GangRequest("rB", "research", 8, priority=0, grace_s=300))
    broker.submit(GangRequest("rA", "research", 4, priority=1, grace_s=10))
    broker.submit(GangRequest("p1", "prod", 8))  # reclaims rB (300 s of grace)
    now[0] = 1.0
    broker.submit(GangRequest("rC", "research", 8, priority=2))  # preempts rA (10 s of grace)

    def research() -> int:
        return sum(len(lease.gpus) for lease in broker.leases() if lease.tenant == "research")

    for t in range(2, 330, 5):
        now[0] = float(t)
        broker.advance()
        assert research() <= 12, (t, sorted(lease.id for lease in broker.leases()))
    assert sorted(lease.id for lease in broker.leases()) == ["p1", "rC"] and broker.queue() == []
