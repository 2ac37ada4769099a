"""Item 10 (issue 25): worker tools against the in-process calculator, on one SQLite server.

10.1: sequential runs of one tool call each (Sizes.worker_round_trips); a call's round trip
is the time between its ToolExecutionStarted and ToolExecutionFinished (the events' own
timestamps, set as each step is emitted): the calculator's in behest's process, a worker
tool's through a worker connected to the server (one that answers at once, over the wire:
tests/workers/raw.py). The overhead (worker p50 - calculator p50) is compared with the unary
floor (target ≤ 3x).
10.2: runs of 5 tool calls each (Sizes.worker_runs), 20 at a time: calls/s through 10
workers against calls/s of the in-process calculator (target ≥ 0.5x).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest._proto.agent.v1 import worker_pb2 as w
from bench.items import channel, create_request, percentile
from bench.sizes import Sizes
from tests.workers.raw import RawWorker

TOOL = "echo_back"
SPEC = w.WorkerToolSpec(
    name=TOOL,
    description="Answers 42.",
    parameters_schema=json.dumps({"type": "object", "properties": {"expression": {}}}),
    idempotent=True,
    concurrency_safe=True,
)
WORKERS = 10
# A run's model calls stay under max_iterations (10), each tool call differs from the last
# (the doom-loop rule stops a run that repeats one).
CALLS_PER_RUN, AT_ONCE = 5, 20


def _calls(tool: str, calls: int) -> str:
    steps = [
        {"tool_calls": [{"name": tool, "arguments": {"expression": f"{n}*7"}}]}
        for n in range(calls)
    ]
    return json.dumps({"steps": [*steps, {"text": "done"}]})


async def _run(stub: rpc.RunServiceStub, tool: str, calls: int) -> list[pb.AgentEvent]:
    events = [e async for e in stub.CreateRunStream(create_request(_calls(tool, calls), "script"))]
    last = events[-1].WhichOneof("event")
    assert last == "run_completed", f"a {tool} run ended {last}"
    return events


def _round_trips_ms(events: list[pb.AgentEvent]) -> list[float]:
    started: dict[str, float] = {}
    took = []
    for event in events:
        at = event.timestamp.ToNanoseconds() / 1e6
        match event.WhichOneof("event"):
            case "tool_execution_started":
                started[event.tool_execution_started.call_id] = at
            case "tool_execution_finished":
                took.append(at - started.pop(event.tool_execution_finished.call_id))
    return took


async def round_trips(stub: rpc.RunServiceStub, tool: str, count: int) -> dict[str, float]:
    samples: list[float] = []
    warm_up = max(1, count // 10)
    for i in range(warm_up + count):
        took = _round_trips_ms(await _run(stub, tool, 1))
        if i >= warm_up:
            samples += took
    return {"p50_ms": percentile(samples, 50), "p99_ms": percentile(samples, 99)}


async def calls_per_s(stub: rpc.RunServiceStub, tool: str, runs: int) -> float:
    slots = asyncio.Semaphore(AT_ONCE)

    async def one() -> None:
        async with slots:
            await _run(stub, tool, CALLS_PER_RUN)

    began = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(runs)))
    return runs * CALLS_PER_RUN / (time.perf_counter() - began)


@contextlib.asynccontextmanager
async def _workers(address: str) -> AsyncIterator[None]:
    """WORKERS wire workers that answer every task at once, heartbeating."""
    async with channel(address) as ch:
        workers = [RawWorker(ch, [SPEC], name=f"bench-{i}", max_tasks=8) for i in range(WORKERS)]
        for worker in workers:
            await worker.welcome()
        jobs = [asyncio.create_task(_serve(worker)) for worker in workers]
        try:
            yield
        finally:
            for job in jobs:
                job.cancel()
            for worker in workers:
                await worker.close()


async def _serve(worker: RawWorker) -> None:
    beat = time.monotonic()
    while True:
        item = await worker.next()
        if isinstance(item, w.WorkerTask):
            await worker.send(item, "42")
        if time.monotonic() - beat > 1.0:
            await worker.heartbeat()
            beat = time.monotonic()


async def measure(address: str, sizes: Sizes) -> dict[str, Any]:
    trips, runs = sizes.worker_round_trips, sizes.worker_runs
    async with _workers(address), channel(address) as ch:
        stub = rpc.RunServiceStub(ch)
        calculator = await round_trips(stub, "calculator", trips)
        worker = await round_trips(stub, TOOL, trips)
        rates = [await calls_per_s(stub, "calculator", runs) for _ in range(2)]
        in_process = statistics.median(rates)
        through_workers = statistics.median([await calls_per_s(stub, TOOL, runs) for _ in range(2)])
    return {
        "calculator": calculator,
        "worker": worker,
        "overhead_p50_ms": worker["p50_ms"] - calculator["p50_ms"],
        "calculator_calls_per_s": in_process,
        "worker_calls_per_s": through_workers,
        "workers": WORKERS,
    }
