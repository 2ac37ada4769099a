"""Cross-replica notifications: payloads (store/sql/channel_payloads.py), and a Channel on
PostgreSQL (store/sql/channel.py).

The PostgreSQL tests share the session's database, and so both channels, with every other
test: each names its own nodes and runs, and counts only what concerns its runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from behest.store.sql.channel import FIRST_CONNECT_WAIT_S, Channel, connect_args
from behest.store.sql.channel_payloads import (
    EVENTS,
    MAX_NAME_CHARS,
    MAX_PAYLOAD_BYTES,
    SIGNALS,
    decode_events,
    decode_signal,
    events_payloads,
    notify,
    signal_payload,
)
from tests.support import CI, NO_POSTGRES, POSTGRES_URL

needs_postgres = pytest.mark.skipif(not POSTGRES_URL and not CI, reason=NO_POSTGRES)
WAIT_S = 10.0
T = TypeVar("T")


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


# Payloads: pure functions.


@settings(deadline=None, max_examples=60, derandomize=True, database=None)
@given(
    node=st.text(min_size=1, max_size=MAX_NAME_CHARS),
    last=st.dictionaries(
        st.text(min_size=1, max_size=MAX_NAME_CHARS), st.integers(0, 2**63 - 1), max_size=80
    ),
)
def test_events_round_trip_in_payloads_under_the_limit(node: str, last: dict[str, int]) -> None:
    payloads = events_payloads(node, last)

    merged: dict[str, int] = {}
    for payload in payloads:
        assert payload.isascii() and len(payload.encode()) <= MAX_PAYLOAD_BYTES
        decoded = decode_events(payload)
        assert decoded is not None and decoded[0] == node
        merged.update(decoded[1])
    assert merged == last
    assert bool(payloads) == bool(last)


def test_a_thousand_runs_split_over_several_payloads() -> None:
    last = {str(uuid.uuid4()): n * 1_000_003 for n in range(1000)}

    payloads = events_payloads("node:a-1", last)

    assert len(payloads) > 1
    merged: dict[str, int] = {}
    for payload in payloads:
        assert len(payload.encode()) <= MAX_PAYLOAD_BYTES
        decoded = decode_events(payload)
        assert decoded is not None and decoded[0] == "node:a-1"
        merged.update(decoded[1])
    assert merged == last


def test_no_runs_no_payloads() -> None:
    assert events_payloads("node", {}) == []


@pytest.mark.parametrize(
    ("node", "last"),
    [
        ("", {"run": 1}),
        ("n" * (MAX_NAME_CHARS + 1), {"run": 1}),
        ("node", {"": 1}),
        ("node", {"run": -1}),
        ("node", {"run": 2**63}),
        ("node", {"run": True}),
    ],
)
def test_events_out_of_bounds_are_refused(node: str, last: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        events_payloads(node, last)


@pytest.mark.parametrize(
    "payload",
    [
        "",
        "not json",
        "[" * 5000,
        "[]",
        '{"node":"a"}',
        '{"node":"a","last":{}}',
        '{"node":"","last":{"r":1}}',
        '{"node":1,"last":{"r":1}}',
        '{"node":"a","last":[["r",1]]}',
        '{"node":"a","last":{"r":-1}}',
        '{"node":"a","last":{"r":9223372036854775808}}',
        '{"node":"a","last":{"r":' + "9" * 5000 + "}}",
        '{"node":"a","last":{"r":1.0}}',
        '{"node":"a","last":{"r":1e400}}',
        '{"node":"a","last":{"r":NaN}}',
        '{"node":"a","last":{"r":true}}',
        '{"node":"a","last":{"r":{"x":1}}}',
        '{"node":"a","last":{"r":1}',
        '{"node":"a","last":{"' + "r" * (MAX_NAME_CHARS + 1) + '":1}}',
        '{"node":"a","last":{"r":1}}' + " " * 8000,
    ],
)
def test_malformed_events_decode_to_none(payload: str) -> None:
    assert decode_events(payload) is None


def test_signals_round_trip_and_malformed_ones_decode_to_none() -> None:
    payload = signal_payload('node:"a"-1', "cancel", "run\u00e9")

    assert decode_signal(payload) == ('node:"a"-1', "cancel", "run\u00e9")
    for bad in ("", "{}", '{"node":"a","kind":"cancel"}', '{"node":"a","kind":1,"run":"r"}'):
        assert decode_signal(bad) is None
    with pytest.raises(ValueError):
        signal_payload("node", "", "run")


def test_connect_args_keep_the_connection_and_drop_sqlalchemy_options() -> None:
    url = "postgresql+asyncpg://me:p%40ss@db.example:5433/behest?ssl=require&prepared_statement_cache_size=0"

    assert connect_args(url) == {
        "user": "me",
        "password": "p@ss",
        "host": "db.example",
        "port": 5433,
        "database": "behest",
        "ssl": "require",
    }
    with pytest.raises(ValueError):
        connect_args("sqlite+aiosqlite:///behest.db")


# A Channel on PostgreSQL.


class Heard:
    """What a channel delivered about this test's runs, in order."""

    def __init__(self, runs: Iterable[str]) -> None:
        self.runs = set(runs)
        self.events: asyncio.Queue[dict[str, int]] = asyncio.Queue()
        self.signals: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.states: asyncio.Queue[bool] = asyncio.Queue()

    def on_events(self, last: dict[str, int]) -> None:
        mine = {run: sequence for run, sequence in last.items() if run in self.runs}
        if mine:
            self.events.put_nowait(mine)

    def on_signal(self, kind: str, run_id: str) -> None:
        if run_id in self.runs:
            self.signals.put_nowait((kind, run_id))

    def on_state(self, up: bool) -> None:
        self.states.put_nowait(up)


