"""Several `behest serve` processes on one database: what a user of the replicas notices.

Replicas on one PostgreSQL share their runs' logs (a watcher on any of them follows a run
executing on another), cancels (through any of them), failover (a dead or frozen replica's
runs end on the others, exactly once, with no gap) and creation keys; each process has a
node identity of its own, a configured one is refused while a live process holds it, and a
SQLite data directory is served by one process at a time.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest.cli import EXIT_ERROR
from behest.store.sql import tables as t
from tests.stored import RunRow, engine_on, fresh_database, run_rows, stored_events
from tests.support import create_request, kind, script

TERMINAL = {"run_completed", "run_failed", "run_cancelled"}
LEASE_S = 2.0
COMPLETED = int(c.RUN_STATUS_COMPLETED)

T = TypeVar("T")


# --- replicas: `behest serve` child processes whose stderr is kept -------------------------


@dataclass
class Replica:
    """A `behest serve` child process serving on `address`, its JSON log kept as it comes."""

    process: asyncio.subprocess.Process
    address: str
    node: str
    channel: grpc.aio.Channel
    runs: rpc.RunServiceStub
    log: list[dict[str, Any]] = field(default_factory=list)
    news: asyncio.Event = field(default_factory=asyncio.Event)

    def logged(self, text: str) -> list[dict[str, Any]]:
        """The log entries whose message contains `text`."""
        return [entry for entry in self.log if text in str(entry.get("msg", ""))]

    async def wait_logged(self, text: str, count: int) -> list[dict[str, Any]]:
        """Wait until `count` log entries contain `text`."""
        while True:
            self.news.clear()
            found = self.logged(text)
            if len(found) >= count:
                return found
            await self.news.wait()

    def stderr(self) -> str:
        return "\n".join(json.dumps(entry) for entry in self.log)


def _child_env(settings: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("BEHEST_DATABASE_URL", "BEHEST_NODE_ID", "BEHEST_RUN_LEASE_S")
    }
    return {**env, "BEHEST_LOG_FORMAT": "json", "BEHEST_SHUTDOWN_GRACE_S": "0", **settings}


async def _spawn(data_dir: Path, settings: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "behest",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(data_dir),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=_child_env(settings),
        limit=1 << 22,
    )


def _entry(line: bytes) -> dict[str, Any]:
    text = line.decode(errors="replace").rstrip("\n")
    if text.startswith("{"):
        with suppress(ValueError):
            entry = json.loads(text)
            if isinstance(entry, dict):
                return entry
    return {"msg": text, "raw": True}


@asynccontextmanager
async def replica(data_dir: Path, **settings: str) -> AsyncIterator[Replica]:
    """`behest serve` on an ephemeral port; yields once it serves. Killed on the way out
    (continued first, in case a test stopped it)."""
    process = await _spawn(data_dir, settings)
    assert process.stderr is not None
    log: list[dict[str, Any]] = []
    reader: asyncio.Task[None] | None = None
    channel: grpc.aio.Channel | None = None
    try:
        serving: dict[str, Any] = {}
        async with asyncio.timeout(30):
            while not serving:
                line = await process.stderr.readline()
                lines = "\n".join(json.dumps(e) for e in log)
                assert line, f"behest serve exited before serving:\n{lines}"
                entry = _entry(line)
                log.append(entry)
                if entry.get("msg") == "behest serving":
                    serving = entry
        address = f"127.0.0.1:{serving['port']}"
        channel = grpc.aio.insecure_channel(address)
        server = Replica(
            process=process,
            address=address,
            node=str(serving["node"]),
            channel=channel,
            runs=rpc.RunServiceStub(channel),
            log=log,
        )

        async def read(stream: asyncio.StreamReader) -> None:
            while line := await stream.readline():
                log.append(_entry(line))
                server.news.set()

        reader = asyncio.create_task(read(process.stderr))
        yield server
    finally:
        if channel is not None:
            await channel.close()
        if process.returncode is None:
            with suppress(ProcessLookupError):
                process.send_signal(signal.SIGCONT)
                process.kill()
        await process.wait()
        if reader is not None:
            with suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await reader
            reader.cancel()


async def three_replicas(
    stack: AsyncExitStack, directory: Path, database: str, **settings: str
) -> list[Replica]:
    """Three replicas on `database`, their data directories under `directory`."""
    data_dirs = [directory / f"r{i}" for i in range(3)]
    return await start_replicas(stack, data_dirs, BEHEST_DATABASE_URL=database, **settings)


async def start_replicas(
    stack: AsyncExitStack, data_dirs: Iterable[Path], **settings: str
) -> list[Replica]:
    """Start a replica per data directory, concurrently; each is stopped when `stack` closes."""
    async with asyncio.TaskGroup() as group:
        tasks = [
            group.create_task(stack.enter_async_context(replica(data_dir, **settings)))
            for data_dir in data_dirs
        ]
    return [task.result() for task in tasks]


async def refused_start(data_dir: Path, **settings: str) -> tuple[int, str]:
    """`behest serve` expected not to start: its exit status and stderr."""
    process = await _spawn(data_dir, settings)
    try:
        async with asyncio.timeout(30):
            _, stderr = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, stderr.decode(errors="replace")


# --- the shared database ---------------------------------------------------------------------


@pytest.fixture
async def database(postgres_url: str) -> AsyncIterator[str]:
    """A fresh database on the test PostgreSQL server for one test's replicas, so that no
    run or node registration of another test's (killed) replicas is in it."""
    async with fresh_database(postgres_url, "behest_replicas") as url:
        yield url


