"""Compaction settings as runs read them: one read per burst, this node's updates at once.

Time is a fake clock the test moves; a read in flight is held open by an event, not a sleep.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from behest.domain.compaction import CompactionConfig
from behest.runs.compaction_settings import CompactionSettings
from behest.store.base import Store

TENANT = "default"


class SharedStore:
    """The one stored configuration replicas share; counts reads, which wait for `open`."""

    def __init__(self) -> None:
        self.config = CompactionConfig()
        self.reads = 0
        self.reading = asyncio.Event()
        self.open = asyncio.Event()
        self.open.set()

    async def get_compaction_config(self, *, tenant: str) -> CompactionConfig:
        self.reads += 1
        self.reading.set()
        await self.open.wait()
        return self.config

    async def put_compaction_config(self, config: CompactionConfig, *, tenant: str) -> None:
        self.config = config


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def settings(store: SharedStore, ttl_s: float, clock: Clock) -> CompactionSettings:
    return CompactionSettings(cast(Store, cast(Any, store)), ttl_s=ttl_s, clock=clock)


async def test_runs_starting_together_share_one_read() -> None:
    store = SharedStore()
    cached = settings(store, ttl_s=60, clock=Clock())
    store.open.clear()
    # Tasks start in order: the first starts the read, the others find it in flight.
    runs = [asyncio.create_task(cached.get(TENANT)) for _ in range(100)]
    await store.reading.wait()
    assert store.reads == 1 and not any(run.done() for run in runs)

    store.open.set()

    assert await asyncio.gather(*runs) == [CompactionConfig()] * 100
    assert store.reads == 1


async def test_an_update_here_applies_at_once_and_another_replicas_after_the_ttl() -> None:
    store, clock = SharedStore(), Clock()
    here, there = settings(store, ttl_s=1.0, clock=clock), settings(store, ttl_s=1.0, clock=clock)
    assert (await here.get(TENANT)).keep_tokens == (await there.get(TENANT)).keep_tokens == 8_000
    await here.put(TENANT, CompactionConfig(keep_tokens=4_000))
    assert (await here.get(TENANT)).keep_tokens == 4_000
    clock.now += 0.5
    assert (await there.get(TENANT)).keep_tokens == 8_000  # read less than a TTL ago
    assert store.reads == 2
    clock.now += 0.5  # a TTL since there read
    assert (await there.get(TENANT)).keep_tokens == 4_000
    assert store.reads == 3


async def test_a_cancelled_reader_leaves_the_others_to_read() -> None:
    store = SharedStore()
    cached = settings(store, ttl_s=60, clock=Clock())
    store.open.clear()
    first = asyncio.create_task(cached.get(TENANT))
    others = [asyncio.create_task(cached.get(TENANT)) for _ in range(3)]
    await store.reading.wait()  # first is reading; the others wait for it
    assert store.reads == 1
    store.reading.clear()

    first.cancel()
    await store.reading.wait()  # one of the others reads again
    store.open.set()

    assert await asyncio.gather(*others) == [CompactionConfig()] * 3
    assert store.reads == 2
    with pytest.raises(asyncio.CancelledError):
        await first
