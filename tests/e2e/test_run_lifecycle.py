"""Creating, cancelling, listing runs; idempotency; sessions (SEMANTICS §1, §4, §5)."""

from __future__ import annotations

import asyncio
import time
import uuid

import grpc
import pytest

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from tests.support import Server, collect, create_request, kind, script

SLOW = script({"text": " ".join(f"w{i}" for i in range(200)), "delay_ms": 20})


async def wait_for_terminal(server: Server, run_id: str) -> list[pb.AgentEvent]:
    return await collect(server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))


async def test_cancel_mid_stream_ends_the_run_with_run_cancelled_promptly(server: Server) -> None:
    stream = server.runs.CreateRunStream(create_request(SLOW, model="script"))
    seen = []
    async for event in stream:
        seen.append(event)
        if kind(event) == "text_delta":
            break
    began = time.monotonic()
    await server.runs.CancelRun(pb.CancelRunRequest(run_id=seen[0].run_id))
    rest = [event async for event in stream]
    elapsed = time.monotonic() - began
    assert kind(rest[-1]) == "run_cancelled"
    assert elapsed < 1.0
    events = seen + rest
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    run = await server.runs.GetRun(pb.GetRunRequest(run_id=seen[0].run_id))
    assert run.run.status == c.RUN_STATUS_CANCELLED


async def test_cancel_of_a_finished_run_is_failed_precondition(server: Server) -> None:
    created = await server.runs.CreateRun(create_request("done quickly"))
    await wait_for_terminal(server, created.run_id)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.runs.CancelRun(pb.CancelRunRequest(run_id=created.run_id))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_cancel_of_an_unknown_run_is_not_found(server: Server) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.runs.CancelRun(pb.CancelRunRequest(run_id=str(uuid.uuid4())))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_same_client_request_id_gives_the_same_run(server: Server) -> None:
    key = str(uuid.uuid4())
    first = await server.runs.CreateRun(create_request("idempotent", client_request_id=key))
    second = await server.runs.CreateRun(create_request("idempotent", client_request_id=key))
    assert (first.run_id, first.session_id) == (second.run_id, second.session_id)
    listed = await server.runs.ListRuns(pb.ListRunsRequest(session_id=first.session_id))
    assert [r.id for r in listed.runs] == [first.run_id]


async def test_same_client_request_id_with_another_request_is_already_exists(
    server: Server,
) -> None:
    key = str(uuid.uuid4())
    first = await server.runs.CreateRun(create_request("original", client_request_id=key))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.runs.CreateRun(create_request("different", client_request_id=key))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert first.run_id in (err.value.details() or "")


async def test_create_run_stream_with_a_known_key_streams_that_run_from_one(
    server: Server,
) -> None:
    key = str(uuid.uuid4())
    created = await server.runs.CreateRun(create_request("stream me later", client_request_id=key))
    events = await collect(
        server.runs.CreateRunStream(create_request("stream me later", client_request_id=key))
    )
    assert events[0].sequence == 1
    assert {e.run_id for e in events} == {created.run_id}
    assert kind(events[-1]) == "run_completed"


async def test_identical_requests_racing_make_one_run(server: Server) -> None:
    key = str(uuid.uuid4())
    request = create_request("race", client_request_id=key)
    results = await asyncio.gather(*(server.runs.CreateRun(request) for _ in range(5)))
    assert len({r.run_id for r in results}) == 1


async def test_a_busy_session_rejects_a_second_run_naming_the_active_one(server: Server) -> None:
    first = await server.runs.CreateRun(create_request(SLOW, model="script"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.runs.CreateRun(create_request("me too", session_id=first.session_id))
    assert err.value.code() == grpc.StatusCode.ABORTED
    assert first.run_id in (err.value.details() or "")
    await server.runs.CancelRun(pb.CancelRunRequest(run_id=first.run_id))


async def test_a_second_run_continues_the_session_transcript(server: Server) -> None:
    first = await server.runs.CreateRun(create_request("first turn"))
    await wait_for_terminal(server, first.run_id)
    events = await collect(
        server.runs.CreateRunStream(create_request("second turn", session_id=first.session_id))
    )
    built = next(e for e in events if kind(e) == "context_built")
    assert built.context_built.message_count == 3  # user, assistant, user
    assert events[0].run_started.session_id == first.session_id


async def test_get_run_output_has_the_assistant_messages_and_usage(server: Server) -> None:
    created = await server.runs.CreateRun(create_request("what I said"))
    await wait_for_terminal(server, created.run_id)
    output = (await server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=created.run_id))).output
    assert output.iterations == 1
    assert output.finish_reason == c.FINISH_REASON_STOP
    assert output.total_usage.total_tokens > 0
    assert [m.role for m in output.messages] == ["assistant"]
    assert output.messages[0].content[0].text.text == "what I said"


