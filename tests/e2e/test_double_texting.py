"""Double-texting (issue 28): a new message on a session whose run is still going. REJECT
(the default) refuses it; INTERRUPT cancels the active run keeping what it committed, then
starts the new one; ROLLBACK also takes the cancelled run's messages out of the session's
history. Both runs' events say what happened; a retry never cancels the run it started."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import session_pb2 as spb
from behest._proto.agent.v1 import session_pb2_grpc as session_rpc
from tests.support import Server, collect, create_request, kind, script

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
