"""Commits that fail, or that land while their caller sees an error, leave no gap or duplicate.

A fault hook wraps the store's `apply_batch` (the one write path of the event log): every few
calls it either commits and then raises, as a connection lost after COMMIT does, or raises
before anything is written. Concurrent runs with watchers go on through it; afterwards every
run's log is 1..N with one terminal event, every watcher saw exactly the log, and:

- a commit that landed is not reported as failed: every run completes, every CreateRun returns
  a run that goes on (even one whose creation's outcome was lost);
- a commit that did not land fails only what it carried: runs may fail, naming the storage
  problem (FAILURE_CODE_STORAGE; their streams may end UNAVAILABLE saying so, and the client
  comes back), and a refused CreateRun left no run behind ("no run was created").
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from tests.fault.history import TERMINAL, History, events_of, kind, read_stored
from tests.support import Server, create_request, fast_settings, script, start_server, stop_server

RUNS = 40
SEED = 4242
STEPS = script(
    {"text": "thinking about it", "tool_calls": [{"name": "current_time"}]},
    {
        "text": "and once more",
        "tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}],
    },
    {"text": "the answer is 42"},
)


class Faults:
    """Every `every`-th apply_batch fails: after committing (`landed`) or before."""

    def __init__(self, real: Callable[..., Awaitable[Any]], *, every: int, landed: bool) -> None:
        self._real = real
        self._calls = itertools.count(1)
        self._every = every
        self._landed = landed
        self.injected = 0

    async def apply_batch(self, batch: Any) -> Any:
        fail = next(self._calls) % self._every == 0
        if fail and not self._landed:
            self.injected += 1
            raise ConnectionResetError("planted fault: the connection broke before COMMIT")
        result = await self._real(batch)
        if fail:
            self.injected += 1
            raise ConnectionResetError("planted fault: the connection broke after COMMIT")
        return result


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    # Text deltas are not joined, so there are many small commits to hit.
    running = await start_server(fast_settings(tmp_path, coalesce_text_deltas=False))
    try:
        yield running
    finally:
        await stop_server(running)


async def follow(server: Server, history: History, name: str, rng: random.Random) -> str | None:
    """Create a run and follow it to its end, hanging up and coming back now and then.

    Returns the run id, or None if CreateRunStream was refused before its first event.
    """
    watcher = history.watcher(name)
    watcher.connect(0)
    call = server.runs.CreateRunStream(create_request(STEPS, model="script"))
    try:
        while True:
            hang_up_after = rng.randint(2, 12)
            received = 0
            try:
                async for event in events_of(call):
                    watcher.receive(event)
                    received += 1
                    if kind(event) in TERMINAL or received == hang_up_after:
                        break
            except grpc.aio.AioRpcError as err:
                if not watcher.run_id or not stalled(err):
                    raise
                # The run's step was not stored and the next try failed too: the stream
                # says so (UNAVAILABLE), and the client comes back, as for any UNAVAILABLE.
                watcher.close_with(err, expected=True)
                watcher.connect()
                call = server.runs.WatchRunEvents(
                    pb.WatchRunEventsRequest(
                        run_id=watcher.run_id, last_event_id=watcher.last_sequence
                    )
                )
                continue
            if watcher.done:
                call.cancel()
                watcher.close("client")
                return watcher.run_id
            if received == hang_up_after:
                call.cancel()
                watcher.close("client")
            else:
                watcher.close("eof")
                return watcher.run_id
            watcher.connect()
            call = server.runs.WatchRunEvents(
                pb.WatchRunEventsRequest(run_id=watcher.run_id, last_event_id=watcher.last_sequence)
            )
    except grpc.aio.AioRpcError as err:
        if watcher.run_id:
            raise
        history.watchers.remove(watcher)
        assert err.code() == grpc.StatusCode.UNAVAILABLE, err
        assert "no run was created: the database could not store it" in (err.details() or "")
        return None


def stalled(err: grpc.aio.AioRpcError) -> bool:
    """A stream that ended because its run's step could not be stored (runs/stream.py)."""
    details = err.details() or ""
    return err.code() == grpc.StatusCode.UNAVAILABLE and "a step was not stored" in details


async def run_with_faults(server: Server, faults: Faults) -> tuple[History, list[str], int]:
    store = server.app.store
    store.apply_batch = faults.apply_batch  # type: ignore[method-assign]
    history = History("commit faults")
    rng = random.Random(SEED)
    try:
        results = await asyncio.gather(
            *(follow(server, history, f"w{i}", random.Random(rng.random())) for i in range(RUNS))
        )
    finally:
        del store.apply_batch
    run_ids = [run_id for run_id in results if run_id]
    refused = len(results) - len(run_ids)
    logs, records = await read_stored(server.runs, run_ids)
    history.check(logs, records)
    ends = [kind(logs[run_id][-1]) for run_id in run_ids]
    return history, ends, refused


async def test_commits_that_land_while_reporting_an_error_stand(server: Server) -> None:
    faults = Faults(server.app.store.apply_batch, every=2, landed=True)
    history, ends, refused = await run_with_faults(server, faults)
    assert faults.injected >= 5
    assert refused == 0
    assert ends == ["run_completed"] * RUNS
    assert sum(w.reconnections for w in history.watchers) >= RUNS
    listed = await server.runs.ListRuns(pb.ListRunsRequest())
    assert len(listed.runs) == RUNS


async def test_commits_that_fail_fail_only_what_they_carried(server: Server) -> None:
    faults = Faults(server.app.store.apply_batch, every=4, landed=False)
    history, ends, refused = await run_with_faults(server, faults)
    assert faults.injected >= 5
    assert set(ends) <= {"run_completed", "run_failed"}
    failed = [w.events[-1] for w in history.watchers if kind(w.events[-1]) == "run_failed"]
    unnamed = [e.run_failed for e in failed if "could not be stored" not in e.run_failed.error]
    assert unnamed == []
    assert [e.run_failed for e in failed if e.run_failed.code != pb.FAILURE_CODE_STORAGE] == []
    listed = await server.runs.ListRuns(pb.ListRunsRequest())
    assert len(listed.runs) == RUNS - refused


async def test_a_create_run_abandoned_by_its_caller_mid_commit_still_starts_its_run(
    server: Server,
) -> None:
    store = server.app.store
    real = store.apply_batch
    entered, release = asyncio.Event(), asyncio.Event()

    async def held(batch: Any) -> Any:
        entered.set()
        await release.wait()
        return await real(batch)

    store.apply_batch = held  # type: ignore[method-assign]
    try:
        call = server.runs.CreateRun(create_request("left behind", model="echo"))
        await entered.wait()  # the creation is committing
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    finally:
        release.set()
        del store.apply_batch
    await server.app.event_log.flush()
    listed = await server.runs.ListRuns(pb.ListRunsRequest())
    (run,) = listed.runs
    events = [e async for e in server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run.id))]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert kind(events[-1]) == "run_completed"
