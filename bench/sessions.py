"""Item 12: a session's stored bytes (issue 28): they grow with what each turn adds, not with
the history a turn re-reads; and forks share the history they start from.

One behest server on SQLite. A session of TURNS `echo` turns, one after another; then the same
session forked FORKS times (at points spread over it) with one turn of its own each (--quick:
50 turns, 5 forks). The bytes
are those of the stored text of the rows that name these sessions or their runs — messages
(text, tool calls, parts), events (payloads), runs (input, metadata, instructions) — read from
the database file once the server has stopped writing them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import grpc

from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest._proto.agent.v1 import session_pb2 as spb
from behest._proto.agent.v1 import session_pb2_grpc as session_rpc
from bench.items import create_request

TURNS = 200
FORKS = 20
# Each turn's input: about the size of a chat message.
WORDS = " ".join(f"word{i}" for i in range(20))

_BYTES = """
SELECT
  (SELECT coalesce(sum(length(CAST(m.text AS BLOB)) + length(m.tool_calls)
                       + coalesce(length(m.parts), 0)), 0)
     FROM messages m WHERE m.session_id IN ({sessions})) +
  (SELECT coalesce(sum(length(CAST(e.payload AS BLOB))), 0)
     FROM events e JOIN runs r ON r.id = e.run_id WHERE r.session_id IN ({sessions})) +
  (SELECT coalesce(sum(length(CAST(r.input AS BLOB)) + length(r.metadata)
                       + length(r.instructions)), 0)
     FROM runs r WHERE r.session_id IN ({sessions}))
"""


def stored_bytes(database: Path, sessions: list[str]) -> int:
    marks = ",".join("?" for _ in sessions)
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as conn:
        bound = sessions * 3  # the list appears three times in the statement
        return int(conn.execute(_BYTES.format(sessions=marks), bound).fetchone()[0])


async def _turn(runs: rpc.RunServiceStub, session_id: str, text: str) -> str:
    request = create_request(text, "echo")
    request.session_id = session_id
    last = None
    async for event in runs.CreateRunStream(request):
        last = event
    assert last is not None and last.WhichOneof("event") == "run_completed", last
    return last.run_id


async def measure(
    address: str, database: Path, turns: int = TURNS, fork_count: int = FORKS
) -> dict[str, Any]:
    """Bytes per turn of a `turns`-turn session (its first and last ten turns apart), and
    what `fork_count` forks with a turn each add to it."""
    async with grpc.aio.insecure_channel(address) as channel:
        runs, sessions = rpc.RunServiceStub(channel), session_rpc.SessionServiceStub(channel)
        first = await runs.CreateRun(create_request(f"turn 0 {WORDS}", "echo"))
        session_id = first.session_id
        async for _ in runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=first.run_id)):
            pass
        marks = [stored_bytes(database, [session_id])]
        for turn in range(1, turns):
            await _turn(runs, session_id, f"turn {turn} {WORDS}")
            marks.append(stored_bytes(database, [session_id]))
        plain = marks[-1]
        forks = []
        for i in range(fork_count):
            # Spread over the session, the last at its end.
            through = (2 * turns - 1) * (i + 1) // fork_count
            request = spb.ForkSessionRequest(session_id=session_id, through_position=through)
            forked = (await sessions.ForkSession(request)).session.id
            await _turn(runs, forked, f"fork {i} {WORDS}")
            forks.append(forked)
        with_forks = stored_bytes(database, [session_id, *forks])
    per_turn = [b - a for a, b in zip([0, *marks[:-1]], marks, strict=True)]
    first_ten, last_ten = sum(per_turn[:10]) / 10, sum(per_turn[-10:]) / 10
    return {
        "turns": turns,
        "forks": fork_count,
        "bytes": plain,
        "bytes_per_turn": plain / turns,
        "first_ten_per_turn": first_ten,
        "last_ten_per_turn": last_ten,
        "growth": last_ten / first_ten,
        "with_forks_bytes": with_forks,
        "forks_ratio": with_forks / plain,
    }