async def next_of(queue: asyncio.Queue[T]) -> T:
    async with asyncio.timeout(WAIT_S):
        return await queue.get()


@contextlib.asynccontextmanager
async def listening(url: str, node: str, heard: Heard, **options: Any) -> AsyncIterator[Channel]:
    channel = Channel(
        url,
        node=node,
        on_events=heard.on_events,
        on_signal=heard.on_signal,
        on_state=heard.on_state,
        **options,
    )
    await channel.start()
    try:
        yield channel
    finally:
        await channel.stop()


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(postgres_url)
    try:
        yield engine
    finally:
        await engine.dispose()


def notify_all(conn: Connection, channel: str, payloads: Iterable[str]) -> None:
    for payload in payloads:
        notify(conn, channel, payload)


async def send(engine: AsyncEngine, channel: str, *payloads: str, commit: bool = True) -> None:
    """Notify in one transaction, committed or rolled back."""
    async with engine.connect() as conn:
        await conn.run_sync(notify_all, channel, payloads)
        await (conn.commit() if commit else conn.rollback())


@needs_postgres
async def test_a_committed_notification_arrives_and_a_rolled_back_one_never(
    postgres_url: str, engine: AsyncEngine
) -> None:
    dropped, kept = str(uuid.uuid4()), str(uuid.uuid4())
    heard, sender = Heard([dropped, kept]), new_name("sender")

    async with listening(postgres_url, new_name("listener"), heard) as channel:
        assert channel.up and await next_of(heard.states) is True
        await send(engine, EVENTS, *events_payloads(sender, {dropped: 1}), commit=False)
        await send(engine, EVENTS, *events_payloads(sender, {kept: 7}))

        # Notifications arrive in commit order: the rolled-back one would have come first.
        assert await next_of(heard.events) == {kept: 7}
        assert heard.events.empty()


@needs_postgres
async def test_the_own_nodes_notifications_are_ignored(
    postgres_url: str, engine: AsyncEngine
) -> None:
    own, other = str(uuid.uuid4()), str(uuid.uuid4())
    heard, node = Heard([own, other]), new_name("node:a")

    async with listening(postgres_url, node, heard):
        await send(engine, EVENTS, *events_payloads(node, {own: 3}))
        await send(engine, SIGNALS, signal_payload(node, "cancel", own))
        await send(engine, SIGNALS, signal_payload(node + "-b", "cancel", other))
        await send(engine, EVENTS, *events_payloads(node + "-b", {other: 4}))

        assert await next_of(heard.signals) == ("cancel", other)
        assert await next_of(heard.events) == {other: 4}
        assert heard.events.empty() and heard.signals.empty()


@needs_postgres
async def test_a_thousand_runs_arrive_over_several_notifications(
    postgres_url: str, engine: AsyncEngine
) -> None:
    last = {str(uuid.uuid4()): n for n in range(1000)}
    heard = Heard(last)
    payloads = events_payloads(new_name("sender"), last)
    assert len(payloads) > 1 and all(len(p.encode()) < 8000 for p in payloads)

    async with listening(postgres_url, new_name("listener"), heard):
        await send(engine, EVENTS, *payloads)

        merged: dict[str, int] = {}
        while len(merged) < len(last):
            batch = await next_of(heard.events)
            merged.update(batch)
        assert merged == last


@needs_postgres
async def test_signals_arrive(postgres_url: str, engine: AsyncEngine) -> None:
    run = str(uuid.uuid4())
    heard = Heard([run])

    async with listening(postgres_url, new_name("listener"), heard):
        await send(engine, SIGNALS, signal_payload(new_name("sender"), "cancel", run))

        assert await next_of(heard.signals) == ("cancel", run)