async def poll(check: Callable[[], Awaitable[T | None]], seconds: float, what: str) -> T:
    """Ask `check` every 50 ms until it answers something truthy (there is nothing to await
    instead), for at most `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            while True:
                if value := await check():
                    return value
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"not within {seconds} s: {what}") from None


_BLOCKED = sa.text(
    "SELECT pid, query, now() - query_start AS waited FROM pg_stat_activity "
    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
)


async def taken_over(
    engine: AsyncEngine, lost_by: str, before: dict[str, RunRow], seconds: float
) -> dict[str, RunRow]:
    """Wait until every run of `before` is claimed by a node other than `lost_by` (a newer
    generation); the runs then. Fails naming the statements that wait for locks, and every
    run's owner and lease."""

    async def adopted() -> dict[str, RunRow] | None:
        rows = await run_rows(engine, before)
        done = all(
            row.owner not in (None, lost_by) and row.generation > before[run_id].generation
            for run_id, row in rows.items()
        )
        return rows if done else None

    try:
        return await poll(adopted, seconds, f"the runs of {lost_by} were adopted")
    except AssertionError as exc:
        async with engine.connect() as conn:
            blocked = [tuple(row) for row in await conn.execute(_BLOCKED)]
            r = t.runs.c
            leases = sa.select(r.id, r.owner, r.lease_generation, r.lease_expires_at, r.status)
            runs = [tuple(row) for row in await conn.execute(leases)]
            now = (await conn.execute(sa.text("SELECT now()"))).scalar()
        raise AssertionError(
            f"{exc}\nstatements waiting for a lock: {blocked}\nruns at {now}: {runs}"
        ) from None


# --- runs and their logs ---------------------------------------------------------------------


def calc_steps(steps: int, deltas: int, delay_ms: int, last: str = "finished") -> str:
    """A script run of `steps` model calls, each streaming `deltas` words slowly and calling
    the calculator (different arguments each time: no doom loop), then a last answer."""
    calls = [
        {
            "deltas": deltas,
            "delay_ms": delay_ms,
            "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} + {i}"}}],
        }
        for i in range(1, steps + 1)
    ]
    return script(*calls, {"text": last, "delay_ms": delay_ms})


def script_run(body: str, **fields: str) -> pb.CreateRunRequest:
    return create_request(body, model="script", **fields)


def kinds(events: Iterable[pb.AgentEvent]) -> list[str]:
    return [kind(e) for e in events]


def assert_one_clean_log(events: list[pb.AgentEvent], ending: str, *, first: int = 1) -> None:
    """Sequences first..N with no gap and no duplicate; exactly one terminal event, the last,
    of kind `ending`."""
    sequences = [e.sequence for e in events]
    assert sequences == list(range(first, first + len(events))), sequences
    terminal = [k for k in kinds(events) if k in TERMINAL]
    assert terminal == [ending], kinds(events)
    assert kind(events[-1]) == ending


def assert_stored_log_fenced(rows: list[tuple[int, str, int]], ending: str) -> list[int]:
    """The stored log: gapless, one terminal event (the last), and generations that never go
    back along the sequence (no older claim wrote after a newer one). The generations seen."""
    assert [s for s, _, _ in rows] == list(range(1, len(rows) + 1))
    assert [k for _, k, _ in rows if k in TERMINAL] == [ending]
    assert rows[-1][1] == ending
    generations = [g for _, _, g in rows]
    assert generations == sorted(generations), rows
    return sorted(set(generations))


