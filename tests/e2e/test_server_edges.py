"""Limits, deadlines, shutdown and the CLI against a real server."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from tests.support import (
    SERVER_LOGS,
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    server_process,
    start_server,
    stop_server,
)

SLOW = script({"text": " ".join(f"w{i}" for i in range(100)), "delay_ms": 20})


async def test_concurrent_run_limit_is_resource_exhausted(tmp_path: Path) -> None:
    server = await start_server(fast_settings(tmp_path, max_concurrent_runs=1))
    try:
        first = await server.runs.CreateRun(create_request(SLOW, model="script"))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await server.runs.CreateRun(create_request("one more"))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        await server.runs.CancelRun(pb.CancelRunRequest(run_id=first.run_id))
        again = await server.runs.CreateRun(create_request("room again"))
        assert again.run_id
    finally:
        await stop_server(server)


async def test_at_the_run_limit_a_repeat_of_a_creation_gets_its_run(tmp_path: Path) -> None:
    """A client retrying a CreateRun whose reply it lost is answered with its run, even when
    that run is what fills max_concurrent_runs; a new run is refused all the same."""
    server = await start_server(fast_settings(tmp_path, max_concurrent_runs=1))
    try:
        request = create_request(SLOW, model="script", client_request_id="lost-reply")
        first = await server.runs.CreateRun(request)
        for _ in range(2):
            again = await server.runs.CreateRun(request)
            assert (again.run_id, again.session_id) == (first.run_id, first.session_id)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await server.runs.CreateRun(create_request("new", client_request_id="another"))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (err.value.details() or "").startswith("max_concurrent_runs: ")
        with pytest.raises(grpc.aio.AioRpcError) as err:  # the key of another request
            await server.runs.CreateRun(create_request("other", client_request_id="lost-reply"))
        assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
        await server.runs.CancelRun(pb.CancelRunRequest(run_id=first.run_id))
    finally:
        await stop_server(server)


async def test_creates_per_minute_counts_the_runs_created_not_the_requests(
    tmp_path: Path,
) -> None:
    server = await start_server(
        fast_settings(tmp_path, creates_per_minute=5, max_concurrent_runs=1)
    )
    try:
        first = await server.runs.CreateRun(
            create_request(SLOW, model="script", client_request_id="first")
        )
        for _ in range(4):  # refused for concurrency: none of them is a creation
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await server.runs.CreateRun(create_request("one more"))
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert (err.value.details() or "").startswith(
                "max_concurrent_runs: this server has 1 active runs, its limit (1)"
            )
        await server.runs.CancelRun(pb.CancelRunRequest(run_id=first.run_id))
        events = await collect(server.runs.CreateRunStream(create_request("right after")))
        assert kind(events[-1]) == "run_completed"
        for _ in range(3):  # repeats of a creation create nothing, and count for nothing
            again = await server.runs.CreateRun(
                create_request(SLOW, model="script", client_request_id="first")
            )
            assert again.run_id == first.run_id
        for n in range(3):  # 2 runs created: 3 more fit in the minute, not a fourth
            events = await collect(server.runs.CreateRunStream(create_request(f"run {n}")))
            assert kind(events[-1]) == "run_completed"
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await server.runs.CreateRun(create_request("a sixth"))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (err.value.details() or "").startswith(
            "creates_per_minute: this tenant may create 5 runs a minute; retry in"
        )
    finally:
        await stop_server(server)


async def test_stream_limit_never_blocks_unary_calls(tmp_path: Path) -> None:
    server = await start_server(fast_settings(tmp_path, max_streams=1))
    try:
        created = await server.runs.CreateRun(create_request(SLOW, model="script"))
        watcher = server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
        await anext(aiter(watcher))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await collect(
                server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
            )
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        await server.runs.CancelRun(pb.CancelRunRequest(run_id=created.run_id))
        rest = [event async for event in watcher]
        assert kind(rest[-1]) == "run_cancelled"
    finally:
        await stop_server(server)


async def test_a_client_deadline_bounds_the_rpc_not_the_run(server: Server) -> None:
    stream = server.runs.CreateRunStream(create_request(SLOW, model="script"), timeout=0.3)
    seen = []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for event in stream:
            seen.append(event)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    rest = await collect(
        server.runs.WatchRunEvents(
            pb.WatchRunEventsRequest(run_id=seen[0].run_id, last_event_id=seen[-1].sequence)
        )
    )
    assert kind(rest[-1]) == "run_completed"


async def test_sigterm_leaves_runs_resumable_and_the_next_start_finishes_them(
    tmp_path: Path,
) -> None:
    async with server_process(tmp_path) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            # The repeated model call is the run's second call: the script plays step 2.
            steps = script(
                {"text": " ".join(f"w{i}" for i in range(100)), "delay_ms": 20},
                {"text": "answer after the restart"},
            )
            created = await stub.CreateRun(create_request(steps, model="script"))
            watcher = stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
            async for event in watcher:
                if kind(event) == "text_delta":
                    break
            process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(15):
                    assert await process.wait() == os.EX_OK
            except TimeoutError:
                log = "\n".join(SERVER_LOGS.get(process.pid, []))
                raise AssertionError(f"not stopped within 15 s after SIGTERM:\n{log}") from None
    async with server_process(tmp_path) as (_, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            events = await collect(
                stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
            )
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert kind(events[-1]) == "run_completed"
    starts = [i for i, e in enumerate(events) if kind(e) == "model_started"]
    assert [events[i].model_started.iteration for i in starts] == [1, 1]
    text = "".join(e.text_delta.delta for e in events[starts[-1] :] if kind(e) == "text_delta")
    assert text == "answer after the restart"


async def test_cli_run_streams_the_answer_and_prints_the_run_id(server: Server) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "behest",
        "run",
        "hello from the command line",
        "--server",
        server.address,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1"},
    )
    out, err = await process.communicate()
    assert process.returncode == os.EX_OK, err.decode()
    assert "hello from the command line" in out.decode()
    assert "run " in err.decode()
    run_id = err.decode().split("run ", 1)[1].split()[0]
    fetched = await server.runs.GetRun(pb.GetRunRequest(run_id=run_id))
    assert fetched.run.status == c.RUN_STATUS_COMPLETED


async def test_cli_watch_resumes_after_a_sequence(server: Server) -> None:
    events = await collect(server.runs.CreateRunStream(create_request("watch this later")))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "behest",
        "watch",
        events[0].run_id,
        "--after",
        "4",
        "--server",
        server.address,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == os.EX_OK, err.decode()
    shown = out.decode()
    assert "later" in shown
    assert "watch " not in shown  # deltas 1..4 (RunStarted … first word) are not replayed


async def test_the_server_runs_on_uvloop_unless_switched_off(tmp_path: Path) -> None:
    for setting, expected in (("true", "uvloop"), ("false", "asyncio")):
        serving: dict[str, object] = {}
        async with server_process(tmp_path / setting, serving, BEHEST_USE_UVLOOP=setting) as (
            _,
            address,
        ):
            async with grpc.aio.insecure_channel(address) as channel:
                stub = rpc.RunServiceStub(channel)
                events = await collect(stub.CreateRunStream(create_request("on which loop")))
        assert serving["event_loop"] == expected
        assert kind(events[-1]) == "run_completed"
