"""This node's claims on unfinished runs: leases renewed while it lives, lapsed ones adopted.

Every unfinished run names an owner node and a lease end (`runs.owner`,
`runs.lease_expires_at`). The creating node claims its run; `Leases` renews all of this node's
claims every `lease_s / 3`, and after each renewal hands the runs it may adopt — unowned, or
whose owner's lease lapsed — to the executor, which claims each with a conditional UPDATE (two
nodes never both win) and resumes it. A node's own runs are adopted only at start-up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Container, Iterable
from datetime import UTC, datetime, timedelta

from behest.domain.runs import Run
from behest.errors import FailedPrecondition
from behest.metrics import Metrics
from behest.store.base import Store

log = logging.getLogger(__name__)

Adopt = Callable[[], Awaitable[None]]


def leased_elsewhere(run: Run, node: str, now: datetime) -> bool:
    """Whether another node holds a live lease on the run."""
    live = run.lease_expires_at is not None and run.lease_expires_at > now
    return bool(run.owner) and run.owner != node and live


class Leases:
    """Renews this node's leases in the background and calls `adopt` after each renewal."""

    def __init__(
        self, store: Store, *, node: str, lease_s: float, metrics: Metrics | None = None
    ) -> None:
        self._store = store
        self._metrics = metrics if metrics is not None else Metrics()
        self._renewed = self._metrics.attrs("outcome", "ok")
        self._not_renewed = self._metrics.attrs("outcome", "error")
        self.node = node
        self._lease_s = lease_s
        self._keeper: asyncio.Task[None] | None = None
        self.rounds = 0
        self._round_done = asyncio.Event()

    def until(self) -> datetime:
        """When a claim taken or renewed now lapses."""
        return datetime.now(UTC) + timedelta(seconds=self._lease_s)

    async def claim(self, run_id: str) -> bool:
        """Take a run that is unowned, this node's, or whose owner's lease lapsed."""
        return await self._store.claim_run(
            run_id, owner=self.node, now=datetime.now(UTC), lease_until=self.until()
        )

    def check_not_elsewhere(self, run: Run) -> None:
        """Raise FailedPrecondition if another live node holds the run."""
        if leased_elsewhere(run, self.node, datetime.now(UTC)):
            raise FailedPrecondition(
                f"run {run.id} is executing on node {run.owner!r}; ask that node"
            )

    def adoptable(self, runs: Iterable[Run], *, held: Container[str], own: bool) -> list[Run]:
        """The runs this node may claim: not held here, not leased elsewhere, and its own
        only if `own` (later, a run of ours with no task may be one just being created)."""
        now = datetime.now(UTC)
        return [
            run
            for run in runs
            if run.id not in held
            and (own or run.owner != self.node)
            and not leased_elsewhere(run, self.node, now)
        ]

    def start(self, adopt: Adopt | None) -> None:
        """Keep leases from now on; `adopt` (if any) runs after each renewal."""
        if self._keeper is None:
            self._keeper = asyncio.create_task(self._keep(adopt), name="run-leases")

    async def stop(self) -> None:
        if self._keeper is not None:
            keeper, self._keeper = self._keeper, None
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)

    async def next_round(self) -> int:
        """Wait until the next round of renewal (and adoption) is done; its number."""
        self._round_done.clear()
        await self._round_done.wait()
        return self.rounds

    async def _keep(self, adopt: Adopt | None) -> None:
        while True:
            await asyncio.sleep(self._lease_s / 3)
            outcome = self._renewed
            try:
                await self._store.renew_leases(owner=self.node, lease_until=self.until())
                if adopt is not None:
                    await adopt()
            except Exception:
                outcome = self._not_renewed
                log.exception("renewing run leases failed; retrying")
            self._metrics.lease_renewals.add(1, outcome)
            self.rounds += 1
            self._round_done.set()