async def watch(server: Replica, run_id: str, after: int = 0) -> list[pb.AgentEvent]:
    """The run's events after `after`, to its end (within 20 s)."""
    request = pb.WatchRunEventsRequest(run_id=run_id, last_event_id=after)
    async with asyncio.timeout(20):
        return [e async for e in server.runs.WatchRunEvents(request)]


async def read_until(
    stream: grpc.aio.UnaryStreamCall, wanted: Callable[[list[pb.AgentEvent]], bool]
) -> list[pb.AgentEvent]:
    """Read events from a stream until `wanted` holds of them."""
    events: list[pb.AgentEvent] = []
    while not wanted(events):
        event = await stream.read()
        assert event is not grpc.aio.EOF, f"the stream ended early: {kinds(events)}"
        events.append(event)
    return events


async def read_rest(stream: grpc.aio.UnaryStreamCall) -> list[pb.AgentEvent]:
    events = []
    while (event := await stream.read()) is not grpc.aio.EOF:
        events.append(event)
    return events


# --- the tests ---------------------------------------------------------------------------------


async def test_runs_through_any_replica_are_watched_whole_through_another(
    tmp_path: Path, database: str
) -> None:
    body = script({"deltas": 8, "delay_ms": 60}, {"text": "and done", "delay_ms": 60})
    async with AsyncExitStack() as stack, engine_on(database) as engine:
        replicas = await three_replicas(stack, tmp_path, database)
        assert len({r.node for r in replicas}) == 3
        created = await asyncio.gather(
            *(replicas[i % 3].runs.CreateRun(script_run(body)) for i in range(6))
        )
        run_ids = [reply.run_id for reply in created]
        watchers = [
            asyncio.create_task(watch(replicas[(i + 1) % 3], run_id))
            for i, run_id in enumerate(run_ids)
        ]

        # One more watcher of the first run attaches mid-run, with a cursor, on the third.
        first = replicas[1].runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_ids[0]))
        async with asyncio.timeout(20):
            head = await read_until(first, lambda seen: len(seen) == 3)
            assert not TERMINAL & set(kinds(head))
            cursor = head[-1].sequence
            late = asyncio.create_task(watch(replicas[2], run_ids[0], after=cursor))
            whole_first = head + await read_rest(first)
            watched = await asyncio.gather(*watchers)
            tail = await late

        owners = await run_rows(engine, run_ids)
        for i, (run_id, events) in enumerate(zip(run_ids, watched, strict=True)):
            assert owners[run_id].owner == replicas[i % 3].node  # it ran where it was created
            assert_one_clean_log(events, "run_completed")
            # The creator's own record of the run is the same, event for event.
            assert await watch(replicas[i % 3], run_id) == events
        assert whole_first == watched[0]
        assert_one_clean_log(tail, "run_completed", first=cursor + 1)
        assert tail == whole_first[cursor:]
        for server in replicas:
            reply = await server.runs.GetRun(pb.GetRunRequest(run_id=run_ids[0]))
            assert reply.run.status == c.RUN_STATUS_COMPLETED


async def test_cancel_through_a_third_replica_reaches_the_owner_and_the_watcher(
    tmp_path: Path, database: str
) -> None:
    slow = script({"deltas": 2000, "delay_ms": 20})  # 40 s unless cancelled
    async with AsyncExitStack() as stack, engine_on(database) as engine:
        a, b, c3 = await three_replicas(stack, tmp_path, database)
        run_id = (await a.runs.CreateRun(script_run(slow))).run_id
        stream = b.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id))
        async with asyncio.timeout(20):
            seen = await read_until(stream, lambda got: "text_delta" in kinds(got))
        assert (await run_rows(engine, [run_id]))[run_id].owner == a.node

        asked = time.monotonic()
        cancel = asyncio.ensure_future(c3.runs.CancelRun(pb.CancelRunRequest(run_id=run_id)))
        async with asyncio.timeout(10):
            while kind(seen[-1]) != "run_cancelled":
                event = await stream.read()
                assert event is not grpc.aio.EOF, kinds(seen)
                seen.append(event)
            watcher_saw = time.monotonic() - asked
            seen += await read_rest(stream)
            reply = await cancel
            replied = time.monotonic() - asked
        assert reply.status == c.RUN_STATUS_CANCELLED
        assert watcher_saw < 1.0, f"the watcher saw RunCancelled {watcher_saw:.2f} s after"
        assert replied < 1.5, f"CancelRun answered after {replied:.2f} s"
        assert_one_clean_log(seen, "run_cancelled")

        for server in (a, b, c3):
            assert await watch(server, run_id) == seen
            reply_run = await server.runs.GetRun(pb.GetRunRequest(run_id=run_id))
            assert reply_run.run.status == c.RUN_STATUS_CANCELLED
        stored = await stored_events(engine, run_id)
        assert [s for s, _, _ in stored] == [e.sequence for e in seen]
        assert stored[-1][1] == "run_cancelled"


