"""A run this process executes, or is about to: its task, its cancel, how it ended.

The executor keeps one OwnedRun per run it holds: from the moment a creation or claim is in
flight until its end is durable (or it leaves the process at a shutdown). A CancelRun and the
run's own end meet here: the end is *decided* with no await after the loop returns or raises,
so a cancel either comes first (the end is RunCancelled) or finds the end decided; whoever
asks how the run ended waits for `ended`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from behest.domain.runs import Cancel, RunStatus
from behest.errors import DeadlineExceeded, Unavailable


@dataclass(slots=True, eq=False)
class OwnedRun:
    """One run held by this process."""

    tenant: str = ""
    task: asyncio.Task[None] | None = None
    started: bool = False  # the task's body runs, so a task.cancel() reaches its handler
    cancel_requested: bool = False
    cancel: Cancel = field(default_factory=Cancel)  # who asked, and why
    decided: RunStatus | None = None
    final: RunStatus | None = None  # the terminal status, once durable
    problem: str = ""  # why the run left this process without a durable end
    rewake: bool = False  # answers came while it paused: take it up again once it left
    generation: int = 0  # the lease generation of this process's claim on it
    lost: bool = False  # another node claimed it since: stopped here, nothing more written
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    def request_cancel(self, cancel: Cancel) -> None:
        """Ask the run to end cancelled, unless its end is decided already."""
        if self.decided is not None or self.cancel_requested:
            return
        self.cancel_requested = True
        self.cancel = cancel
        if self.started and self.task is not None:
            self.task.cancel()

    def leave(self, problem: str) -> None:
        """The run leaves this process: its end is durable (`final`), or it is not (why)."""
        if not self.ended.is_set():
            self.problem = "" if self.final is not None else problem
            self.ended.set()

    async def wait_end(self, run_id: str, timeout_s: float) -> RunStatus | None:
        """The terminal status once durable; None if the run left without one and no
        problem was named (it changed hands); DeadlineExceeded after `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.ended.wait()
        except TimeoutError:
            raise DeadlineExceeded(
                f"run {run_id} was asked to stop, but its end was not durable within "
                f"{timeout_s:g} s; GetRun or WatchRunEvents tell how it ends"
            ) from None
        if self.final is None and self.problem:
            raise Unavailable(f"run {run_id}: {self.problem}")
        return self.final


class Held:
    """The runs this process holds, by id, and how many each tenant has."""

    def __init__(self) -> None:
        self._runs: dict[str, OwnedRun] = {}
        self._per_tenant: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._runs

    def get(self, run_id: str) -> OwnedRun | None:
        return self._runs.get(run_id)

    def tasks(self) -> list[asyncio.Task[None]]:
        return [h.task for h in self._runs.values() if h.task is not None]

    async def drain(self, grace_s: float, *, cancel_wait_s: float) -> None:
        """Give the run tasks `grace_s` to finish, then cancel the rest and wait for them
        (`cancel_wait_s` at most): a cancelled run stops between two steps."""
        tasks = self.tasks()
        if tasks and grace_s > 0:
            await asyncio.wait(tasks, timeout=grace_s)
        tasks = self.tasks()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=cancel_wait_s)

    def running(self) -> set[str]:
        """The runs whose task has started here under a claim."""
        return {run_id for run_id, h in self._runs.items() if h.started and h.generation}

    def of_tenant(self, tenant: str) -> int:
        return self._per_tenant.get(tenant, 0)

    def no_room(self, tenant: str, max_runs: int, tenant_max: int) -> str:
        """Why one more run would pass the server's or the tenant's limit ("": it fits), the
        text of the ResourceExhausted that refuses it."""
        if len(self._runs) >= max_runs:
            return (
                f"max_concurrent_runs: this server has {len(self._runs)} active runs, its "
                f"limit ({max_runs}); retry when some have finished"
            )
        mine = self.of_tenant(tenant)
        if mine >= tenant_max:
            return (
                f"max_concurrent_runs: this tenant has {mine} active runs, its limit "
                f"({tenant_max}); retry when some have finished"
            )
        return ""

    def hold(self, run_id: str, handle: OwnedRun) -> OwnedRun:
        self._runs[run_id] = handle
        self._per_tenant[handle.tenant] = self.of_tenant(handle.tenant) + 1
        return handle

    def release(self, run_id: str, handle: OwnedRun, problem: str = "") -> None:
        """Forget a run this process reserved or executed; wake whoever waits for its end."""
        if self._runs.get(run_id) is handle:
            del self._runs[run_id]
            left = self._per_tenant[handle.tenant] - 1
            if left:
                self._per_tenant[handle.tenant] = left
            else:
                del self._per_tenant[handle.tenant]
        handle.leave(problem)