async def test_get_run_output_before_the_end_is_failed_precondition(server: Server) -> None:
    created = await server.runs.CreateRun(create_request(SLOW, model="script"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=created.run_id))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    await server.runs.CancelRun(pb.CancelRunRequest(run_id=created.run_id))


async def test_list_runs_filters_by_session_and_status(server: Server) -> None:
    first = await server.runs.CreateRun(create_request("one"))
    await wait_for_terminal(server, first.run_id)
    second = await server.runs.CreateRun(create_request("two", session_id=first.session_id))
    await wait_for_terminal(server, second.run_id)
    by_session = await server.runs.ListRuns(pb.ListRunsRequest(session_id=first.session_id))
    assert [r.id for r in by_session.runs] == [second.run_id, first.run_id]
    completed = await server.runs.ListRuns(
        pb.ListRunsRequest(session_id=first.session_id, status=c.RUN_STATUS_COMPLETED)
    )
    assert len(completed.runs) == 2
    failed = await server.runs.ListRuns(
        pb.ListRunsRequest(session_id=first.session_id, status=c.RUN_STATUS_FAILED)
    )
    assert list(failed.runs) == []
    paged = await server.runs.ListRuns(
        pb.ListRunsRequest(session_id=first.session_id, pagination=c.Pagination(limit=1, offset=1))
    )
    assert [r.id for r in paged.runs] == [first.run_id]


async def test_a_running_run_has_a_snapshot_that_goes_when_it_ends(server: Server) -> None:
    created = await server.runs.CreateRun(create_request(SLOW, model="script"))
    stream = server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
    async for event in stream:
        if kind(event) == "text_delta":
            break
    stream.cancel()
    snapshot = await server.snapshots.GetSnapshot(pb.GetSnapshotRequest(run_id=created.run_id))
    assert snapshot.snapshot.status == c.RUN_STATUS_CALLING_MODEL
    assert snapshot.snapshot.iteration == 1
    listed = await server.snapshots.ListSnapshots(pb.ListSnapshotsRequest())
    assert created.run_id in [s.run_id for s in listed.snapshots]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.snapshots.DeleteSnapshot(pb.DeleteSnapshotRequest(run_id=created.run_id))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    await server.runs.CancelRun(pb.CancelRunRequest(run_id=created.run_id))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.snapshots.GetSnapshot(pb.GetSnapshotRequest(run_id=created.run_id))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_compaction_config_is_validated_and_persisted(server: Server) -> None:
    update = pb.UpdateCompactionConfigRequest(
        auto=True,
        prune=True,
        buffer_tokens=15000,
        keep_tokens=6000,
        tail_turns=3,
        provider="local",
        model="echo",
        circuit_breaker_threshold=5,
    )
    await server.compaction.UpdateCompactionConfig(update)
    got = await server.compaction.GetCompactionConfig(pb.GetCompactionConfigRequest())
    assert (got.prune, got.buffer_tokens, got.keep_tokens, got.tail_turns) == (True, 15000, 6000, 3)
    assert (got.provider, got.model, got.circuit_breaker_threshold) == ("local", "echo", 5)
    bad = pb.UpdateCompactionConfigRequest(buffer_tokens=0, keep_tokens=10, tail_turns=1)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.compaction.UpdateCompactionConfig(bad)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "buffer_tokens" in (err.value.details() or "")
    breaker = await server.compaction.GetCircuitBreaker(pb.GetCircuitBreakerRequest())
    assert (breaker.is_open, breaker.consecutive_failures) == (False, 0)


async def test_compaction_config_defaults_are_those_of_the_contract(server: Server) -> None:
    got = await server.compaction.GetCompactionConfig(pb.GetCompactionConfigRequest())
    assert (got.auto, got.buffer_tokens, got.keep_tokens, got.tail_turns) == (True, 20000, 8000, 2)
    assert got.circuit_breaker_threshold == 3
