"""One stream per session (issue 28): WatchSessionEvents follows every run of a session, the
runs started after the watch began included, each event once and in order; a watcher that
comes back with its cursor (the last event's run and sequence) misses and repeats nothing,
also after kill -9 of the server and through another replica."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest._proto.agent.v1 import session_pb2 as spb
from behest._proto.agent.v1 import session_pb2_grpc as session_rpc
from behest.client import BehestClient, Event
from tests.stored import fresh_database
from tests.support import (
    Server,
    behest,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    server_process,
    start_server,
    stop_server,
)
from tests.web_support import ALICE, BOB, bearer, inspector_settings

Key = tuple[str, int]
TERMINAL = {"run_completed", "run_failed", "run_cancelled"}


def watch(
    channel: grpc.aio.Channel, session_id: str, after: Key = ("", 0), **call: object
) -> grpc.aio.UnaryStreamCall[spb.WatchSessionEventsRequest, pb.AgentEvent]:
    stub = session_rpc.SessionServiceStub(channel)
    request = spb.WatchSessionEventsRequest(
        session_id=session_id, after_run_id=after[0], after_sequence=after[1]
    )
    return stub.WatchSessionEvents(request, **call)  # type: ignore[arg-type]


async def until_ended(events: AsyncIterator[pb.AgentEvent], runs: int) -> list[pb.AgentEvent]:
    """Read until `runs` runs have ended (the stream itself does not end)."""
    seen: list[pb.AgentEvent] = []
    async with asyncio.timeout(30):
        async for event in events:
            seen.append(event)
            if sum(kind(e) in TERMINAL for e in seen) == runs:
                return seen
    raise AssertionError("the session's stream ended")


async def whole_logs(runs: rpc.RunServiceStub, run_ids: list[str]) -> list[pb.AgentEvent]:
    """The runs' logs one after another, as WatchRunEvents gives each."""
    logs: list[pb.AgentEvent] = []
    for run_id in run_ids:
        logs += await collect(runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))
    return logs


def keys(events: list[pb.AgentEvent]) -> list[Key]:
    return [(e.run_id, e.sequence) for e in events]


def turn(session_id: str, text: str, **step: object) -> pb.CreateRunRequest:
    return create_request(script({"text": text, **step}), model="script", session_id=session_id)


async def test_a_session_is_watched_whole_across_runs_started_later(served: Server) -> None:
    first = await served.runs.CreateRun(create_request(script({"text": "one"}), model="script"))
    session_id = first.session_id
    await collect(served.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=first.run_id)))
    stream = watch(served.channel, session_id)
    reader = asyncio.create_task(until_ended(stream, 3))
    run_ids = [first.run_id]
    for text in ("two", "three"):
        created = await served.runs.CreateRun(turn(session_id, text, deltas=5, delay_ms=5))
        run_ids.append(created.run_id)
        await collect(served.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id)))
    seen = await reader
    stream.cancel()
    assert keys(seen) == keys(await whole_logs(served.runs, run_ids))
    assert [e.run_id for e in seen if kind(e) == "run_started"] == run_ids


async def test_a_watcher_resumes_from_its_cursor_missing_and_repeating_nothing(
    served: Server,
) -> None:
    first = await served.runs.CreateRun(create_request(script({"text": "a b c"}), model="script"))
    session_id = first.session_id
    await collect(served.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=first.run_id)))
    created = await served.runs.CreateRun(turn(session_id, "d e f"))
    await collect(served.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id)))
    logs = await whole_logs(served.runs, [first.run_id, created.run_id])
    whole = keys(logs)
    ends = [i for i, e in enumerate(logs) if kind(e) in TERMINAL]
    for cut in (1, ends[0], ends[0] + 1, len(whole) - 1):  # the first run's end included
        stream = watch(served.channel, session_id, after=whole[cut - 1])
        rest = await until_ended(stream, sum(1 for i in ends if i >= cut))
        stream.cancel()
        assert keys(rest) == whole[cut:]


async def test_bad_cursors_and_sessions_get_clear_statuses(served: Server) -> None:
    first = await served.runs.CreateRun(create_request(script({"text": "x"}), model="script"))
    other = await served.runs.CreateRun(create_request(script({"text": "y"}), model="script"))
    for run_id in (first.run_id, other.run_id):
        await collect(served.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))
    cases = [
        ((first.session_id, "", 3), grpc.StatusCode.INVALID_ARGUMENT, "after_sequence needs"),
        ((first.session_id, other.run_id, 1), grpc.StatusCode.INVALID_ARGUMENT, "not a run of"),
        ((first.session_id, first.run_id, 999), grpc.StatusCode.OUT_OF_RANGE, "beyond"),
        ((first.session_id, "nope", 1), grpc.StatusCode.INVALID_ARGUMENT, "after_run_id"),
        ((str(uuid.uuid4()), "", 0), grpc.StatusCode.NOT_FOUND, "not found"),
        (("not-a-uuid", "", 0), grpc.StatusCode.INVALID_ARGUMENT, "session_id"),
    ]
    for (session_id, run_id, sequence), code, words in cases:
        stream = watch(served.channel, session_id, after=(run_id, sequence))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async with asyncio.timeout(10):
                await stream.read()
        assert refused.value.code() == code, (session_id, run_id, sequence)
        assert words in (refused.value.details() or "")


