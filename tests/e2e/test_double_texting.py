"""Double-texting (issue 28): a new message on a session whose run is still going. REJECT
(the default) refuses it; INTERRUPT cancels the active run keeping what it committed, then
starts the new one; ROLLBACK also takes the cancelled run's messages out of the session's
history. Both runs' events say what happened; a retry never cancels the run it started."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest._proto.agent.v1 import session_pb2 as spb
from behest._proto.agent.v1 import session_pb2_grpc as session_rpc
from tests.support import Server, collect, create_request, kind, script, server_process

CALC = {"name": "calculator", "arguments": {"expression": "6*7"}}
# Commits a tool call and its result, then streams for a long while.
BUSY = script({"tool_calls": [CALC]}, {"deltas": 2000, "delay_ms": 10})


def turn(session_id: str, steps: str, **fields: object) -> pb.CreateRunRequest:
    return create_request(steps, model="script", session_id=session_id, **fields)  # type: ignore[arg-type]


async def busy_session(server: Server) -> tuple[str, str, str]:
    """A session whose first run ended and whose second streams on; (session, first, busy)."""
    first = await server.runs.CreateRun(create_request(script({"text": "first"}), model="script"))
    await collect(server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=first.run_id)))
    busy = await server.runs.CreateRun(turn(first.session_id, BUSY))
    async with asyncio.timeout(20):
        async for event in server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=busy.run_id)):
            if kind(event) == "text_delta":
                break  # its tool call and result are committed, its answer streams
    return first.session_id, first.run_id, busy.run_id


async def history(server: Server, session_id: str) -> list[tuple[str, str]]:
    stub = session_rpc.SessionServiceStub(server.channel)
    page = await stub.ListSessionMessages(
        spb.ListSessionMessagesRequest(session_id=session_id, limit=1000)
    )
    return [(m.id, m.role) for m in page.messages]


async def test_by_default_a_busy_session_refuses_a_new_run(served: Server) -> None:
    session_id, _, busy = await busy_session(served)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await served.runs.CreateRun(turn(session_id, script({"text": "again"})))
    assert refused.value.code() == grpc.StatusCode.ABORTED
    assert busy in (refused.value.details() or "")
    await served.runs.CancelRun(pb.CancelRunRequest(run_id=busy))


@pytest.mark.parametrize("policy", [pb.BUSY_POLICY_INTERRUPT, pb.BUSY_POLICY_ROLLBACK])
async def test_a_new_message_cancels_the_active_run_first(
    served: Server, policy: pb.BusyPolicy.ValueType
) -> None:
    session_id, first, busy = await busy_session(served)
    before = await history(served, session_id)
    # The first run's two messages, then the busy run's three.
    assert [role for _, role in before] == ["user", "assistant", "user", "assistant", "tool"]

    request = turn(
        session_id, script({"say": "history"}), on_busy=policy, client_request_id="k-" + busy
    )
    events = await collect(served.runs.CreateRunStream(request))
    assert kind(events[-1]) == "run_completed"
    started = events[0].run_started
    assert (started.interrupted_run_id, started.on_busy) == (busy, policy)
    cancelled = await collect(served.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=busy)))
    end = cancelled[-1].run_cancelled
    assert kind(cancelled[-1]) == "run_cancelled"
    assert end.source == pb.CANCEL_SOURCE_NEW_RUN and "new message" in end.reason

    new = events[0].run_id
    after = await history(served, session_id)
    seen = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    if policy == pb.BUSY_POLICY_INTERRUPT:  # kept: what the cancelled run committed
        assert after[:5] == before
        assert seen == "user assistant user assistant[calculator] tool[calculator] user"
    else:  # rolled back: its messages left the history, and the new run's context
        assert after[:2] == before[:2]
        assert not set(after) & set(before[2:])
        assert seen == "user assistant user"
    assert [role for _, role in after[-2:]] == ["user", "assistant"]
    output = await served.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=busy))
    assert [m.role for m in output.output.messages] == ["assistant"]  # still the run's own

    # The same request again (a retry): the run it made, and nothing cancelled.
    again = await served.runs.CreateRun(request)
    assert again.run_id == new
    record = (await served.runs.GetRun(pb.GetRunRequest(run_id=new))).run
    assert record.status == c.RUN_STATUS_COMPLETED
    assert first != new


def started_of(events: list[pb.AgentEvent]) -> pb.RunStartedEvent:
    assert kind(events[0]) == "run_started"
    return events[0].run_started


async def log_of(runs: rpc.RunServiceStub, run_id: str) -> list[pb.AgentEvent]:
    async with asyncio.timeout(30):
        return await collect(runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))


async def test_enqueued_runs_start_in_order_once_the_active_one_ended(served: Server) -> None:
    session_id, _, busy = await busy_session(served)
    enqueue = pb.BUSY_POLICY_ENQUEUE
    a = await served.runs.CreateRun(turn(session_id, script({"text": "A"}), on_busy=enqueue))
    b = await served.runs.CreateRun(turn(session_id, script({"say": "history"}), on_busy=enqueue))
    c_ = await served.runs.CreateRun(turn(session_id, script({"text": "C"}), on_busy=enqueue))
    for queued in (a, b, c_):
        record = (await served.runs.GetRun(pb.GetRunRequest(run_id=queued.run_id))).run
        assert record.status == c.RUN_STATUS_PENDING
    await served.runs.CancelRun(pb.CancelRunRequest(run_id=c_.run_id))  # leaves the line
    await served.runs.CancelRun(pb.CancelRunRequest(run_id=busy))

    first, second = await log_of(served.runs, a.run_id), await log_of(served.runs, b.run_id)
    assert kind(first[-1]) == kind(second[-1]) == "run_completed"
    assert (started_of(first).waited_for_run_id, started_of(first).on_busy) == (busy, enqueue)
    assert started_of(second).waited_for_run_id == a.run_id
    # In order: the second's context holds the first's answer; the cancelled third never ran.
    said = "".join(e.text_delta.delta for e in second if kind(e) == "text_delta")
    assert said.endswith("user assistant user")
    assert first[-1].timestamp.ToNanoseconds() <= second[0].timestamp.ToNanoseconds()
    third = await log_of(served.runs, c_.run_id)
    assert [kind(e) for e in third] == ["run_cancelled"]
    sessions = session_rpc.SessionServiceStub(served.channel)
    got = await sessions.GetSession(spb.GetSessionRequest(session_id=session_id))
    assert got.session.active_run_id == ""


async def test_enqueued_runs_survive_kill_9_and_start_in_order(tmp_path: Path) -> None:
    # A run that streams for a while; after the restart its next model call ends it.
    slow = script({"deltas": 300, "delay_ms": 10})
    enqueue = pb.BUSY_POLICY_ENQUEUE
    async with server_process(tmp_path) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            runs = rpc.RunServiceStub(channel)
            busy = await runs.CreateRun(create_request(slow, model="script"))
            session_id = busy.session_id
            async for event in runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=busy.run_id)):
                if kind(event) == "text_delta":
                    break
            queued = [
                await runs.CreateRun(turn(session_id, script({"say": "history"}), on_busy=enqueue))
                for _ in range(2)
            ]
            process.send_signal(signal.SIGKILL)
            await process.wait()
    async with server_process(tmp_path) as (_, address):
        async with grpc.aio.insecure_channel(address) as channel:
            runs = rpc.RunServiceStub(channel)
            logs = [await log_of(runs, r.run_id) for r in [busy, *queued]]
    assert [kind(log[-1]) for log in logs] == ["run_completed"] * 3
    assert [started_of(log).waited_for_run_id for log in logs[1:]] == [
        busy.run_id,
        queued[0].run_id,
    ]
    ends = [log[-1].timestamp.ToNanoseconds() for log in logs]
    starts = [log[0].timestamp.ToNanoseconds() for log in logs]
    assert ends[0] <= starts[1] and ends[1] <= starts[2]
    said = "".join(e.text_delta.delta for e in logs[2] if kind(e) == "text_delta")
    assert said == "user assistant user assistant user"  # busy, the first queued, itself


async def test_a_steered_message_joins_the_active_run_before_its_next_model_call(
    served: Server,
) -> None:
    first = await served.runs.CreateRun(create_request(script({"text": "first"}), model="script"))
    await log_of(served.runs, first.run_id)
    steps = script({"deltas": 60, "delay_ms": 15}, {"say": "history"})
    busy = await served.runs.CreateRun(turn(first.session_id, steps))
    async for event in served.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=busy.run_id)):
        if kind(event) == "text_delta":
            break
    steered = await served.runs.CreateRun(
        turn(first.session_id, "and in French, please", on_busy=pb.BUSY_POLICY_STEER)
    )
    assert (steered.run_id, steered.steered) == (busy.run_id, True)
    log = await log_of(served.runs, busy.run_id)
    assert kind(log[-1]) == "run_completed"
    added = [e.user_message_added for e in log if kind(e) == "user_message_added"]
    assert [a.text for a in added] == ["and in French, please"]
    said = "".join(e.text_delta.delta for e in log if kind(e) == "text_delta")
    # The second model call saw it: the first run's two messages, then this run's three.
    assert said.endswith("user assistant user assistant user")
    listed = await served.runs.ListRuns(pb.ListRunsRequest(session_id=first.session_id))
    assert len(listed.runs) == 2  # no run was made for it
    messages = await history(served, first.session_id)
    assert [role for _, role in messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


async def test_a_steer_on_an_idle_session_starts_a_run(served: Server) -> None:
    first = await served.runs.CreateRun(create_request(script({"text": "first"}), model="script"))
    await log_of(served.runs, first.run_id)
    again = await served.runs.CreateRun(
        turn(first.session_id, script({"text": "again"}), on_busy=pb.BUSY_POLICY_STEER)
    )
    assert not again.steered and again.run_id != first.run_id
    assert kind((await log_of(served.runs, again.run_id))[-1]) == "run_completed"


async def test_a_steer_stored_before_kill_9_is_taken_once_after_the_restart(
    tmp_path: Path,
) -> None:
    steps = script({"deltas": 300, "delay_ms": 10}, {"say": "history"}, {"say": "history"})
    async with server_process(tmp_path) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            runs = rpc.RunServiceStub(channel)
            busy = await runs.CreateRun(create_request(steps, model="script"))
            async for event in runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=busy.run_id)):
                if kind(event) == "text_delta":
                    break
            steered = await runs.CreateRun(
                turn(busy.session_id, "one more thing", on_busy=pb.BUSY_POLICY_STEER)
            )
            assert steered.steered
            process.send_signal(signal.SIGKILL)
            await process.wait()
    async with server_process(tmp_path) as (_, address):
        async with grpc.aio.insecure_channel(address) as channel:
            log = await log_of(rpc.RunServiceStub(channel), busy.run_id)
    assert kind(log[-1]) == "run_completed"
    assert [e.user_message_added.text for e in log if kind(e) == "user_message_added"] == [
        "one more thing"
    ]
    said = "".join(e.text_delta.delta for e in log if kind(e) == "text_delta")
    assert said.endswith("user user")  # the input, then the steered message
