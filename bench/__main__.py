"""`python -m bench`: quick figures of a behest server started in a child process.

Prints events/s of one long `script` run streamed to one client, and the median time from
CreateRunStream to its first event. Issue 6 grows this into the full suite with floors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

import grpc

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc


def request(input_: str, model: str) -> pb.CreateRunRequest:
    return pb.CreateRunRequest(
        provider=c.ProviderId(value="local"), model=c.ModelName(value=model), input=input_
    )


async def start_server(data_dir: str, database_url: str) -> tuple[asyncio.subprocess.Process, str]:
    env = {**os.environ, "BEHEST_LOG_FORMAT": "json", "BEHEST_LOG_LEVEL": "WARNING"}
    if database_url:
        env["BEHEST_DATABASE_URL"] = database_url
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "behest",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data_dir,
        stderr=asyncio.subprocess.PIPE,
        env={**env, "BEHEST_LOG_LEVEL": "INFO"},
    )
    assert process.stderr is not None
    while True:
        line = await process.stderr.readline()
        if not line:
            raise RuntimeError("server exited before serving")
        if line.startswith(b"{") and json.loads(line).get("msg") == "behest serving":
            return process, f"127.0.0.1:{json.loads(line)['port']}"


async def long_run(stub: rpc.RunServiceStub, deltas: int) -> float:
    script = json.dumps({"steps": [{"deltas": deltas}]})
    began = time.perf_counter()
    count = 0
    async for _ in stub.CreateRunStream(request(script, "script")):
        count += 1
    return count / (time.perf_counter() - began)


async def first_event_ms(stub: rpc.RunServiceStub, runs: int) -> float:
    samples = []
    for i in range(runs):
        began = time.perf_counter()
        stream = stub.CreateRunStream(request(f"first event {i}", "echo"))
        async for _ in stream:
            samples.append((time.perf_counter() - began) * 1000)
            break
        async for _ in stream:
            pass
    return statistics.median(samples)


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--first-event-runs", type=int, default=50)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        process, address = await start_server(data_dir, args.database_url)
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = rpc.RunServiceStub(channel)
                await first_event_ms(stub, 3)  # warm up
                rate = await long_run(stub, args.deltas)
                ttfe = await first_event_ms(stub, args.first_event_runs)
        finally:
            process.terminate()
            await process.wait()
    print(f"one long run ({args.deltas} deltas), events/s: {rate:,.0f}")
    print(f"CreateRunStream time to first event, median ms: {ttfe:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