async def test_another_tenants_session_is_not_found(tmp_path: Path) -> None:
    server = await start_server(inspector_settings(tmp_path))
    try:
        created = await server.runs.CreateRun(
            create_request(script({"text": "mine"}), model="script"), metadata=bearer(ALICE)
        )
        stream = watch(server.channel, created.session_id, metadata=bearer(BOB))
        with pytest.raises(grpc.aio.AioRpcError) as hidden:
            async with asyncio.timeout(10):
                await stream.read()
        assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        await stop_server(server)


async def test_a_watcher_resumes_after_kill_9_of_the_server(tmp_path: Path) -> None:
    slow = script({"deltas": 200, "delay_ms": 10}, {"text": "after the restart"})
    async with server_process(tmp_path) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            runs = rpc.RunServiceStub(channel)
            first = await runs.CreateRun(create_request(script({"text": "one"}), model="script"))
            session_id = first.session_id
            await collect(runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=first.run_id)))
            second = await runs.CreateRun(
                create_request(slow, model="script", session_id=session_id)
            )
            head: list[pb.AgentEvent] = []
            async for event in watch(channel, session_id):
                head.append(event)
                if event.run_id == second.run_id and kind(event) == "text_delta":
                    break
            process.send_signal(signal.SIGKILL)
            await process.wait()
    async with server_process(tmp_path) as (_, address):
        async with grpc.aio.insecure_channel(address) as channel:
            runs = rpc.RunServiceStub(channel)
            stream = watch(channel, session_id, after=keys(head)[-1])
            rest = await until_ended(stream, 1)  # the second run, taken up again
            third = await runs.CreateRun(turn(session_id, "three"))
            rest += await until_ended(stream, 1)
            stream.cancel()
            whole = await whole_logs(runs, [first.run_id, second.run_id, third.run_id])
    assert keys(head + rest) == keys(whole)


async def test_a_session_is_watched_through_another_replica(
    tmp_path: Path, postgres_url: str
) -> None:
    async with AsyncExitStack() as stack:
        database = await stack.enter_async_context(fresh_database(postgres_url, "behest_sess"))
        servers: list[Server] = []
        for node in ("a", "b"):
            settings = fast_settings(tmp_path / node, database_url=database, node_id=node)
            servers.append(await start_server(settings))
            stack.push_async_callback(stop_server, servers[-1])
        a, b = servers
        first = await a.runs.CreateRun(create_request(script({"text": "one"}), model="script"))
        session_id = first.session_id
        stream = watch(b.channel, session_id)
        reader = asyncio.create_task(until_ended(stream, 3))
        run_ids = [first.run_id]
        for text in ("two", "three"):  # on the first replica, watched on the second
            await collect(a.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_ids[-1])))
            run_ids.append((await a.runs.CreateRun(turn(session_id, text))).run_id)
        seen = await reader
        stream.cancel()
        assert keys(seen) == keys(await whole_logs(a.runs, run_ids))


async def test_the_python_client_and_the_cli_follow_a_session(server: Server) -> None:
    first = await server.runs.CreateRun(create_request(script({"text": "one"}), model="script"))
    session_id = first.session_id
    async with BehestClient(server.address) as client:

        async def two_runs() -> list[Event]:
            seen: list[Event] = []
            async for event in client.watch_session(session_id):
                seen.append(event)
                if sum(e.terminal for e in seen) == 2:
                    return seen
            raise AssertionError("the session's stream ended")

        reader = asyncio.create_task(two_runs())
        await collect(server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=first.run_id)))
        second = await server.runs.CreateRun(turn(session_id, "two"))
        async with asyncio.timeout(30):
            seen = await reader
        whole = await whole_logs(server.runs, [first.run_id, second.run_id])
        assert [(e.run_id, e.sequence) for e in seen] == keys(whole)
        after = f"{first.run_id}:{whole[0].sequence}"
        printed = await behest(
            "sessions",
            "watch",
            session_id,
            "--after",
            after,
            "--runs",
            "2",
            "--server",
            server.address,
        )
    assert printed.code == 0, printed.err
    completed = "✓ completed (stop, 1 iteration)"
    assert printed.out.split("\n")[:4] == ["one", completed, "two", completed]
    assert f"run {second.run_id}  session {session_id}" in printed.err


async def test_a_cursor_of_a_run_not_started_yet_is_refused(served: Server) -> None:
    busy = await served.runs.CreateRun(
        create_request(script({"deltas": 2000, "delay_ms": 10}), model="script")
    )
    later = create_request("later", session_id=busy.session_id)
    later.on_busy = pb.BUSY_POLICY_ENQUEUE
    queued = await served.runs.CreateRun(later)
    stream = watch(served.channel, busy.session_id, after=(queued.run_id, 0))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        async with asyncio.timeout(10):
            await stream.read()
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "has not started" in (refused.value.details() or "")
    await served.runs.CancelRun(pb.CancelRunRequest(run_id=queued.run_id))
    await served.runs.CancelRun(pb.CancelRunRequest(run_id=busy.run_id))
