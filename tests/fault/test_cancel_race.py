"""CancelRun racing a run's own end, 1,000 times: the reply always matches the log (issue 10).

Each race creates a short run and sends CancelRun at a chosen point: right after CreateRun
returns, or as the k-th event of the run's stream arrives (k drawn from a seeded generator, so
every state boundary gets its turn, the terminal one included). Whatever wins, the run has
exactly one terminal event, last, and CancelRun answered OK (status CANCELLED) if and only if
that event is run_cancelled; otherwise FAILED_PRECONDITION naming the end it reached.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import grpc

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from tests.support import Server, collect, create_request, kind, script

RACES = 1000
AT_ONCE = 10
SEED = 1010
TERMINAL = {"run_completed", "run_failed", "run_cancelled"}
INPUTS = [
    ("echo", "one two three four five six"),
    ("script", script({"text": "one two three four five six", "delay_ms": 5})),
    (
        "script",
        script({"tool_calls": [{"name": "current_time"}], "delay_ms": 2}, {"text": "done now"}),
    ),
    ("script", script({"text": "a b c", "error": "bad_request", "delay_ms": 3})),
    # Slow enough that a cancel sent before its last event wins on any machine: without it,
    # how often cancels win depends on how fast the machine runs the quick ones.
    ("script", script({"text": " ".join(f"w{i}" for i in range(12)), "delay_ms": 20})),
]


async def race(server: Server, rng: random.Random) -> tuple[str, str]:
    """One race; returns (the reply: OK or a status name, the terminal event's kind)."""
    model, text = rng.choice(INPUTS)
    cancel_at = rng.randint(0, 12)
    reply: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def cancel(run_id: str) -> None:
        try:
            response = await server.runs.CancelRun(pb.CancelRunRequest(run_id=run_id))
        except grpc.aio.AioRpcError as err:
            reply.set_result(f"{err.code().name}: {err.details()}")
        else:
            assert response.status == c.RUN_STATUS_CANCELLED
            reply.set_result("OK")

    if cancel_at == 0:
        created = await server.runs.CreateRun(create_request(text, model=model))
        run_id = created.run_id
        await cancel(run_id)
    else:
        run_id = ""
        sender: asyncio.Task[None] | None = None
        async for event in server.runs.CreateRunStream(create_request(text, model=model)):
            run_id = event.run_id
            if event.sequence == cancel_at or (sender is None and kind(event) in TERMINAL):
                sender = sender or asyncio.create_task(cancel(run_id))
        assert sender is not None
        await sender
    events = await collect(server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))
    kinds = [kind(e) for e in events]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1)), run_id
    assert sum(k in TERMINAL for k in kinds) == 1 and kinds[-1] in TERMINAL, (run_id, kinds)
    answer = reply.result()
    ended = kinds[-1]
    if answer == "OK":
        assert ended == "run_cancelled", (run_id, answer, kinds)
    else:
        assert answer.startswith("FAILED_PRECONDITION: "), (run_id, answer)
        assert ended != "run_cancelled", (run_id, answer, kinds)
        status = "COMPLETED" if ended == "run_completed" else "FAILED"
        assert f"already ended {status}" in answer, (run_id, answer, kinds)
    run = await server.runs.GetRun(pb.GetRunRequest(run_id=run_id))
    assert c.RunStatus.Name(run.run.status) == "RUN_STATUS_" + ended.removeprefix("run_").upper()
    return answer.partition(":")[0], ended


async def test_cancel_racing_completion_always_tells_the_truth(server: Server) -> None:
    rng = random.Random(SEED)
    outcomes: Counter[tuple[str, str]] = Counter()
    for start in range(0, RACES, AT_ONCE):
        seeds = [rng.random() for _ in range(min(AT_ONCE, RACES - start))]
        results = await asyncio.gather(*(race(server, random.Random(s)) for s in seeds))
        outcomes.update(results)
    assert sum(outcomes.values()) == RACES
    # Both sides of the race were reached: cancels that won and cancels that came too late.
    assert outcomes[("OK", "run_cancelled")] > 50, outcomes
    assert outcomes[("FAILED_PRECONDITION", "run_completed")] > 50, outcomes
    assert outcomes[("FAILED_PRECONDITION", "run_failed")] > 10, outcomes
    assert set(outcomes) <= {
        ("OK", "run_cancelled"),
        ("FAILED_PRECONDITION", "run_completed"),
        ("FAILED_PRECONDITION", "run_failed"),
    }, outcomes
