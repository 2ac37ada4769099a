"""Cross-replica wake-ups over PostgreSQL LISTEN/NOTIFY: the listening connection.

Replicas sharing one PostgreSQL each hold their own readers; a commit on one replica must
wake the readers on the others. The committing transaction sends a notification naming its
runs (channel_payloads.py: the channels, their payloads, `notify`); `Channel` listens.

Delivery is at most once: nothing is queued for a listener that is not connected. `Channel`
therefore reports each change of its connection (`on_state`): while down, readers must poll;
once up again, they re-read the store, since notifications sent in between are gone.
Anything malformed is dropped with a short, rate-limited warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from behest.backoff import backoff_s
from behest.errors import describe
from behest.store.sql.channel_payloads import EVENTS, SIGNALS, decode_events, decode_signal

log = logging.getLogger(__name__)

# How long `start` waits for the first connection, and how long one connection attempt
# (connect and LISTEN) may take before it counts as failed.
FIRST_CONNECT_WAIT_S = 2.0
CONNECT_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 1.0
# Backoff before reconnecting: the first wait is at most this, doubling up to retry_max_s.
FIRST_RETRY_S = 0.1
WARN_EVERY_S = 60.0
PAYLOAD_PREFIX_CHARS = 40

# Keyword arguments SQLAlchemy's asyncpg dialect keeps for itself.
_SQLALCHEMY_ONLY = ("prepared_statement_cache_size", "prepared_statement_name_func")


def connect_args(url: str) -> dict[str, Any]:
    """asyncpg.connect's keyword arguments for a SQLAlchemy PostgreSQL URL: the same ones
    SQLAlchemy's asyncpg dialect passes (user, password, host, port, database, query options
    such as ssl), without the dialect's own options."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise ValueError("LISTEN/NOTIFY needs a PostgreSQL URL")
    parsed = parsed.set(drivername="postgresql+asyncpg")
    _, kwargs = parsed.get_dialect()().create_connect_args(parsed)
    for name in _SQLALCHEMY_ONLY:
        kwargs.pop(name, None)
    return dict(kwargs)


