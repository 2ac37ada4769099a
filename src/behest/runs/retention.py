"""Retention: finished runs older than `retention_days` are deleted in the background.

Every `retention_interval_s` (the first time at start-up) `Retention` prunes finished runs
(COMPLETED, FAILED, CANCELLED) last updated more than `retention_days` ago — with their
events, snapshots, pending calls, idempotency keys and messages — `retention_batch` per
transaction until a batch comes back short, then the sessions they left empty
(store/sql/erasure.py). Runs not finished, and the finished runs of a session a run is active
on, stay. `behest runs prune` does the same once (`prune_from_cli`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from datetime import UTC, datetime, timedelta

from behest.config import Settings
from behest.store.base import Store
from behest.store.sql.store import SqlStore

log = logging.getLogger(__name__)


def cutoff(days: float, now: datetime | None = None) -> datetime:
    """The instant `days` before `now`: runs last updated before it are prunable."""
    now = now or datetime.now(UTC)
    try:
        return now - timedelta(days=days)
    except OverflowError:  # further back than datetime goes: nothing is that old
        return datetime.min.replace(tzinfo=UTC)


async def prune(store: Store, *, older_than: datetime, batch: int) -> int:
    """Prune in batches of `batch` until one comes back short; how many runs in all."""
    total = 0
    while True:
        pruned = await store.prune_runs(older_than=older_than, limit=batch)
        total += pruned
        if pruned < batch:
            return total


class Retention:
    """Prunes old finished runs every `interval_s`; off when `days` is 0."""

    def __init__(self, store: Store, *, days: float, interval_s: float, batch: int) -> None:
        self._store = store
        self.days = days
        self._interval_s = interval_s
        self._batch = batch
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        self.pruned = 0

    @property
    def enabled(self) -> bool:
        return self.days > 0

    def start(self) -> None:
        """Prune from now on (when enabled); starting again does nothing."""
        if self.enabled and self._task is None:
            self._task = asyncio.create_task(self._keep(), name="retention")

    async def stop(self) -> None:
        """Stop pruning; a batch under way is left to finish or roll back. Idempotent."""
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def prune_once(self) -> int:
        """One round: every run prunable now; how many were pruned."""
        started = time.monotonic()
        cut = cutoff(self.days)
        pruned = await prune(self._store, older_than=cut, batch=self._batch)
        self.pruned += pruned
        log.info(
            "retention pruned runs",
            extra={
                "runs": pruned,
                "older_than": cut.isoformat(),
                "took_ms": round((time.monotonic() - started) * 1000, 1),
            },
        )
        return pruned

    async def _keep(self) -> None:
        while True:
            try:
                await self.prune_once()
            except Exception:
                log.exception("pruning old runs failed; trying again in the next round")
            self.rounds += 1
            await asyncio.sleep(self._interval_s)


async def prune_from_cli(settings: Settings, older_than_days: float, dry_run: bool) -> int:
    """`behest runs prune`: prune (or with `dry_run` count) finished runs older than
    `older_than_days`, on the server's database; how many runs."""
    if not math.isfinite(older_than_days) or older_than_days < 0:
        raise ValueError(f"--older-than must be a number of days >= 0 (got {older_than_days})")
    store = SqlStore(settings.effective_database_url)
    await store.start()
    try:
        cut = cutoff(older_than_days)
        if dry_run:
            return await store.count_prunable(older_than=cut)
        return await prune(store, older_than=cut, batch=settings.retention_batch)
    finally:
        await store.close()
