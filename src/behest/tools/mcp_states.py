"""An MCP server's state as behest supervises it, and when it tries the server again (cheap
to import: no SDK here).

    starting ──▶ ready ──▶ restarting ──▶ ready
        │                      │
        └──────▶ failed ◀──────┘      failed ──▶ ready (after one of its attempts)

- starting: behest makes its first connection to the server (since behest started).
- ready: connected; its tools are offered to runs.
- restarting: its connection was lost (the process exited or broke the protocol, an HTTP
  server stopped answering); behest connects again after a short backoff.
- failed: the latest attempt to connect failed (a command that cannot run, a refused
  connection, no answer within mcp_start_timeout_s). behest tries again after the backoff,
  forever: backoff.py's full jitter, its ceiling doubling per failed attempt from
  RESTART_FIRST_S up to the cap (mcp_restart_max_s): each wait is drawn between 0 and the
  ceiling, so a server that keeps failing is tried about twice per cap on average (a wait
  may be short; it is never longer than the cap). A connection that lasted STABLE_S starts
  the count again.

A tool call of a starting or restarting server waits for it (half the call's timeout at most);
of a failed one it fails at once, saying why. Listeners hear every change (health, metrics).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from behest.backoff import backoff_s
from behest.tools.base import Tool

# One logger for everything about MCP servers, whichever module tells it.
log = logging.getLogger("behest.tools.mcp")

STARTING, READY, RESTARTING, FAILED, STOPPED = (
    "starting",
    "ready",
    "restarting",
    "failed",
    "stopped",
)
# The states a configured server is in while behest runs (behest_mcp_server_state).
STATES = (STARTING, READY, RESTARTING, FAILED)
RESTART_FIRST_S = 0.5
DEFAULT_RESTART_MAX_S = 30.0
STABLE_S = 60.0


@dataclass(frozen=True, slots=True)
class McpServerState:
    """One server as it is now: its state, why it is not ready, and its tools as it last
    listed them (none before its first connection: `listed` is False then)."""

    name: str
    state: str
    cause: str = ""
    tools: tuple[Tool, ...] = ()
    listed: bool = False

    @property
    def ready(self) -> bool:
        return self.state == READY

    @property
    def why(self) -> str:
        """Why its tools are unavailable, in words ("" when it is ready)."""
        if self.state == READY:
            return ""
        cause = f" ({self.cause})" if self.cause else ""
        if self.state == FAILED:
            return f"MCP server {self.name!r} failed{cause}; behest tries it again"
        return f"MCP server {self.name!r} is {self.state}{cause}"


class Lifecycle:
    """One server's state: its changes logged and told to `on_change`; calls wait on it."""

    def __init__(
        self,
        name: str,
        transport: str,
        *,
        restart_max_s: float = DEFAULT_RESTART_MAX_S,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.name = name
        self.transport = transport
        self.restart_max_s = restart_max_s
        self.state = STOPPED
        self.cause = ""
        self.retry_at = 0.0  # failed: when the next attempt starts (time.monotonic())
        self._failures = 0  # attempts failed or connections lost in a row
        self._settled = asyncio.Event()  # not starting or restarting
        self._settled.set()
        self._on_change = on_change

    @property
    def settled(self) -> bool:
        return self._settled.is_set()

    async def wait_settled(self, timeout_s: float) -> None:
        """Until the server is ready or has failed (or stopped), at most `timeout_s`."""
        if not self._settled.is_set():
            try:
                await asyncio.wait_for(self._settled.wait(), timeout_s)
            except TimeoutError:
                pass

    def starting(self) -> None:
        self._set(STARTING, "")

    def ready(self, tools: int, *, again: bool) -> None:
        """Connected (`again`: it had been before), with `tools` tools."""
        self._set(READY, "")
        log.info(
            f"MCP server {self.name!r} {'reconnected' if again else 'connected'} with "
            f"{tools} tool(s)",
            extra={"mcp_server": self.name, "mcp_state": READY},
        )

    def lost(self, cause: str) -> None:
        """The connection of a ready server ended: restarting (said once, at once)."""
        if self.state == READY:
            self._set(RESTARTING, cause)

    def retry_wait(self, cause: str, *, up_for_s: float | None) -> float:
        """A connection ended after `up_for_s` (None: it never came up, the attempt failed):
        the state it leaves the server in, logged, and how long to wait before the next
        attempt."""
        if up_for_s is not None and up_for_s >= STABLE_S:
            self._failures = 0
        self._failures += 1
        wait = backoff_s(self._failures, initial_s=RESTART_FIRST_S, max_s=self.restart_max_s)
        if up_for_s is not None:
            self._set(RESTARTING, cause)
            self._log(f"became unavailable: {cause}; restarting it in {wait:.1f} s", cause)
            return wait
        was, said = self.state, self.cause
        self.retry_at = time.monotonic() + wait
        self._set(FAILED, cause)
        what = {STARTING: "failed to start", RESTARTING: "did not restart"}.get(was)
        retry = f"trying again in {wait:.1f} s (attempt {self._failures + 1})"
        if what is not None:
            self._log(f"{what}: {cause}; {retry}", cause)
        else:  # failing again: an error once per run of failures is enough
            level = logging.WARNING if cause != said else logging.INFO
            self._log(f"still fails: {cause}; {retry}", cause, level)
        return wait

    def stopped(self) -> None:
        self._set(STOPPED, "")

    def _set(self, state: str, cause: str) -> None:
        changed = (state, cause) != (self.state, self.cause)
        self.state, self.cause = state, cause
        if state in (STARTING, RESTARTING):
            self._settled.clear()
        else:
            self._settled.set()
        if changed:
            self._on_change()

    def _log(self, what: str, cause: str, level: int = logging.ERROR) -> None:
        log.log(
            level,
            f"MCP server {self.name!r} ({self.transport}) {what}",
            extra={"mcp_server": self.name, "mcp_state": self.state, "error": cause},
        )

    def text(self) -> str:
        """The state as status() words: "ready", "starting", "restarting: <cause>",
        "failed: <cause>" or "stopped"."""
        return f"{self.state}: {self.cause}" if self.cause else self.state

    def retry_in_s(self) -> float:
        """Failed: how long until its next attempt starts."""
        return max(self.retry_at - time.monotonic(), 0.0)
