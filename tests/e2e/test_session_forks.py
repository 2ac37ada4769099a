"""Forked sessions (issue 28): ForkSession makes a session whose history is a prefix of
another's, shared rather than copied — "edit and regenerate" is a fork before the edited
message plus a run there. The original is unchanged; erasing either leaves the other whole;
bad points and sessions get clear statuses and write nothing."""

from __future__ import annotations

import uuid

import grpc
import pytest
import sqlalchemy as sa

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import session_pb2 as spb
from behest._proto.agent.v1 import session_pb2_grpc as session_rpc
from behest.client import BehestClient
from behest.store.sql import tables as t
from tests.support import Server, behest, collect, create_request, kind, script


def sessions_of(server: Server) -> session_rpc.SessionServiceStub:
    return session_rpc.SessionServiceStub(server.channel)


async def session_of(server: Server, turns: int) -> tuple[str, list[str]]:
    """A session of `turns` echo runs (two messages each); its id and its runs' ids."""
    session_id, run_ids = "", []
    for i in range(turns):
        request = create_request(f"turn {i}", session_id=session_id)
        events = await collect(server.runs.CreateRunStream(request))
        assert kind(events[-1]) == "run_completed"
        session_id = events[0].run_started.session_id
        run_ids.append(events[0].run_id)
    return session_id, run_ids


async def history(server: Server, session_id: str) -> list[c.Message]:
    page = await sessions_of(server).ListSessionMessages(
        spb.ListSessionMessagesRequest(session_id=session_id, limit=1000)
    )
    return list(page.messages)


async def stored_rows(server: Server) -> int:
    engines = server.app.store.engines  # type: ignore[attr-defined]
    async with engines.reader.connect() as conn:
        return int(
            (await conn.execute(sa.select(sa.func.count()).select_from(t.messages))).scalar()
        )


def texts(messages: list[object]) -> list[str]:
    return [m.content[0].text.text for m in messages]  # type: ignore[attr-defined]


async def fork(server: Server, session_id: str, **point: object) -> spb.SessionRecord:
    request = spb.ForkSessionRequest(session_id=session_id, **point)  # type: ignore[arg-type]
    return (await sessions_of(server).ForkSession(request)).session


async def test_a_fork_at_message_4_shares_the_first_four_and_goes_its_own_way(
    served: Server,
) -> None:
    original, _ = await session_of(served, 5)  # 10 messages, positions 0 to 9
    before = await history(served, original)
    rows = await stored_rows(served)

    forked = await fork(served, original, through_position=3)
    assert (forked.parent_session_id, forked.forked_through_position) == (original, 3)
    assert forked.message_count == 4 and forked.run_count == 0
    shared = await history(served, forked.id)
    assert [m.id for m in shared] == [m.id for m in before[:4]]  # the same messages, not copies
    assert await stored_rows(served) == rows

    # A run there sees exactly those four, then its own message.
    events = await collect(
        served.runs.CreateRunStream(
            create_request(script({"say": "history"}), model="script", session_id=forked.id)
        )
    )
    said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    assert said == "user assistant user assistant user"
    assert len(await history(served, forked.id)) == 6
    assert await stored_rows(served) == rows + 2  # what the new turn added, nothing else
    assert [m.id for m in await history(served, original)] == [m.id for m in before]

    listed = await sessions_of(served).ListSessions(spb.ListSessionsRequest(forks_of=original))
    assert [(s.id, s.forked_through_position) for s in listed.sessions] == [(forked.id, 3)]


