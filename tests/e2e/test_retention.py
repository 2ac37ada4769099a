"""Retention through a real server: finished runs pruned in the background, runs that wait or
run kept, and a SQLite file that stops growing under a steady load."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest.runs.retention import cutoff, prune_from_cli
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    start_server,
    stop_server,
)

# Runs finished more than ~0.09 s ago are pruned, looked for 20 times a second.
RETENTION = {"retention_days": 1e-6, "retention_interval_s": 0.05}
DEADLINE_S = 20.0
CALC = {"name": "calculator", "arguments": {"expression": "6*7"}}


@pytest.fixture
async def pruning(tmp_path: Path) -> AsyncIterator[Server]:
    server = await start_server(fast_settings(tmp_path, **RETENTION))
    try:
        yield server
    finally:
        await stop_server(server)


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll `check` until it holds; fail after DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while not await check():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S} s: {what}"
        await asyncio.sleep(0.02)


async def exists(server: Server, run_id: str) -> bool:
    try:
        await server.runs.GetRun(pb.GetRunRequest(run_id=run_id))
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
        return False
    return True


async def _gone(server: Server, run_id: str) -> bool:
    return not await exists(server, run_id)


async def first_of(stream: AsyncIterator[pb.AgentEvent], wanted: str) -> pb.AgentEvent:
    async for event in stream:
        if kind(event) == wanted:
            return event
    raise AssertionError(f"the stream ended without {wanted}")


async def test_finished_runs_are_pruned_and_waiting_or_running_ones_stay(
    pruning: Server,
) -> None:
    ask = create_request(script({"tool_calls": [CALC]}), model="script")
    ask.approval_required_tools.append("calculator")
    waiting = (await first_of(pruning.runs.CreateRunStream(ask), "approval_requested")).run_id
    slow = create_request(script({"text": "slow", "delay_ms": 60_000}), model="script")
    running = (await first_of(pruning.runs.CreateRunStream(slow), "run_started")).run_id
    # Created after the others: once it is pruned, they were older than the cut as well.
    events = await collect(pruning.runs.CreateRunStream(create_request("finished")))
    finished = events[0].run_id
    assert kind(events[-1]) == "run_completed"

    await eventually(lambda: _gone(pruning, finished), f"run {finished} pruned")

    for run_id, status in [
        (waiting, c.RUN_STATUS_WAITING_FOR_INPUT),
        (running, c.RUN_STATUS_CALLING_MODEL),
    ]:
        run = (await pruning.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
        assert run.status == status
        stored = await pruning.app.store.read_events(run_id, after=0, limit=100)
        assert [e.sequence for e in stored][:2] == [1, 2]
        assert await pruning.app.store.run_messages(run_id)
    calls = await pruning.runs.ListPendingCalls(pb.ListPendingCallsRequest(run_id=waiting))
    assert [p.call.name for p in calls.calls] == ["calculator"]
    assert pruning.app.retention.pruned >= 1


# --- the database file under a steady load ------------------------------------------------

ROUNDS, RUNS_PER_ROUND = 8, 60
# ~4.8 KB per run: in its input (row, message, RunStarted) and its answer (deltas, message).
TEXT = "steady load " * 400
STEADY = script({"tool_calls": [CALC]}, {"text": TEXT, "deltas": 8})


# A WAL that holds no frame: none, or its header alone (a writer that began a new WAL after
# the checkpoint's truncation and has not written a frame yet).
WAL_HEADER_BYTES = 32


def checkpoint(path: Path) -> bool:
    """One WAL checkpoint (TRUNCATE) through a connection of our own; False if busy."""
    conn = sqlite3.connect(path, timeout=1)
    try:
        return not conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    finally:
        conn.close()


def sizes_of(path: Path) -> tuple[int, int]:
    """The sizes of the main file and of its WAL (0: none)."""
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size, wal.stat().st_size if wal.exists() else 0


async def checkpointed_size(path: Path) -> tuple[int, int]:
    """The main file's size after a WAL checkpoint (TRUNCATE), and the WAL's left over."""
    # Busy while the server reads or writes: tried again.
    await eventually(lambda: asyncio.to_thread(checkpoint, path), "a WAL checkpoint")
    return sizes_of(path)


async def one_round(server: Server) -> None:
    """RUNS_PER_ROUND runs at once, each followed to its end; then the server's retention
    prunes them (its own rounds are an hour apart: each round of load is pruned whole, so
    every round holds as many runs at its peak)."""
    requests = [create_request(STEADY, model="script") for _ in range(RUNS_PER_ROUND)]
    ended = await asyncio.gather(*(collect(server.runs.CreateRunStream(r)) for r in requests))
    assert {kind(events[-1]) for events in ended} == {"run_completed"}
    pruned = 0

    async def all_pruned() -> bool:
        nonlocal pruned
        pruned += await server.app.retention.prune_once()
        return pruned == RUNS_PER_ROUND

    await eventually(all_pruned, f"the round's {RUNS_PER_ROUND} runs pruned")


async def test_the_sqlite_file_stops_growing_under_a_steady_load(tmp_path: Path) -> None:
    settings = fast_settings(tmp_path, retention_days=1e-6, retention_interval_s=3600)
    server = await start_server(settings)
    try:
        path = settings.sqlite_path
        empty, _ = await checkpointed_size(path)
        sizes = []
        for _ in range(ROUNDS):
            await one_round(server)
            size, wal = await checkpointed_size(path)
            sizes.append(size)
            assert wal <= WAL_HEADER_BYTES  # no frame left outside the main file
        listed = await server.runs.ListRuns(pb.ListRunsRequest())
    finally:
        await stop_server(server)
    print(f"empty {empty} B; after each round of {RUNS_PER_ROUND} runs: {sizes}")
    assert not listed.runs
    # A round's rows take this much room (unpruned, 8 rounds would take 8 times as much);
    # later rounds reuse the pages earlier ones freed. The first two settle the free list.
    one_round_bytes = sizes[0] - empty
    assert one_round_bytes > RUNS_PER_ROUND * len(TEXT), (empty, sizes)
    assert max(sizes[2:]) <= max(sizes[:2]) + one_round_bytes // 8, (empty, sizes)
    assert sizes[-1] <= sizes[0] + one_round_bytes // 4, (empty, sizes)


# --- behest runs prune (prune_from_cli) ---------------------------------------------------


async def test_prune_from_cli_counts_then_prunes_the_servers_finished_runs(
    tmp_path: Path,
) -> None:
    settings = fast_settings(tmp_path)  # retention off: only the command prunes
    server = await start_server(settings)
    try:
        assert not server.app.retention.enabled
        finished = [
            (await collect(server.runs.CreateRunStream(create_request(f"run {n}"))))[0].run_id
            for n in range(3)
        ]
        ask = create_request(script({"tool_calls": [CALC]}), model="script")
        ask.approval_required_tools.append("calculator")
        waiting = (await first_of(server.runs.CreateRunStream(ask), "approval_requested")).run_id
    finally:
        await stop_server(server)

    assert await prune_from_cli(settings, older_than_days=1, dry_run=True) == 0
    assert await prune_from_cli(settings, older_than_days=0, dry_run=True) == 3
    assert await prune_from_cli(settings, older_than_days=0, dry_run=False) == 3
    assert await prune_from_cli(settings, older_than_days=0, dry_run=True) == 0

    server = await start_server(settings)
    try:
        assert not [run_id for run_id in finished if await exists(server, run_id)]
        assert await exists(server, waiting)
    finally:
        await stop_server(server)


@pytest.mark.parametrize("days", [-1.0, float("nan"), float("inf")])
async def test_prune_from_cli_refuses_a_bad_age(tmp_path: Path, days: float) -> None:
    with pytest.raises(ValueError, match="--older-than"):
        await prune_from_cli(fast_settings(tmp_path), older_than_days=days, dry_run=True)


def test_a_cut_further_back_than_time_goes_prunes_nothing() -> None:
    assert cutoff(1e12) == datetime.min.replace(tzinfo=UTC)
    assert cutoff(1.5, datetime(2025, 1, 2, 12, tzinfo=UTC)) == datetime(2025, 1, 1, tzinfo=UTC)
