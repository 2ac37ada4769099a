"""Item 11: the HTTP doors against gRPC on one server (issue 26).

One behest server with its HTTP listener on, one event per model delta; the same `script` run
streamed over gRPC (`CreateRunStream`), over Connect (`CreateRunStream` as
`application/connect+json`, what browsers and curl speak) and over plain server-sent events
(`POST /v1/runs`); events/s of each (every event parsed and its sequence checked), then time
to the first event of sequential `echo` runs over each. The client is httpx2, in this process.
"""

from __future__ import annotations

import json
import statistics
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2

from behest._proto.agent.v1 import run_pb2_grpc as rpc
from bench.items import create_request, follow, now, raise_problem, script

TERMINAL = ("runCompleted", "runFailed", "runCancelled")


def _run_json(input_: str, model: str) -> dict[str, Any]:
    return {"provider": {"value": "local"}, "model": {"value": model}, "input": input_}


class _Count:
    """Events read from one door's stream: count, sequences checked, first-event time."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.events = 0
        self.first_ms: float | None = None
        self.ended = ""

    def seen(self, event: dict[str, Any]) -> None:
        if self.first_ms is None:
            self.first_ms = (now() - self.started) * 1000
        self.events += 1
        if int(event["sequence"]) != self.events:
            raise RuntimeError(f"gap: event {event['sequence']} after {self.events - 1}")
        for key in TERMINAL:
            if key in event:
                self.ended = key


async def _connect_run(client: httpx2.AsyncClient, base: str, body: dict[str, Any]) -> _Count:
    data = json.dumps(body).encode()
    frame = struct.pack(">BI", 0, len(data)) + data
    url = f"{base}/agent.v1.RunService/CreateRunStream"
    headers = {"content-type": "application/connect+json"}
    count = _Count(now())
    async with client.stream("POST", url, content=frame, headers=headers) as response:
        buffer = b""
        async for chunk in response.aiter_bytes():
            buffer += chunk
            while len(buffer) >= 5:
                flags, size = struct.unpack(">BI", buffer[:5])
                if len(buffer) < 5 + size:
                    break
                message, buffer = buffer[5 : 5 + size], buffer[5 + size :]
                if flags & 0x02:
                    end = json.loads(message)
                    if end.get("error"):
                        raise RuntimeError(f"connect stream failed: {end['error']}")
                    return count
                count.seen(json.loads(message))
    return count


async def _sse_run(client: httpx2.AsyncClient, base: str, body: dict[str, Any]) -> _Count:
    count = _Count(now())
    async with client.stream("POST", f"{base}/v1/runs", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"POST /v1/runs: {response.status_code} {await response.aread()}")
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                count.seen(json.loads(line[5:]))
    return count


Door = Callable[[httpx2.AsyncClient, str, dict[str, Any]], Awaitable[_Count]]
DOORS: dict[str, Door] = {"connect": _connect_run, "sse": _sse_run}


async def _grpc_runs(address: str, request_of: Callable[[int], Any]) -> AsyncIterator[Any]:
    from bench.items import channel

    async with channel(address) as ch:
        stub = rpc.RunServiceStub(ch)
        i = 0
        while True:
            started = now()
            tally = await follow(stub.CreateRunStream(request_of(i)), started)
            raise_problem(tally, "grpc run")
            yield tally
            i += 1


async def long_runs(address: str, base: str, deltas: int, repeats: int) -> dict[str, Any]:
    """Events/s of one `deltas`-delta run over gRPC, Connect and SSE (median of `repeats`)."""
    rates: dict[str, list[float]] = {"grpc": [], **{name: [] for name in DOORS}}
    grpc_runs = _grpc_runs(address, lambda i: create_request(script(deltas), "script"))
    async with httpx2.AsyncClient(timeout=300) as client:
        for _ in range(repeats):
            tally = await anext(grpc_runs)
            rates["grpc"].append(tally.events / tally.seconds)
            for name, door in DOORS.items():
                started = now()
                count = await door(client, base, _run_json(script(deltas), "script"))
                if count.ended != "runCompleted":
                    raise RuntimeError(f"{name} run ended {count.ended or 'without an end'}")
                rates[name].append(count.events / (now() - started))
    await grpc_runs.aclose()
    return {name: statistics.median(samples) for name, samples in rates.items()} | {
        "deltas": deltas,
        "samples": rates,
    }


async def first_events(address: str, base: str, warm_up: int, samples: int) -> dict[str, Any]:
    """Median ms from the call to the first event of sequential `echo` runs, per door."""
    firsts: dict[str, list[float]] = {"grpc": [], **{name: [] for name in DOORS}}
    grpc_runs = _grpc_runs(address, lambda i: create_request(f"first event {i}", "echo"))
    async with httpx2.AsyncClient(timeout=60) as client:
        for i in range(warm_up + samples):
            tally = await anext(grpc_runs)
            counts = {
                name: await door(client, base, _run_json(f"first event {i}", "echo"))
                for name, door in DOORS.items()
            }
            if i < warm_up:
                continue
            assert tally.first_event_ms is not None
            firsts["grpc"].append(tally.first_event_ms)
            for name, count in counts.items():
                assert count.first_ms is not None
                firsts[name].append(count.first_ms)
    await grpc_runs.aclose()
    return {f"{name}_ms": statistics.median(ms) for name, ms in firsts.items()} | {
        "samples": samples
    }
