"""Whether the database takes writes now: told by every commit, and while it does not, by a
tiny probe write every PROBE_S, so that health turns back when space is freed or an outside
writer lets go, even with no run writing. Listeners (the gRPC health service) hear each
change; reads go on either way."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from behest.errors import StorageFault
from behest.store.base import Store

log = logging.getLogger(__name__)

# While writes fail, how often a probe asks whether they land again.
PROBE_S = 1.0


class WriteHealth:
    """Writable or not (and why), with listeners for each change."""

    def __init__(self, store: Store, *, probe_s: float = PROBE_S) -> None:
        self._store = store
        self._probe_s = probe_s
        self.fault: StorageFault | None = None  # why writes fail now; None: they land
        self._listeners: list[Callable[[bool], None]] = []
        self._probe: asyncio.Task[None] | None = None

    @property
    def writable(self) -> bool:
        return self.fault is None

    def on_change(self, listener: Callable[[bool], None]) -> None:
        """Call `listener(writable)` whenever writes stop or start landing."""
        self._listeners.append(listener)

    def failed(self, fault: StorageFault) -> None:
        """A write did not land because of `fault`."""
        was = self.writable
        self.fault = fault
        if not was:
            return
        log.error("writes to the database fail: %s", fault)
        self._tell(False)
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._probing(), name="write-health-probe")

    def landed(self) -> None:
        """A write landed."""
        if self.writable:
            return
        self.fault = None
        log.warning("writes to the database land again")
        self._tell(True)

    async def stop(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
            self._probe = None

    async def _probing(self) -> None:
        while not self.writable:
            await asyncio.sleep(self._probe_s)  # a period between probes, not a synchronisation
            try:
                await self._store.probe_write()
            except Exception as exc:
                self.fault = self._store.fault(exc)
                continue
            self.landed()

    def _tell(self, writable: bool) -> None:
        for listener in self._listeners:
            try:
                listener(writable)
            except Exception:
                log.exception("a write-health listener failed")
