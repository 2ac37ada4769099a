"""Compaction settings as runs read them: one read per burst, this node's updates at once."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from behest.domain.compaction import CompactionConfig
from behest.runs.compaction_settings import CompactionSettings
from behest.store.base import Store


class SharedStore:
    """The one stored configuration replicas share; counts reads."""

    def __init__(self) -> None:
        self.config = CompactionConfig()
        self.reads = 0

    async def get_compaction_config(self) -> CompactionConfig:
        self.reads += 1
        await asyncio.sleep(0.01)
        return self.config

    async def put_compaction_config(self, config: CompactionConfig) -> None:
        self.config = config


def settings(store: SharedStore, ttl_s: float) -> CompactionSettings:
    return CompactionSettings(cast(Store, cast(Any, store)), ttl_s=ttl_s)


async def test_runs_starting_together_share_one_read() -> None:
    store = SharedStore()
    cached = settings(store, ttl_s=60)
    found = await asyncio.gather(*(cached.get() for _ in range(100)))
    assert found == [CompactionConfig()] * 100
    assert store.reads == 1


async def test_an_update_here_applies_at_once_and_another_replicas_after_the_ttl() -> None:
    store = SharedStore()
    here, there = settings(store, ttl_s=0.2), settings(store, ttl_s=0.2)
    assert (await here.get()).keep_tokens == (await there.get()).keep_tokens == 8_000
    await here.put(CompactionConfig(keep_tokens=4_000))
    assert (await here.get()).keep_tokens == 4_000
    assert (await there.get()).keep_tokens == 8_000  # read less than a TTL ago
    await asyncio.sleep(0.25)
    assert (await there.get()).keep_tokens == 4_000


async def test_a_cancelled_reader_leaves_the_others_to_read() -> None:
    store = SharedStore()
    cached = settings(store, ttl_s=60)
    first = asyncio.create_task(cached.get())
    await asyncio.sleep(0)  # first is reading
    others = [asyncio.create_task(cached.get()) for _ in range(3)]
    await asyncio.sleep(0)
    first.cancel()
    assert await asyncio.gather(*others) == [CompactionConfig()] * 3
    assert store.reads == 2