class Channel:
    """Listens on EVENTS and SIGNALS over one dedicated asyncpg connection, kept open.

    `up` starts False. A lost connection is noticed by asyncpg (the server closed it) or by
    a `SELECT 1` every `check_s` that must answer within `check_s` (nothing else notices a
    peer gone silently). On_state reports changes only: True once listening after each
    (re)connection, False on each loss; `stop` reports nothing. Reconnection backs off
    exponentially with full jitter, capped at `retry_max_s`. Notifications from this
    channel's own `node` are ignored: the sender woke its own readers already. Callbacks run
    on the event loop; one that raises is logged and the channel carries on.
    """

    def __init__(
        self,
        url: str,
        *,
        node: str,
        on_events: Callable[[dict[str, int]], None],
        on_signal: Callable[[str, str], None],
        on_state: Callable[[bool], None] | None = None,
        retry_max_s: float = 5.0,
        check_s: float = 5.0,
    ) -> None:
        self._connect_args = connect_args(url)
        self._connect_args.setdefault("timeout", CONNECT_TIMEOUT_S)
        self._where = make_url(url).render_as_string(hide_password=True)
        self._password = str(self._connect_args.get("password") or "")
        self._node = node
        self._on_events = on_events
        self._on_signal = on_signal
        self._on_state = on_state
        self._retry_max_s = retry_max_s
        self._check_s = check_s
        self._task: asyncio.Task[None] | None = None
        self._conn: Any = None
        self._up = False
        self._failure_warnings = _Throttle(WARN_EVERY_S)
        self._payload_warnings = _Throttle(WARN_EVERY_S)

    @property
    def up(self) -> bool:
        """True while listening: notifications sent now will arrive."""
        return self._up

    @property
    def backend_pid(self) -> int | None:
        """The listening connection's server process (tests terminate it), if connected."""
        return int(self._conn.get_server_pid()) if self._conn is not None else None

    async def start(self) -> None:
        """Start listening in the background; wait up to FIRST_CONNECT_WAIT_S for the first
        attempt, so a healthy database is `up` on return. A database that is down is not an
        error: the channel keeps trying."""
        if self._task is not None:
            return
        first = asyncio.Event()
        self._task = asyncio.create_task(self._run(first), name="behest-notify-channel")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FIRST_CONNECT_WAIT_S):
                await first.wait()

    async def stop(self) -> None:
        """Stop listening and close the connection. Idempotent."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        # asyncio.wait, not `await task`: the task's CancelledError is expected, ours is not.
        await asyncio.wait([task])

    async def _run(self, first: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        # Attempts in a row that failed or held only briefly: they set the backoff.
        streak = 0
        while True:
            if streak:
                await asyncio.sleep(self._backoff_s(streak))
            try:
                conn = await self._listen()
            except Exception as exc:
                streak += 1
                first.set()
                self._warn_failure(exc)
                continue
            since = loop.time()
            await self._hold(conn, first)
            self._report(up=False)
            log.warning("lost the notification connection to %s; reconnecting", self._where)
            streak = 1 if loop.time() - since >= self._retry_max_s else streak + 1

    async def _hold(self, conn: Any, first: asyncio.Event) -> None:
        """Be up on `conn` until it is lost. `stop` cancels this: then close it politely."""
        self._conn, self._up = conn, True
        try:
            self._report(up=True)
            first.set()
            await self._watch(conn)
        except asyncio.CancelledError:
            self._conn, self._up = None, False
            await _close(conn)
            raise
        except Exception:
            log.exception("the notification channel failed; reconnecting")
        self._conn, self._up = None, False
        # Lost: nobody to say goodbye to, and a polite close would wait on a silent peer.
        conn.terminate()

    async def _listen(self) -> Any:
        """A connection listening on both channels."""
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            conn = await asyncpg.connect(**self._connect_args)
            try:
                await conn.add_listener(EVENTS, self._events)
                await conn.add_listener(SIGNALS, self._signal)
            except BaseException:
                conn.terminate()
                raise
        return conn

    async def _watch(self, conn: Any) -> None:
        """Return once `conn` is lost: closed under us, or silent for a health check."""
        lost = asyncio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        while not conn.is_closed():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._check_s):
                    await lost.wait()
                    return
            try:
                await conn.fetchval("SELECT 1", timeout=self._check_s)
            except Exception:
                return

    def _events(self, conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if conn is not self._conn:
            return  # scheduled before this connection was dropped
        decoded = decode_events(payload)
        if decoded is None:
            self._warn_malformed(EVENTS, payload)
        elif decoded[0] != self._node:
            self._call("on_events", self._on_events, decoded[1])

    def _signal(self, conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if conn is not self._conn:
            return
        decoded = decode_signal(payload)
        if decoded is None:
            self._warn_malformed(SIGNALS, payload)
        elif decoded[0] != self._node:
            self._call("on_signal", self._on_signal, decoded[1], decoded[2])

    def _report(self, *, up: bool) -> None:
        if self._on_state is not None:
            self._call("on_state", self._on_state, up)

    def _call(self, name: str, callback: Callable[..., None], *args: Any) -> None:
        try:
            callback(*args)
        except Exception:
            log.exception("the notification channel's %s callback failed", name)

    def _backoff_s(self, streak: int) -> float:
        """Full jitter: uniform up to FIRST_RETRY_S doubled per failure, capped."""
        return backoff_s(streak, initial_s=FIRST_RETRY_S, max_s=self._retry_max_s)

    def _warn_failure(self, exc: Exception) -> None:
        held = self._failure_warnings.allow()
        if held is None:
            return
        reason = describe(exc)
        if self._password:
            reason = reason.replace(self._password, "***")
        log.warning(
            "cannot listen for notifications on %s (%s); retrying in the background%s",
            self._where,
            reason,
            _held_note(held),
        )

    def _warn_malformed(self, channel: str, payload: str) -> None:
        held = self._payload_warnings.allow()
        if held is not None:
            log.warning(
                "ignored a malformed notification on %s starting %r%s",
                channel,
                payload[:PAYLOAD_PREFIX_CHARS],
                _held_note(held),
            )


class _Throttle:
    """Lets a repeated warning through at most once per `every_s`, counting those held back."""

    def __init__(self, every_s: float) -> None:
        self._every_s = every_s
        self._next = 0.0
        self._held = 0

    def allow(self) -> int | None:
        """How many were held back since the last one let through, or None to hold this."""
        now = time.monotonic()
        if now < self._next:
            self._held += 1
            return None
        held, self._held, self._next = self._held, 0, now + self._every_s
        return held


def _held_note(held: int) -> str:
    return f" ({held} more like it not logged)" if held else ""


async def _close(conn: Any) -> None:
    """Close politely if the peer answers soon; asyncpg aborts the socket otherwise."""
    with contextlib.suppress(Exception):
        await conn.close(timeout=CLOSE_TIMEOUT_S)