async def test_kill_9_of_the_owner_hands_its_runs_to_the_others(
    tmp_path: Path, database: str
) -> None:
    body = calc_steps(steps=5, deltas=4, delay_ms=50)  # ~3 s: 6 model calls, 5 tool calls
    async with AsyncExitStack() as stack, engine_on(database) as engine:
        a, b, c3 = await three_replicas(stack, tmp_path, database, BEHEST_RUN_LEASE_S=str(LEASE_S))
        created = await asyncio.gather(*(a.runs.CreateRun(script_run(body)) for _ in range(10)))
        run_ids = [reply.run_id for reply in created]
        streams = [
            (b if i % 2 else c3).runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id))
            for i, run_id in enumerate(run_ids)
        ]

        def two_tool_calls_in(events: list[pb.AgentEvent]) -> bool:
            return kinds(events).count("tool_message_committed") >= 2

        async with asyncio.timeout(20):  # killed well into the runs, with 4 model calls to go
            heads = await asyncio.gather(*(read_until(s, two_tool_calls_in) for s in streams))
        before = await run_rows(engine, run_ids)
        assert {row.owner for row in before.values()} == {a.node}
        assert not any(row.status == COMPLETED for row in before.values())

        a.process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        await a.process.wait()
        try:
            async with asyncio.timeout(LEASE_S + 5):
                rests = await asyncio.gather(*(read_rest(s) for s in streams))
        except TimeoutError:
            rows = await run_rows(engine, run_ids)
            raise AssertionError(
                f"not every run ended within lease + 5 s of the kill: {rows}\n"
                f"b: {b.stderr()}\nc: {c3.stderr()}"
            ) from None
        took = time.monotonic() - killed

        after = await run_rows(engine, run_ids)
        for run_id, head, rest in zip(run_ids, heads, rests, strict=True):
            events = head + rest
            assert_one_clean_log(events, "run_completed")
            assert after[run_id].status == COMPLETED
            assert after[run_id].owner in (b.node, c3.node)
            assert after[run_id].generation > before[run_id].generation
            generations = assert_stored_log_fenced(
                await stored_events(engine, run_id), "run_completed"
            )
            assert generations[0] == before[run_id].generation
            assert await watch(b, run_id) == events
        adopters = [row.owner for row in after.values()]
        assert adopters.count(b.node) >= 1 and adopters.count(c3.node) >= 1, (adopters, took)


async def test_a_frozen_owner_writes_nothing_into_runs_taken_over(
    tmp_path: Path, database: str
) -> None:
    body = calc_steps(steps=3, deltas=4, delay_ms=50)  # ~2 s
    async with AsyncExitStack() as stack, engine_on(database) as engine:
        a, b, c3 = await three_replicas(stack, tmp_path, database, BEHEST_RUN_LEASE_S=str(LEASE_S))
        created = await asyncio.gather(*(a.runs.CreateRun(script_run(body)) for _ in range(4)))
        run_ids = [reply.run_id for reply in created]
        streams = [
            b.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)) for run_id in run_ids
        ]
        async with asyncio.timeout(20):
            heads = await asyncio.gather(
                *(read_until(s, lambda got: "text_delta" in kinds(got)) for s in streams)
            )
        before = await run_rows(engine, run_ids)
        assert {row.owner for row in before.values()} == {a.node}

        a.process.send_signal(signal.SIGSTOP)
        try:
            adopted = await taken_over(engine, a.node, before, LEASE_S + 8)
        finally:
            a.process.send_signal(signal.SIGCONT)

        # Woken, the frozen node goes on with its runs where it was; its next step of each is
        # refused and it stops the run there.
        try:
            async with asyncio.timeout(10):
                await a.wait_logged("was taken over by another node", len(run_ids))
        except TimeoutError:
            raise AssertionError(f"a did not stop its lost runs:\n{a.stderr()}") from None
        async with asyncio.timeout(20):
            rests = await asyncio.gather(*(read_rest(s) for s in streams))

        after = await run_rows(engine, run_ids)
        for run_id, head, rest in zip(run_ids, heads, rests, strict=True):
            events = head + rest
            assert_one_clean_log(events, "run_completed")
            rows = await stored_events(engine, run_id)
            assert [(s, k) for s, k, _ in rows] == [(e.sequence, kind(e)) for e in events]
            generations = assert_stored_log_fenced(rows, "run_completed")
            frozen = before[run_id].generation
            adopter = adopted[run_id].generation
            assert generations[0] == frozen and adopter in generations
            first_adopted = min(s for s, _, g in rows if g >= adopter)
            assert all(s < first_adopted for s, _, g in rows if g == frozen)
            assert after[run_id].owner in (b.node, c3.node)
            assert after[run_id].status == COMPLETED


