"""Many concurrent runs, watchers that drop and reconnect at random, cancels that race the end.

Every run's stored log, what every watcher received across its reconnections, GetRun and
every CancelRun reply are checked with the history checker (tests/fault/history.py). The
random choices come from one seed, printed (and attached to any failure); set
BEHEST_FAULT_SEED to replay one.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path

import grpc

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from tests.fault.history import (
    TERMINAL,
    History,
    Watcher,
    events_of,
    kind,
    read_connection,
    read_stored,
)
from tests.support import create_request, fast_settings, script, start_server, stop_server

RUNS = 100
STREAM_CREATED = 8  # runs created with CreateRunStream; that stream is their first watcher
WATCHERS = 30  # more watchers, each on a random run, starting at cursor 0 or 1
# A watcher hangs up at most this many times, then stays to the end.
MAX_CONNECTIONS = 30
BUDGET_S = 45.0


def seed_from_env() -> int:
    value = os.environ.get("BEHEST_FAULT_SEED")
    return int(value) if value else random.SystemRandom().randrange(2**32)


# --- the runs -------------------------------------------------------------------------------


@dataclass
class Plan:
    """One run to create, and what to do to it."""

    name: str
    request: pb.CreateRunRequest
    # How the run is cancelled, if it is: "early" (after a few events of a long run), "race"
    # (after a random number of text deltas of its one short model call, often as it
    # completes), "late"
    # (after its terminal event), "timer" (a random moment after its creation, unwatched).
    cancel: str = ""
    cancel_after: int = 0  # "early": after this many events; "race": text deltas
    cancel_delay_s: float = 0.0  # "timer": after creation
    expect: frozenset[str] = TERMINAL


def _words(rng: random.Random, n: int) -> str:
    return " ".join(f"{rng.choice(['alpha', 'beta', 'gamma', 'delta'])}{i}" for i in range(n))


def _calc(rng: random.Random) -> dict[str, object]:
    a, b = rng.randint(1, 99), rng.randint(1, 99)
    return {"name": "calculator", "arguments": {"expression": f"({a} + {b}) * 2"}}


def make_plans(rng: random.Random) -> list[Plan]:
    completed = frozenset({"run_completed"})
    either = frozenset({"run_completed", "run_cancelled"})  # a cancel that races the end

    def scripted(*steps: dict[str, object]) -> pb.CreateRunRequest:
        return create_request(script(*steps), model="script")

    plans: list[Plan] = []
    for i in range(12):
        request = create_request(_words(rng, rng.randint(1, 40)))
        plans.append(Plan(f"echo{i}", request, expect=completed))
    for i in range(22):
        step = {
            "text": _words(rng, rng.randint(1, 12)),
            "deltas": rng.randint(10, 150),
            "delay_ms": rng.choice([0, 1, 2, 4, 6]),
        }
        plans.append(Plan(f"text{i}", scripted(step), expect=completed))
    for i in range(18):
        request = scripted(
            {
                "text": "let me compute",
                "tool_calls": [_calc(rng), {"name": "current_time", "arguments": {}}],
                "delay_ms": rng.choice([0, 1, 2]),
            },
            {"tool_calls": [_calc(rng)], "delay_ms": 1},
            {"text": "the answers are in", "deltas": rng.randint(0, 60), "delay_ms": 2},
        )
        plans.append(Plan(f"tools{i}", request, expect=completed))
    for i in range(10):
        # A transient error: the call is repeated (a second model_started, same iteration).
        request = scripted(
            {"error": rng.choice(["unavailable", "rate_limited"]), "delay_ms": 2},
            {"text": "after the retry", "deltas": rng.randint(0, 40), "delay_ms": 2},
        )
        plans.append(Plan(f"retry{i}", request, expect=completed))
    for i in range(10):
        request = scripted(
            {"tool_calls": [_calc(rng)], "delay_ms": 1},
            {"error": "bad_request", "delay_ms": rng.choice([0, 3])},
        )
        plans.append(Plan(f"fail{i}", request, expect=frozenset({"run_failed"})))
    # Cancelled ones.
    for i in range(8):
        request = scripted({"text": "a long answer", "deltas": 400, "delay_ms": 5})
        after = rng.randint(1, 25)
        cancelled = frozenset({"run_cancelled"})
        plans.append(Plan(f"early{i}", request, "early", cancel_after=after, expect=cancelled))
    for i in range(12):
        deltas = rng.randint(5, 60)
        request = scripted({"text": "almost", "deltas": deltas, "delay_ms": rng.choice([2, 3])})
        after = rng.randint(1, deltas + 2)  # the text deltas are "almost", "w1 ", …
        plans.append(Plan(f"race{i}", request, "race", cancel_after=after, expect=either))
    for i in range(4):
        plans.append(Plan(f"late{i}", create_request(_words(rng, 5)), "late", expect=completed))
    for i in range(4):
        request = scripted({"deltas": rng.randint(40, 150), "delay_ms": 3})
        delay = rng.uniform(0.0, 0.4)
        plans.append(Plan(f"timer{i}", request, "timer", cancel_delay_s=delay, expect=either))
    rng.shuffle(plans)
    assert len(plans) == RUNS
    return plans


# --- the clients ----------------------------------------------------------------------------


async def cancel(
    stub: rpc.RunServiceStub, history: History, run_id: str, *, after_s: float = 0.0
) -> None:
    if after_s:
        await asyncio.sleep(after_s)  # where the cancel lands; nothing waits on it
    try:
        reply = await stub.CancelRun(pb.CancelRunRequest(run_id=run_id))
    except grpc.aio.AioRpcError as exc:
        history.record_cancel(run_id, error=exc)
    else:
        history.record_cancel(run_id, reply=reply)


async def follow(
    stub: rpc.RunServiceStub,
    watcher: Watcher,
    rng: random.Random,
    *,
    first: grpc.aio.UnaryStreamCall | None = None,
    cursor: int = 0,
    hang_ups: bool = True,
) -> int:
    """Follow a run to its terminal event, hanging up at random and reconnecting with the
    last sequence seen; returns how many of its streams failed. `first`: an open
    CreateRunStream the watcher is connected to already (it has read its first event);
    otherwise the watcher starts at `cursor`.
    """
    errors = 0
    if first is None:
        watcher.connect(cursor)
    while True:
        call = first or stub.WatchRunEvents(
            pb.WatchRunEventsRequest(run_id=watcher.run_id, last_event_id=watcher.last_sequence)
        )
        # Hang up after some events, or after a while (not on the creating stream), or not
        # at all.
        choice = rng.random() if hang_ups and len(watcher.connections) < MAX_CONNECTIONS else 1.0
        after_events = rng.randint(1, 8) if choice < 0.6 else 0
        after_s = rng.uniform(0.002, 0.06) if 0.6 <= choice < 0.9 and first is None else None
        first = None
        error = await read_connection(call, watcher, after_events=after_events, after_s=after_s)
        if error is not None:
            watcher.close_with(error)
            errors += 1
        end = watcher.connections[-1].end
        if watcher.done or not watcher.run_id or errors >= 3 or end == "eof":
            return errors  # done, or something the checker reports
        if rng.random() < 0.3:
            await asyncio.sleep(rng.uniform(0.0, 0.02))  # place the reconnection a bit later
        watcher.connect()


async def cancelling_watcher(
    stub: rpc.RunServiceStub, history: History, plan: Plan, run_id: str, rng: random.Random
) -> None:
    """Follows a run without hanging up and cancels it at the point its plan says."""
    watcher = history.watcher(f"{plan.name}/canceller", run_id)
    if plan.cancel == "timer":
        await cancel(stub, history, run_id, after_s=plan.cancel_delay_s)
        await follow(stub, watcher, rng, hang_ups=False)
        return
    watcher.connect(0)
    call = stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id))
    pending: asyncio.Task[None] | None = None
    deltas = 0
    try:
        async for event in events_of(call):
            watcher.receive(event)
            if pending is not None:
                continue
            if plan.cancel == "early" and len(watcher.events) == plan.cancel_after:
                pending = asyncio.create_task(cancel(stub, history, run_id))
            elif plan.cancel == "race" and kind(event) == "text_delta":
                deltas += 1
                if deltas == plan.cancel_after:
                    pending = asyncio.create_task(cancel(stub, history, run_id))
        watcher.close("eof")
    except grpc.aio.AioRpcError as exc:
        watcher.close_with(exc)
    finally:
        call.cancel()
    if pending is None:
        # "late", or a trigger never met (the run ended first): cancel an ended run.
        pending = asyncio.create_task(cancel(stub, history, run_id))
    await pending


# --- the test -------------------------------------------------------------------------------


async def test_concurrent_runs_and_reconnecting_watchers_agree_with_the_log(
    tmp_path: Path,
) -> None:
    seed = seed_from_env()
    print(f"fault history seed: {seed} (replay with BEHEST_FAULT_SEED={seed})")
    rng = random.Random(seed)
    history = History(f"seed {seed}")
    server = await start_server(fast_settings(tmp_path))
    started = time.monotonic()
    try:
        async with asyncio.timeout(BUDGET_S):
            errors, plans_by_run = await _exercise(server.runs, history, rng)
        elapsed = time.monotonic() - started
        logs, records = await read_stored(server.runs, plans_by_run)
        summary = history.check(logs, records)
        for run_id, plan in plans_by_run.items():
            assert kind(logs[run_id][-1]) in plan.expect, (
                f"seed {seed}: run {run_id} ({plan.name}) ended {kind(logs[run_id][-1])}, "
                f"expected one of {sorted(plan.expect)}"
            )
        assert errors == 0, f"seed {seed}: {errors} watcher streams failed (see the history)"
        print(f"seed {seed}: {summary}; {elapsed:.1f} s")
    except BaseException as exc:
        exc.add_note(f"fault history seed: {seed} (replay with BEHEST_FAULT_SEED={seed})")
        raise
    finally:
        await stop_server(server)


async def _exercise(
    stub: rpc.RunServiceStub, history: History, rng: random.Random
) -> tuple[int, dict[str, Plan]]:
    """Create every run at once; start its watchers as soon as it exists; wait for all."""
    plans = make_plans(rng)
    plans_by_run: dict[str, Plan] = {}
    errors: list[int] = []
    # Everything random is drawn here, up front, so that what happens to each run and client
    # depends on the seed only, not on the order in which tasks happen to run.
    streamed = set(rng.sample(range(len(plans)), STREAM_CREATED))
    watched: dict[int, list[tuple[int, int, int]]] = {}  # plan → [(watcher, cursor, seed)]
    for n in range(WATCHERS):
        entry = (n, rng.choice([0, 0, 1]), rng.randrange(2**32))
        watched.setdefault(rng.randrange(len(plans)), []).append(entry)
    seeds = [rng.randrange(2**32) for _ in plans]

    async def counted(follower: Awaitable[int]) -> None:
        errors.append(await follower)

    async def create(group: asyncio.TaskGroup, i: int, plan: Plan) -> None:
        client_rng = random.Random(seeds[i])
        if i in streamed:
            call = stub.CreateRunStream(plan.request)
            creator = history.watcher(f"{plan.name}/creator")
            creator.connect(0)
            first = await call.read()  # the run id comes with the first event
            assert isinstance(first, pb.AgentEvent), f"{plan.name}: CreateRunStream gave {first}"
            creator.receive(first)
            run_id = creator.run_id
            group.create_task(counted(follow(stub, creator, client_rng, first=call)))
        else:
            run_id = (await stub.CreateRun(plan.request)).run_id
        plans_by_run[run_id] = plan
        if plan.cancel:
            group.create_task(cancelling_watcher(stub, history, plan, run_id, client_rng))
        for n, cursor, seed in watched.get(i, []):
            watcher = history.watcher(f"{plan.name}/watcher{n}", run_id)
            follower = follow(stub, watcher, random.Random(seed), cursor=cursor)
            group.create_task(counted(follower))

    async with asyncio.TaskGroup() as group:
        for i, plan in enumerate(plans):
            group.create_task(create(group, i, plan))
    return sum(errors), plans_by_run


# --- the checker itself: it must catch what it is for ----------------------------------------

RUN = "00000000-0000-4000-8000-000000000001"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _event(sequence: int, what: str, *, trace_id: str = TRACE, span_id: str = "") -> pb.AgentEvent:
    span_id = span_id or f"{sequence:016x}"
    event = pb.AgentEvent(sequence=sequence, run_id=RUN, trace_id=trace_id, span_id=span_id)
    getattr(event, what).SetInParent()
    return event


def _log(*kinds: str) -> list[pb.AgentEvent]:
    return [_event(i, what) for i, what in enumerate(kinds, start=1)]


LOG = _log("run_started", "context_built", "model_started", "text_delta", "run_completed")
DONE = {RUN: pb.RunRecord(id=RUN, status=c.RUN_STATUS_COMPLETED)}


def _watch(history: History, *connections: tuple[int, list[pb.AgentEvent], str]) -> Watcher:
    watcher = history.watcher("w", RUN)
    for cursor, events, end in connections:
        watcher.connect(cursor)
        for event in events:
            watcher.receive(event)
        watcher.close(end)
    return watcher


def _problems(history: History, log: list[pb.AgentEvent] = LOG, runs: object = DONE) -> str:
    try:
        history.check({RUN: log}, runs)  # type: ignore[arg-type]
    except AssertionError as exc:
        return str(exc)
    return ""


def test_checker_accepts_a_watcher_that_reconnected_with_its_last_sequence() -> None:
    history = History()
    _watch(history, (0, LOG[:2], "client"), (2, LOG[2:3], "client"), (3, LOG[3:], "eof"))
    _watch(history, (1, LOG[1:], "eof"))
    history.record_cancel(RUN, error=_rpc_error(grpc.StatusCode.FAILED_PRECONDITION))
    summary = history.check({RUN: LOG}, DONE)
    assert (summary.watchers, summary.reconnections, summary.cancels) == (2, 2, 1)


def test_checker_names_the_watcher_connection_and_sequence_of_a_gap() -> None:
    history = History()
    _watch(history, (0, LOG[:2], "client"), (2, LOG[3:], "eof"))
    problems = _problems(history)
    assert "watcher w" in problems and "connection 1" in problems
    assert "gap: received #4 text_delta where the log has #3 model_started" in problems


def test_checker_catches_a_duplicate_and_a_wrong_cursor() -> None:
    history = History()
    _watch(history, (0, LOG[:3], "client"), (2, LOG[2:], "eof"))
    problems = _problems(history)
    assert "reconnected with cursor 2, but had received up to #3" in problems
    assert "duplicate: received #3 model_started" in problems


def test_checker_catches_a_stream_that_ends_early_and_one_that_differs() -> None:
    history = History()
    _watch(history, (0, LOG[:2], "eof"))
    changed = list(LOG)
    changed[3] = _event(4, "text_delta", span_id="00000000000000aa")
    _watch(history, (0, changed, "eof"))
    problems = _problems(history)
    assert "the stream ended OK after #2 context_built, before the terminal event" in problems
    assert "received 2 events after cursor 0, the log has 5: first missing #3" in problems
    assert "received #4 text_delta differs from the stored #4 text_delta: fields span_id" in (
        problems
    )


def test_checker_catches_bad_logs() -> None:
    two_ends = _log("run_started", "run_cancelled", "run_completed")
    assert "2 terminal events" in _problems(History(), two_ends)
    gap = [LOG[0], *LOG[2:]]
    assert "stored sequences are not 1..4: position 1 has #3" in _problems(History(), gap)
    assert "the first event is #2 context_built, not run_started" in _problems(History(), LOG[1:])
    assert "the last event #4 text_delta is not terminal" in _problems(History(), LOG[:4])
    bad_trace = [*LOG[:4], _event(5, "run_completed", trace_id="0" * 32)]
    problems = _problems(History(), bad_trace)
    assert f"run {RUN} #5 run_completed: invalid trace_id '{'0' * 32}'" in problems
    assert "2 trace ids in one run" in problems
    upper = [*LOG[:4], _event(5, "run_completed", span_id="ABCDEF0123456789")]
    assert "invalid span_id 'ABCDEF0123456789'" in _problems(History(), upper)


def test_checker_matches_get_run_and_cancel_replies_with_the_terminal_event() -> None:
    failed = {RUN: pb.RunRecord(id=RUN, status=c.RUN_STATUS_FAILED)}
    assert "GetRun status RUN_STATUS_FAILED but the log ends with #5 run_completed" in (
        _problems(History(), runs=failed)
    )
    history = History()
    history.record_cancel(RUN, reply=pb.CancelRunResponse(status=c.RUN_STATUS_CANCELLED))
    assert "CancelRun answered OK but the run ended #5 run_completed" in _problems(history)
    cancelled = [*LOG[:4], _event(5, "run_cancelled")]
    records = {RUN: pb.RunRecord(id=RUN, status=c.RUN_STATUS_CANCELLED)}
    history = History()
    history.record_cancel(RUN, error=_rpc_error(grpc.StatusCode.FAILED_PRECONDITION))
    assert "answered FAILED_PRECONDITION ('no') but the run ended #5 run_cancelled" in (
        _problems(history, cancelled, records)
    )
    history = History()
    history.record_cancel(RUN, reply=pb.CancelRunResponse())
    assert "status RUN_STATUS_UNSPECIFIED, not RUN_STATUS_CANCELLED" in (
        _problems(history, cancelled, records)
    )


def _rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details="no")
