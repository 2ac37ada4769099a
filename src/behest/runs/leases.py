"""This process's claims on unfinished runs: one identity per process, leases renewed while it
lives, lapsed ones adopted, and a fair share of them when several nodes adopt.

Every unfinished run names an owner node, a lease end and a lease generation (`runs.owner`,
`runs.lease_expires_at`, `runs.lease_generation`). The creating node claims its run; `Leases`
renews all of this node's claims every `lease_s / 3`, and every `ADOPT_EVERY_S` at most hands
the runs it may adopt — unowned, or whose owner's lease lapsed — to the executor, which claims
each with a conditional UPDATE (two nodes never both win; the claim raises the generation, so
the node that lost the run can write nothing more into it) and resumes it.

A node's name is unique per process unless configured (`node_id`); a configured name is
refused while another live process holds it (store: `register_node`). A node that stops lets
go of its runs, so others take them up at once; one that dies loses them when its leases lapse.
With `sole_writer` (SQLite, whose data directory this process has locked) no other process
can be writing: at start-up every unfinished run is taken, whoever claimed it last.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import secrets
import socket
from collections.abc import Awaitable, Callable, Container, Iterable
from datetime import UTC, datetime, timedelta

from behest.domain.runs import Run
from behest.observability.metrics import Metrics
from behest.store.base import NodeRecord, Renewal, Store

log = logging.getLogger(__name__)

# Lapsed runs are looked for this often at most (and at every renewal): a node that died is
# replaced within its lease and this.
ADOPT_EVERY_S = 2.0
# How long a stop waits for a round of renewal or adoption in progress.
STOP_WAIT_S = 5.0

Adopt = Callable[[], Awaitable[None]]
# The runs this process executes under a claim (asked before a renewal), and what the
# renewal found: those it no longer holds were lost; some were asked to cancel.
Running = Callable[[], set[str]]
Renewed = Callable[[set[str], Renewal], Awaitable[None]]


def this_process(configured: str) -> NodeRecord:
    """This process as a node: the configured name, else one no other process has."""
    host = socket.gethostname()
    instance = secrets.token_hex(8)
    name = configured or f"{host}-{os.getpid()}-{instance[:6]}"
    return NodeRecord(name=name, instance=instance, host=host, pid=os.getpid())


def leased_elsewhere(run: Run, node: str, now: datetime) -> bool:
    """Whether another node holds a live lease on the run."""
    live = run.lease_expires_at is not None and run.lease_expires_at > now
    return bool(run.owner) and run.owner != node and live


class Leases:
    """Renews this node's leases in the background and calls `adopt` after each round."""

    def __init__(
        self,
        store: Store,
        *,
        node: NodeRecord,
        lease_s: float,
        sole_writer: bool = False,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics if metrics is not None else Metrics()
        self._renewed = self._metrics.attrs("outcome", "ok")
        self._not_renewed = self._metrics.attrs("outcome", "error")
        self.record = node
        self.sole_writer = sole_writer
        self._lease_s = lease_s
        self._keepers: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self._registered = False
        self.rounds = 0
        self._round_done = asyncio.Event()

    @property
    def node(self) -> str:
        """This process's node name."""
        return self.record.name

    def until(self) -> datetime:
        """When a claim taken or renewed now lapses."""
        return datetime.now(UTC) + timedelta(seconds=self._lease_s)

    async def register(self) -> None:
        """Register this process under its node name; FailedPrecondition if a live process
        holds that name."""
        await self._store.register_node(self.record, now=datetime.now(UTC), until=self.until())
        self._registered = True

    async def claim(self, run_id: str, *, force: bool = False) -> int:
        """Take a run that is unowned, this node's, or whose owner's lease lapsed (any
        unfinished one with `force`); the claim's generation, 0 if not taken."""
        return await self._store.claim_run(
            run_id, owner=self.node, now=datetime.now(UTC), lease_until=self.until(), force=force
        )

    def is_elsewhere(self, run: Run) -> bool:
        """Whether another live node holds the run."""
        return leased_elsewhere(run, self.node, datetime.now(UTC))

    async def adoptable(
        self, runs: Iterable[Run], *, held: Container[str], own: bool, room: int
    ) -> list[Run]:
        """The runs this node may claim now, in random order: not held here, not leased
        elsewhere (unless this is the sole writer at start-up, `own`), this node's own only if
        `own` (later, a run of ours with no task may be one just being created); at most
        `room`, and at most a fair share of them when several nodes are alive."""
        now = datetime.now(UTC)
        candidates = [
            run
            for run in runs
            if run.id not in held
            and (own or run.owner != self.node)
            and ((own and self.sole_writer) or not leased_elsewhere(run, self.node, now))
        ]
        random.shuffle(candidates)
        share = len(candidates)
        if candidates and not own:
            live = max(1, await self._store.live_nodes(now=now))
            share = math.ceil(len(candidates) / live)
        return candidates[: max(0, min(share, room))]

    def start(self, adopt: Adopt | None, running: Running, renewed: Renewed) -> None:
        """Keep leases from now on; `renewed` runs after each renewal, with what `running`
        said before it; `adopt` (if any) every ADOPT_EVERY_S at most. Apart: an adoption held
        up (a claim waiting on a stalled writer's lock) never holds up the renewals."""
        if not self._keepers:
            self._keepers = [
                asyncio.create_task(self._renewing(running, renewed), name="run-leases"),
            ]
            if adopt is not None:
                self._keepers.append(asyncio.create_task(self._adopting(adopt), name="adoption"))

    async def stop(self) -> None:
        """Stop keeping leases once the round in progress is done (not cancelled midway: a
        read cut off in flight can leave a database connection behind, and SQLite's keeps
        the process from exiting); cancelled only if it takes longer than STOP_WAIT_S."""
        keepers, self._keepers = self._keepers, []
        self._stopping.set()
        if keepers:
            _, late = await asyncio.wait(keepers, timeout=STOP_WAIT_S)
            for keeper in late:
                keeper.cancel()
            await asyncio.gather(*keepers, return_exceptions=True)

    def owner_of(self, run: Run) -> str:
        """Whose claim a run had: "none", "this_node" or "other_node"."""
        if not run.owner:
            return "none"
        return "this_node" if run.owner == self.node else "other_node"

    async def leave(self) -> None:
        """Let go of this node's runs and its name (a stop): others take them up at once.
        Nothing, if this process never registered (the name may be a live process's)."""
        if not self._registered:
            return
        try:
            released = await self._store.release_runs(owner=self.node)
            await self._store.unregister_node(self.record)
            self._registered = False
        except Exception:
            log.exception("letting go of this node's runs failed; they lapse with the leases")
            return
        if released:
            log.info("let go of %d unfinished runs for other nodes to take up", released)

    async def next_round(self) -> int:
        """Wait until the next round of adoption (or, without one, renewal) is done; its
        number."""
        self._round_done.clear()
        await self._round_done.wait()
        return self.rounds

    def _round(self) -> None:
        self.rounds += 1
        self._round_done.set()

    async def _pause(self, seconds: float) -> bool:
        """Wait `seconds`; False if told to stop meanwhile."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            return True
        return False

    async def _renewing(self, running: Running, renewed: Renewed) -> None:
        while await self._pause(self._lease_s / 3):
            await self._renew(running, renewed)
            if len(self._keepers) == 1:
                self._round()

    async def _adopting(self, adopt: Adopt) -> None:
        while await self._pause(min(self._lease_s / 3, ADOPT_EVERY_S)):
            try:
                await self._end_stalled_writers()
                await adopt()
            except Exception:
                log.exception("adopting runs failed; retrying")
            self._round()

    async def _end_stalled_writers(self) -> None:
        """Free the runs a vanished node's session stuck inside a write still locks (a
        process frozen mid-statement), before they are adopted."""
        now = datetime.now(UTC)
        before = now - timedelta(seconds=self._lease_s)
        if ended := await self._store.end_stalled_writers(now=now, before=before):
            log.warning("ended %d database sessions of vanished nodes stuck inside a write", ended)

    async def _renew(self, running: Running, renewed: Renewed) -> None:
        outcome = self._renewed
        try:
            before = running()
            renewal = await self._store.renew_leases(owner=self.node, lease_until=self.until())
            await renewed(before, renewal)
        except Exception:
            outcome = self._not_renewed
            log.exception("renewing run leases failed; retrying")
        self._metrics.lease_renewals.add(1, outcome)