# A backend of this database in the middle of a write transaction that checked its runs'
# generations (their rows locked FOR SHARE), whose client has sent nothing for a while: under
# these tests' load only a frozen process's (the others' last milliseconds).
_STALLED_TRANSACTIONS = sa.text(
    "SELECT a.pid, a.query FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
    "WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() "
    "AND a.state = 'idle in transaction' "
    "AND now() - a.state_change > interval '200 milliseconds' "
    "AND l.locktype = 'relation' AND l.relation = 'runs'::regclass AND l.mode = 'RowShareLock'"
)


async def freeze_inside_a_write(
    frozen: Replica, engine: AsyncEngine, run_id: str
) -> list[tuple[int, str]]:
    """SIGSTOP `frozen` at a moment it is inside a write transaction (it writes all the time);
    the stalled transactions. Tried again (SIGCONT, some progress, SIGSTOP) until caught."""

    async def stalled() -> list[tuple[int, str]]:
        async with engine.connect() as conn:
            rows = await conn.execute(_STALLED_TRANSACTIONS)
            return [(int(pid), str(query)) for pid, query in rows]

    async def last_sequence() -> int:
        async with engine.connect() as conn:
            query = sa.select(sa.func.max(t.events.c.sequence)).where(t.events.c.run_id == run_id)
            return int((await conn.execute(query)).scalar() or 0)

    for _ in range(40):
        frozen.process.send_signal(signal.SIGSTOP)
        with suppress(AssertionError):
            return await poll(stalled, 0.6, "a stalled transaction")
        frozen.process.send_signal(signal.SIGCONT)
        progress = await last_sequence()

        async def went_on(floor: int = progress) -> bool:
            return await last_sequence() > floor

        await poll(went_on, 5, "the frozen replica went on writing")
    raise AssertionError("never caught the replica inside a write transaction")


async def test_a_replica_frozen_inside_a_write_does_not_hold_up_failover(
    tmp_path: Path, database: str
) -> None:
    busy = script({"deltas": 100_000, "delay_ms": 2})  # a commit every few milliseconds
    async with AsyncExitStack() as stack, engine_on(database) as engine:
        a, b, c3 = await three_replicas(stack, tmp_path, database, BEHEST_RUN_LEASE_S=str(LEASE_S))
        created = await asyncio.gather(*(a.runs.CreateRun(script_run(busy)) for _ in range(4)))
        run_ids = [reply.run_id for reply in created]
        own = (await b.runs.CreateRun(script_run(busy))).run_id  # b's own, to keep renewing
        streams = [
            c3.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)) for run_id in run_ids
        ]
        async with asyncio.timeout(20):
            heads = await asyncio.gather(
                *(read_until(s, lambda got: "text_delta" in kinds(got)) for s in streams)
            )
        before = await run_rows(engine, run_ids)
        assert {row.owner for row in before.values()} == {a.node}

        stalled = await freeze_inside_a_write(a, engine, run_ids[0])
        try:
            try:
                adopted = await taken_over(engine, a.node, before, LEASE_S + 4)
            except AssertionError as exc:
                raise AssertionError(
                    f"{exc}\nthe frozen replica's transaction: {stalled}\n"
                    f"b ({b.node}) runs {own} of its own"
                ) from None
            rows = await run_rows(engine, [own])
            assert rows[own].owner == b.node and rows[own].generation == 1
        finally:
            a.process.send_signal(signal.SIGCONT)

        async with asyncio.timeout(20):
            await a.wait_logged("was taken over by another node", len(run_ids))
            rests = await asyncio.gather(*(read_rest(s) for s in streams))
        for run_id, head, rest in zip(run_ids, heads, rests, strict=True):
            assert_one_clean_log(head + rest, "run_completed")
            rows_of = await stored_events(engine, run_id)
            generations = assert_stored_log_fenced(rows_of, "run_completed")
            assert generations[0] == before[run_id].generation
            assert adopted[run_id].generation in generations


