"""The stored compaction settings as runs see them: per tenant, read at most once a second.

Every run reads them when it starts; a burst of new runs should not each pay a read. This
node's updates apply at once; another replica's within `TTL_S`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from behest.domain.compaction import CompactionConfig
from behest.store.base import Store

TTL_S = 1.0


@dataclass(slots=True)
class _Cached:
    value: CompactionConfig | None = None
    read_at: float = 0.0
    reading: asyncio.Future[None] | None = None


class CompactionSettings:
    """Each tenant's settings, read at most once per `ttl_s`; `clock` (seconds, monotonic)
    tells when a read is older than that."""

    def __init__(
        self, store: Store, *, ttl_s: float = TTL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._clock = clock
        self._tenants: dict[str, _Cached] = {}

    async def get(self, tenant: str) -> CompactionConfig:
        cached = self._tenants.setdefault(tenant, _Cached())
        while True:
            if cached.value is not None and self._clock() - cached.read_at < self._ttl_s:
                return cached.value
            if cached.reading is None:
                return await self._read(tenant, cached)
            # Another run is reading: wait for it (its outcome, not its exception), look again.
            await asyncio.wait([cached.reading])

    async def put(self, tenant: str, config: CompactionConfig) -> None:
        await self._store.put_compaction_config(config, tenant=tenant)
        cached = self._tenants.setdefault(tenant, _Cached())
        cached.value, cached.read_at = config, self._clock()

    async def _read(self, tenant: str, cached: _Cached) -> CompactionConfig:
        # Read in the caller's task (no task of its own to outlive the server).
        cached.reading = asyncio.get_running_loop().create_future()
        try:
            value = await self._store.get_compaction_config(tenant=tenant)
            cached.value, cached.read_at = value, self._clock()
            return value
        finally:
            reading, cached.reading = cached.reading, None
            reading.set_result(None)
