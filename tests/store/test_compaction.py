"""Compaction config and circuit breaker: single rows shared by every run (SEMANTICS §7).

On a shared database other tests change these rows too: each test sets what it asserts.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from behest.domain.compaction import CircuitBreakerState, CompactionConfig
from behest.store.sql.store import SqlStore
from tests.store.helpers import TENANT, trip_circuit_breaker


def _some_config(seed: int) -> CompactionConfig:
    """A configuration unlike the default, the same for the same seed."""
    pick = random.Random(seed)
    return CompactionConfig(
        auto=pick.choice([True, False]),
        prune=pick.choice([True, False]),
        buffer_tokens=pick.randrange(1, 999_999_999),
        keep_tokens=pick.randrange(1, 999_999_999),
        tail_turns=pick.randrange(1, 50),
        model=f"summary-model-{seed}",
        provider="local",
        circuit_breaker_threshold=pick.randrange(1, 10),
    )


async def test_put_compaction_config_then_get_returns_it(store: SqlStore) -> None:
    # Two in turn, so that what an earlier test left cannot pass for what this one put.
    for config in (_some_config(1), _some_config(2)):
        await store.put_compaction_config(config, tenant=TENANT)

        assert await store.get_compaction_config(tenant=TENANT) == config


async def test_put_compaction_config_replaces_the_previous_one(store: SqlStore) -> None:
    await store.put_compaction_config(_some_config(3), tenant=TENANT)
    latest = CompactionConfig(
        auto=False,
        prune=True,
        buffer_tokens=123,
        keep_tokens=45,
        tail_turns=6,
        model="",
        provider="",
        circuit_breaker_threshold=7,
    )

    await store.put_compaction_config(latest, tenant=TENANT)

    assert await store.get_compaction_config(tenant=TENANT) == latest


async def test_put_compaction_config_closes_an_open_circuit_breaker(store: SqlStore) -> None:
    await trip_circuit_breaker(store, failures=5)
    assert (await store.get_circuit_breaker(tenant=TENANT)).is_open(
        now=datetime.now(UTC), cooldown_s=3600
    )

    await store.put_compaction_config(_some_config(4), tenant=TENANT)

    breaker = await store.get_circuit_breaker(tenant=TENANT)
    assert breaker == CircuitBreakerState(consecutive_failures=0, opened_at=None)
    assert not breaker.is_open(now=datetime.now(UTC), cooldown_s=3600)


async def test_circuit_breaker_reads_back_failures_and_when_it_opened(store: SqlStore) -> None:
    opened_at = await trip_circuit_breaker(store, failures=4)

    breaker = await store.get_circuit_breaker(tenant=TENANT)

    assert breaker == CircuitBreakerState(consecutive_failures=4, opened_at=opened_at)
    assert breaker.is_open(now=datetime.now(UTC), cooldown_s=3600)


async def test_record_compaction_opens_at_the_threshold_and_a_success_closes_it(
    store: SqlStore,
) -> None:
    await store.put_compaction_config(_some_config(5), tenant=TENANT)  # a known, closed breaker
    now = datetime.now(UTC)
    first = await store.record_compaction(tenant=TENANT, succeeded=False, threshold=2, now=now)
    assert (first.consecutive_failures, first.opened_at) == (1, None)
    second = await store.record_compaction(tenant=TENANT, succeeded=False, threshold=2, now=now)
    assert second.consecutive_failures == 2
    assert second.is_open(now=now, cooldown_s=60)
    assert not second.is_open(now=now + timedelta(seconds=61), cooldown_s=60)
    assert await store.get_circuit_breaker(tenant=TENANT) == second
    closed = await store.record_compaction(tenant=TENANT, succeeded=True, threshold=2, now=now)
    assert closed == CircuitBreakerState(consecutive_failures=0, opened_at=None)