async def test_replicas_racing_one_creation_key_make_one_run(tmp_path: Path, database: str) -> None:
    async with AsyncExitStack() as stack, engine_on(database) as engine:
        a, b = await start_replicas(
            stack, [tmp_path / "a", tmp_path / "b"], BEHEST_DATABASE_URL=database
        )
        run_ids = []
        for attempt in range(5):
            request = create_request(f"hello {attempt}", client_request_id=str(uuid.uuid4()))
            first, second = await asyncio.gather(
                a.runs.CreateRun(request), b.runs.CreateRun(request)
            )
            assert first.run_id == second.run_id
            assert first.session_id == second.session_id
            run_ids.append(first.run_id)
        assert len(set(run_ids)) == 5
        async with engine.connect() as conn:
            stored = (await conn.execute(sa.select(t.runs.c.id))).scalars().all()
        assert sorted(stored) == sorted(run_ids)
        for run_id in run_ids:
            events = await watch(b, run_id)
            assert kinds(events).count("run_started") == 1
            assert_one_clean_log(events, "run_completed")


async def test_default_replicas_on_one_host_never_share_runs(tmp_path: Path, database: str) -> None:
    body = script({"deltas": 30, "delay_ms": 50})  # ~1.5 s
    async with AsyncExitStack() as stack, engine_on(database) as engine:
        a, b = await start_replicas(
            stack, [tmp_path / "a", tmp_path / "b"], BEHEST_DATABASE_URL=database
        )
        assert a.node != b.node
        cancelled_id, left_id = [
            reply.run_id
            for reply in await asyncio.gather(
                a.runs.CreateRun(script_run(body)), a.runs.CreateRun(script_run(body))
            )
        ]
        stream = a.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=cancelled_id))
        async with asyncio.timeout(20):
            seen = await read_until(stream, lambda got: "text_delta" in kinds(got))
            reply = await b.runs.CancelRun(pb.CancelRunRequest(run_id=cancelled_id))
            assert reply.status == c.RUN_STATUS_CANCELLED
            seen += await read_rest(stream)
            # Once its twin, left alone, has completed, the cancelled run would have too.
            left = await watch(b, left_id)
        assert_one_clean_log(seen, "run_cancelled")
        assert_one_clean_log(left, "run_completed")
        assert await watch(b, cancelled_id) == seen
        stored = await stored_events(engine, cancelled_id)
        assert [k for _, k, _ in stored if k in TERMINAL] == ["run_cancelled"]
        assert stored[-1][1] == "run_cancelled"
        rows = await run_rows(engine, [cancelled_id, left_id])
        assert {row.owner for row in rows.values()} == {a.node}
        assert {row.generation for row in rows.values()} == {1}


async def test_a_configured_node_name_is_refused_while_a_live_process_holds_it(
    tmp_path: Path, database: str
) -> None:
    name = f"node-{uuid.uuid4().hex[:8]}"
    settings = {"BEHEST_DATABASE_URL": database, "BEHEST_NODE_ID": name}
    async with replica(tmp_path / "first", **settings) as first:
        assert first.node == name
        status, stderr = await refused_start(tmp_path / "second", **settings)
        assert status == EXIT_ERROR, stderr
        assert f"error: node_id '{name}' is held by another live behest process" in stderr
        # The first is unharmed.
        reply = await first.runs.CreateRun(create_request("still here"))
        events = await watch(first, reply.run_id)
        assert_one_clean_log(events, "run_completed")

        first.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(15):
            assert await first.process.wait() == 0
    async with replica(tmp_path / "second", **settings) as again:
        assert again.node == name


async def test_a_second_server_on_one_sqlite_data_dir_is_refused(tmp_path: Path) -> None:
    async with replica(tmp_path) as first:
        status, stderr = await refused_start(tmp_path)
        assert status == EXIT_ERROR, stderr
        assert f"error: another behest process (pid {first.process.pid})" in stderr
        assert "SQLite has one writer" in stderr
        assert first.process.returncode is None
        reply = await first.runs.CreateRun(create_request("one writer"))
        events = await watch(first, reply.run_id)
        assert_one_clean_log(events, "run_completed")