@pytest.mark.parametrize("first", ["original", "fork"])
async def test_erasing_either_leaves_the_other_whole(served: Server, first: str) -> None:
    original, _ = await session_of(served, 3)
    forked = await fork(served, original, through_position=1)
    await collect(served.runs.CreateRunStream(create_request("mine", session_id=forked.id)))
    whole = {original: await history(served, original), forked.id: await history(served, forked.id)}
    gone, kept = (original, forked.id) if first == "original" else (forked.id, original)

    await sessions_of(served).DeleteSession(spb.DeleteSessionRequest(session_id=gone))
    assert [m.id for m in await history(served, kept)] == [m.id for m in whole[kept]]
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await sessions_of(served).GetSession(spb.GetSessionRequest(session_id=gone))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    listed = await sessions_of(served).ListSessions(spb.ListSessionsRequest())
    assert gone not in {s.id for s in listed.sessions}

    # The other one goes too: nothing of either is left.
    await sessions_of(served).DeleteSession(spb.DeleteSessionRequest(session_id=kept))
    engines = served.app.store.engines  # type: ignore[attr-defined]
    async with engines.reader.connect() as conn:
        left = await conn.execute(
            sa.select(sa.func.count())
            .select_from(t.messages)
            .where(t.messages.c.session_id.in_([original, forked.id]))
        )
        assert left.scalar() == 0
        sessions = await conn.execute(
            sa.select(sa.func.count())
            .select_from(t.sessions)
            .where(t.sessions.c.id.in_([original, forked.id]))
        )
        assert sessions.scalar() == 0


async def test_a_fork_after_a_run_and_a_fork_of_a_fork(served: Server) -> None:
    original, runs = await session_of(served, 3)
    after_first = await fork(served, original, after_run_id=runs[0])
    assert after_first.forked_through_position == 1
    await collect(served.runs.CreateRunStream(create_request("b", session_id=after_first.id)))
    grand = await fork(served, after_first.id, through_position=2)
    assert texts(await history(served, grand.id)) == ["turn 0", "turn 0", "b"]


async def test_bad_points_and_sessions_write_nothing(served: Server) -> None:
    original, runs = await session_of(served, 2)
    other, other_runs = await session_of(served, 1)
    slow = await served.runs.CreateRun(
        create_request(script({"deltas": 500, "delay_ms": 10}), model="script", session_id=other)
    )
    cases = [
        (
            {"session_id": original, "through_position": 4},
            grpc.StatusCode.INVALID_ARGUMENT,
            "past the end",
        ),
        (
            {"session_id": original, "after_run_id": other_runs[0]},
            grpc.StatusCode.INVALID_ARGUMENT,
            "not a run of",
        ),
        (
            {"session_id": str(uuid.uuid4()), "through_position": 0},
            grpc.StatusCode.NOT_FOUND,
            "not found",
        ),
        (
            {"session_id": original},
            grpc.StatusCode.INVALID_ARGUMENT,
            "through_position or after_run_id",
        ),
        (
            {"session_id": other, "through_position": 2},
            grpc.StatusCode.FAILED_PRECONDITION,
            "active run",
        ),
    ]
    before = await sessions_of(served).ListSessions(spb.ListSessionsRequest())
    for point, code, words in cases:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await fork(served, **point)  # type: ignore[arg-type]
        assert refused.value.code() == code, point
        assert words in (refused.value.details() or ""), refused.value.details()
    after = await sessions_of(served).ListSessions(spb.ListSessionsRequest())
    assert [s.id for s in after.sessions] == [s.id for s in before.sessions]
    # Before the active run's first message, a fork of that session is fine.
    early = await fork(served, other, through_position=1)
    assert early.message_count == 2
    await served.runs.CancelRun(pb.CancelRunRequest(run_id=slow.run_id))
    assert len(runs) == 2


async def test_the_python_client_and_the_cli_fork_a_session(server: Server) -> None:
    original, runs = await session_of(server, 2)
    async with BehestClient(server.address) as client:
        forked = await client.fork_session(original, after_run_id=runs[0])
        assert (forked.parent_session_id, forked.forked_through_position) == (original, 1)
        assert [s.id for s in await client.list_sessions(forks_of=original)] == [forked.id]
    printed = await behest(
        "sessions", "fork", original, "--through", "2", "--server", server.address
    )
    assert printed.code == 0, printed.err
    assert f"forked from {original} through message 2 (3 messages)" in printed.out