@needs_postgres
async def test_malformed_notifications_are_ignored_with_a_short_warning(
    postgres_url: str, engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    run = str(uuid.uuid4())
    heard = Heard([run])
    long = "x" * 7000

    async with listening(postgres_url, new_name("listener"), heard):
        await send(
            engine,
            EVENTS,
            long,
            "[" * 3000,
            f'{{"node":"elsewhere","last":{{"{run}":-1}}}}',
            f'{{"node":"elsewhere","last":{{"{run}":1e400}}}}',
        )
        await send(engine, SIGNALS, f'{{"node":"elsewhere","kind":"cancel","run":{run}}}')
        await send(engine, SIGNALS, signal_payload(new_name("sender"), "cancel", run))
        await send(engine, EVENTS, *events_payloads(new_name("sender"), {run: 2}))

        assert await next_of(heard.signals) == ("cancel", run)
        assert await next_of(heard.events) == {run: 2}
        assert heard.events.empty() and heard.signals.empty()
    assert "ignored a malformed notification" in caplog.text
    assert "x" * 100 not in caplog.text


@needs_postgres
async def test_a_callback_that_raises_is_logged_and_listening_goes_on(
    postgres_url: str, engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    heard = Heard([first, second])
    record = heard.on_events

    def on_events(last: dict[str, int]) -> None:
        record(last)
        if first in last:
            raise RuntimeError("a reader's bug")

    heard.on_events = on_events  # type: ignore[method-assign]
    sender = new_name("sender")

    async with listening(postgres_url, new_name("listener"), heard):
        await send(engine, EVENTS, *events_payloads(sender, {first: 1}))
        await send(engine, EVENTS, *events_payloads(sender, {second: 1}))

        assert await next_of(heard.events) == {first: 1}
        assert await next_of(heard.events) == {second: 1}
    assert "on_events callback failed" in caplog.text


@needs_postgres
async def test_a_terminated_connection_is_reported_and_replaced(
    postgres_url: str, engine: AsyncEngine
) -> None:
    run = str(uuid.uuid4())
    heard = Heard([run])

    async with listening(postgres_url, new_name("listener"), heard, retry_max_s=0.5) as channel:
        assert await next_of(heard.states) is True
        pid = channel.backend_pid
        assert pid is not None
        async with engine.connect() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})

        assert await next_of(heard.states) is False
        assert await next_of(heard.states) is True
        assert channel.up and channel.backend_pid not in (None, pid)
        await send(engine, EVENTS, *events_payloads(new_name("sender"), {run: 9}))
        assert await next_of(heard.events) == {run: 9}


class SilentProxy:
    """A TCP relay to PostgreSQL whose connections can go silent: data is swallowed both
    ways and nothing is closed, as with a peer that vanished without a word."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._silent: list[asyncio.Event] = []
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    def silence(self) -> None:
        """Silence every connection open now; later ones relay."""
        for silent in self._silent:
            silent.set()

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        self._writers += [writer, up_writer]
        silent = asyncio.Event()
        self._silent.append(silent)
        await asyncio.gather(
            self._pipe(reader, up_writer, silent),
            self._pipe(up_reader, writer, silent),
            return_exceptions=True,
        )
        writer.close()
        up_writer.close()

    @staticmethod
    async def _pipe(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, silent: asyncio.Event
    ) -> None:
        while data := await reader.read(65536):
            if not silent.is_set():
                writer.write(data)
        writer.close()  # one side hung up: so does the relay, to the other


@needs_postgres
async def test_a_silent_peer_is_found_by_the_health_check_and_replaced(
    postgres_url: str, engine: AsyncEngine
) -> None:
    server = make_url(postgres_url)
    proxy = SilentProxy(server.host or "127.0.0.1", server.port or 5432)
    via_proxy = server.set(port=await proxy.start()).render_as_string(hide_password=False)
    run = str(uuid.uuid4())
    heard = Heard([run])
    try:
        async with listening(
            via_proxy, new_name("listener"), heard, check_s=0.3, retry_max_s=0.5
        ) as channel:
            assert await next_of(heard.states) is True
            proxy.silence()

            assert await next_of(heard.states) is False
            assert await next_of(heard.states) is True
            assert channel.up
            await send(engine, EVENTS, *events_payloads(new_name("sender"), {run: 5}))
            assert await next_of(heard.events) == {run: 5}
    finally:
        await proxy.close()


async def test_an_unreachable_database_starts_down_and_stops_promptly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    heard = Heard([])
    url = "postgresql+asyncpg://behest:s3cret-pw@127.0.0.1:1/behest"
    channel = Channel(
        url, node="n", on_events=heard.on_events, on_signal=heard.on_signal, on_state=heard.on_state
    )

    async with asyncio.timeout(FIRST_CONNECT_WAIT_S + 1):
        await channel.start()
    assert not channel.up and channel.backend_pid is None
    async with asyncio.timeout(1):
        await channel.stop()
        await channel.stop()

    assert heard.states.empty()
    assert "127.0.0.1:1" in caplog.text
    assert "s3cret-pw" not in caplog.text
