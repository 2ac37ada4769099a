"""Runs interrupted by a shutdown are resumed from their snapshot (SEMANTICS §7, issue 5)."""

from __future__ import annotations

import asyncio
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest.app import App
from behest.domain.runs import RunRequest
from behest.errors import FailedPrecondition
from behest.store.sql.store import SqlStore
from behest.store.writes import NewRun
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    start_server_with_plugins,
    stop_server,
)


def tool_step(name: str, seconds: float) -> dict[str, object]:
    return {"tool_calls": [{"name": name, "arguments": {"seconds": seconds}}]}


async def interrupt_during_tool(server: Server, steps: str) -> str:
    """Start a run, wait until its tool executes, and stop the server under it."""
    created = await server.runs.CreateRun(create_request(steps, model="script"))
    watcher = server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
    async for event in watcher:
        if kind(event) == "tool_execution_started":
            break
    watcher.cancel()
    await stop_server(server)
    return created.run_id


async def events_of(server: Server, run_id: str) -> list[pb.AgentEvent]:
    return await collect(server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))


async def test_an_idempotent_tool_cut_by_a_shutdown_runs_again(tmp_path: Path) -> None:
    steps = script(tool_step("slow_idempotent", 5), {"text": "all done"})
    first = await start_server_with_plugins(fast_settings(tmp_path))
    run_id = await interrupt_during_tool(first, steps)
    second = await start_server_with_plugins(fast_settings(tmp_path))
    try:
        events = await events_of(second, run_id)
    finally:
        await stop_server(second)
    kinds = [kind(e) for e in events]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert kinds.count("tool_execution_started") == 2  # the interrupted call, then its re-run
    assert kinds.count("tool_message_committed") == 1
    assert kind(events[-1]) == "run_completed"


async def test_an_interrupted_run_waits_in_list_snapshots_until_abandoned(tmp_path: Path) -> None:
    steps = script(tool_step("slow_unsafe", 5), {"text": "never"})
    first = await start_server_with_plugins(fast_settings(tmp_path))
    run_id = await interrupt_during_tool(first, steps)
    second = await start_server_with_plugins(fast_settings(tmp_path, resume_runs=False))
    try:
        listed = await second.snapshots.ListSnapshots(pb.ListSnapshotsRequest())
        assert [s.run_id for s in listed.snapshots] == [run_id]
        assert listed.snapshots[0].status == c.RUN_STATUS_WAITING_FOR_TOOLS
        await second.snapshots.DeleteSnapshot(pb.DeleteSnapshotRequest(run_id=run_id))
        events = await events_of(second, run_id)
        assert kind(events[-1]) == "run_failed"
        assert "abandoned" in events[-1].run_failed.error
        assert events[-1].run_failed.code == pb.FAILURE_CODE_ABANDONED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await second.snapshots.DeleteSnapshot(pb.DeleteSnapshotRequest(run_id=run_id))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        await stop_server(second)


async def test_an_interrupted_run_can_be_cancelled(tmp_path: Path) -> None:
    steps = script(tool_step("slow_unsafe", 5), {"text": "never"})
    first = await start_server_with_plugins(fast_settings(tmp_path))
    run_id = await interrupt_during_tool(first, steps)
    second = await start_server_with_plugins(fast_settings(tmp_path, resume_runs=False))
    try:
        await second.runs.CancelRun(pb.CancelRunRequest(run_id=run_id, reason="stale"))
        events = await events_of(second, run_id)
        assert kind(events[-1]) == "run_cancelled"
        cancelled = events[-1].run_cancelled
        assert (cancelled.cancelled_by, cancelled.reason, cancelled.source) == (
            "anonymous",
            "stale",
            pb.CANCEL_SOURCE_CALLER,
        )
        listed = await second.snapshots.ListSnapshots(pb.ListSnapshotsRequest())
        assert list(listed.snapshots) == []
    finally:
        await stop_server(second)


async def test_a_server_takes_up_at_once_the_runs_a_dead_process_held_on_its_data_dir(
    tmp_path: Path,
) -> None:
    # SQLite has one writer, and its database is locked while served: the next server on it
    # knows whoever claimed a run last is gone, so it does not wait for the claim to lapse.
    steps = script(tool_step("slow_idempotent", 5), {"text": "adopted"})
    first = await start_server_with_plugins(fast_settings(tmp_path))
    run_id = await interrupt_during_tool(first, steps)
    # As a process killed mid-run leaves it: claimed by its node for another minute.
    store = SqlStore(fast_settings(tmp_path).effective_database_url)
    await store.start()
    try:
        until = datetime.now(UTC) + timedelta(seconds=60)
        now = datetime.now(UTC)
        assert await store.claim_run(run_id, owner="dead", now=now, lease_until=until, force=True)
    finally:
        await store.close()
    second = await start_server_with_plugins(fast_settings(tmp_path, run_lease_s=60))
    try:
        async with asyncio.timeout(10):
            events = await events_of(second, run_id)
        stored = await second.app.store.get_run(run_id)
    finally:
        await stop_server(second)
    assert kind(events[-1]) == "run_completed"
    assert stored is not None and stored.owner == second.app.node.name


async def test_a_second_server_on_a_served_data_dir_is_refused(tmp_path: Path) -> None:
    first = await start_server_with_plugins(fast_settings(tmp_path))
    try:
        second = App(fast_settings(tmp_path))
        with pytest.raises(FailedPrecondition, match=rf"pid {os.getpid()}\b.*one writer"):
            await second.start()
        await second.stop(0)
        # The first one is untouched by the attempt.
        created = await first.runs.CreateRun(create_request("still here"))
        events = await events_of(first, created.run_id)
        assert kind(events[-1]) == "run_completed"
    finally:
        await stop_server(first)
    third = await start_server_with_plugins(fast_settings(tmp_path))  # free once it stopped
    await stop_server(third)


async def test_lease_keeping_never_takes_over_this_nodes_own_runs(tmp_path: Path) -> None:
    # A run of this node that has no task yet is one whose creation just committed: the
    # periodic adoption must leave it to its creator (taking it would run it twice).
    server = await start_server_with_plugins(
        fast_settings(tmp_path, node_id="node-x", run_lease_s=0.3)
    )
    try:
        store, leases = server.app.store, server.app.executor.leases
        lapsed = datetime.now(UTC) - timedelta(seconds=1)
        run_id = str(uuid.uuid4())
        # Created the way CreateRun does, but with no first step and no task to run it.
        (created,) = await store.apply_batch(
            [
                NewRun(
                    request=RunRequest(
                        session_id=None, provider="local", model="echo", input="mine"
                    ),
                    run_id=run_id,
                    tenant="default",
                    now=datetime.now(UTC),
                    traceparent="",
                    owner="node-x",
                    lease_until=lapsed,
                    first_step=lambda run, position: [],
                )
            ]
        )
        assert not isinstance(created, BaseException) and created is not None
        first = await leases.next_round()
        assert await leases.next_round() > first  # two whole rounds of renewal and adoption
        stored = await store.get_run(run_id)
        assert stored is not None and stored.lease_expires_at is not None
        assert stored.lease_expires_at > datetime.now(UTC)  # renewed: the keeper did run
        assert stored.owner == "node-x"
        assert await store.last_sequence(run_id) == 0  # but never started a second time
        run = await server.runs.GetRun(pb.GetRunRequest(run_id=run_id))
        assert run.run.status == c.RUN_STATUS_SESSION_LOADED
    finally:
        await stop_server(server)
