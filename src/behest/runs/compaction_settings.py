"""The stored compaction settings as runs see them: read at most once a second.

Every run reads them when it starts; a burst of new runs should not each pay a read. This
node's updates apply at once; another replica's within `TTL_S`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from behest.domain.compaction import CompactionConfig
from behest.store.base import Store

TTL_S = 1.0


class CompactionSettings:
    """`clock` (seconds, monotonic) tells when a read is older than `ttl_s`."""

    def __init__(
        self, store: Store, *, ttl_s: float = TTL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._clock = clock
        self._value: CompactionConfig | None = None
        self._read_at = 0.0
        self._reading: asyncio.Future[None] | None = None

    async def get(self) -> CompactionConfig:
        while True:
            if self._value is not None and self._clock() - self._read_at < self._ttl_s:
                return self._value
            if self._reading is None:
                return await self._read()
            # Another run is reading: wait for it (its outcome, not its exception), look again.
            await asyncio.wait([self._reading])

    async def put(self, config: CompactionConfig) -> None:
        await self._store.put_compaction_config(config)
        self._value, self._read_at = config, self._clock()

    async def _read(self) -> CompactionConfig:
        # Read in the caller's task (no task of its own to outlive the server).
        self._reading = asyncio.get_running_loop().create_future()
        try:
            value = await self._store.get_compaction_config()
            self._value, self._read_at = value, self._clock()
            return value
        finally:
            reading, self._reading = self._reading, None
            reading.set_result(None)
