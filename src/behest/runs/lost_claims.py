"""Runs this node executes that another node has claimed since: told by a refused step
(Fenced, through the event log) or found after a lease renewal (a run that waits on a long
tool writes nothing that would tell). Each is stopped here at once — its model call and tools
cancelled — and writes nothing more; its new owner goes on with it."""

from __future__ import annotations

import logging

from behest.observability.metrics import Metrics
from behest.runs.leases import Leases
from behest.runs.owned import Held
from behest.store.base import Store

# Split out of the executor: its log lines keep the executor's logger, which operators filter by.
log = logging.getLogger("behest.runs.executor")


class LostClaims:
    """Stops the runs whose claim this node lost."""

    def __init__(self, *, runs: Held, store: Store, leases: Leases, metrics: Metrics) -> None:
        self._runs = runs
        self._store = store
        self._leases = leases
        self._metrics = metrics

    async def after_renewal(self, before: set[str], held: frozenset[str]) -> None:
        """Of the runs executing here before a renewal (`before`), stop those it did not
        renew (`held`) that another node now holds."""
        for run_id in before - held:
            handle = self._runs.get(run_id)
            if handle is None or handle.lost:
                continue
            run = await self._store.get_run(run_id)
            if run is None or run.status.is_terminal or not run.owner:
                continue  # it ended, or paused (nobody's): not lost
            if (run.owner, run.lease_generation) != (self._leases.node, handle.generation):
                self.lost(run_id, handle.generation)

    def lost(self, run_id: str, generation: int) -> None:
        """A step of the run under claim `generation` was refused: stop it here."""
        handle = self._runs.get(run_id)
        if handle is None or handle.generation != generation or handle.lost:
            return
        handle.lost = True
        log.warning("run %s was taken over by another node; stopped here", run_id)
        self._metrics.runs_lost.add(1)
        if handle.task is not None:
            handle.task.cancel()
