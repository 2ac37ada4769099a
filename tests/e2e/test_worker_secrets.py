"""A worker's token stays a secret (issue 25): a worker process (behest.worker, logging at
DEBUG) with a canary token serves a run through a server with bearer tokens, and one with the
canary changed by one character is refused; the canary appears in none of the worker's
output, the server's log, the database, the events or the execution records, and the refusal
does not echo the token it got."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import sys
from pathlib import Path

import pytest

from behest._proto.agent.v1 import catalog_pb2 as cat
from behest._proto.agent.v1 import catalog_pb2_grpc as cat_rpc
from behest._proto.agent.v1 import execution_pb2 as x
from behest._proto.agent.v1 import execution_pb2_grpc as x_rpc
from tests.support import (
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    start_server,
    stop_server,
)

ROOT = Path(__file__).resolve().parents[2]


def stored(data_dir: Path) -> list[bytes]:
    """Every file of the server's data directory, as bytes."""
    return [p.read_bytes() for p in data_dir.rglob("*") if p.is_file()]


async def run_worker(address: str, token: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "BEHEST_TOKEN": token, "PYTHONPATH": str(ROOT), "ORDERS_WORKER_NAME": ""}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "behest", "worker", "run", "tests.workers.orders:worker",
        "--address", address, "--log-level", "DEBUG",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=ROOT,
    )  # fmt: skip


async def test_a_workers_token_appears_nowhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    canary = "canary-worker-" + secrets.token_hex(16)
    digest = hashlib.sha256(canary.encode()).hexdigest()
    auth = {
        "auth": {
            "mode": "bearer",
            "tokens": {"w": {"sha256": digest, "principal": "w", "tenant": "acme"}},
        }
    }
    caplog.set_level(logging.DEBUG)
    server = await start_server(fast_settings(tmp_path).with_tables(auth, source="tests"))
    meta = (("authorization", f"Bearer {canary}"),)
    good = await run_worker(server.address, canary)
    bad = await run_worker(server.address, canary[:-1] + ("x" if canary[-1] != "x" else "y"))
    try:
        tools = cat_rpc.ToolServiceStub(server.channel)
        async with asyncio.timeout(20):
            while True:
                listed_tools = await tools.ListTools(cat.ListToolsRequest(), metadata=meta)
                if any(t.spec.name == "lookup_order" for t in listed_tools.tools):
                    break
                await asyncio.sleep(0.05)  # a worker's connection is not an event a client sees
        call = {"name": "lookup_order", "arguments": {"order_id": "A-9"}}
        steps = script({"tool_calls": [call]}, {"say": "tool_results"})
        stream = server.runs.CreateRunStream(create_request(steps, model="script"), metadata=meta)
        events = await collect(stream)
        listed = await x_rpc.ToolExecutionServiceStub(server.channel).ListToolExecutions(
            x.ListToolExecutionsRequest(run_id=events[0].run_id), metadata=meta
        )
        _, refused = await asyncio.wait_for(bad.communicate(), 30)  # it gives up, exit 2
    finally:
        good.terminate()
        out, err = await good.communicate()
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    assert bad.returncode == 2 and b"UNAUTHENTICATED" in refused
    seen = [out, err, refused, caplog.text.encode(), str(events).encode(), str(listed).encode()]
    seen += stored(tmp_path)
    for piece in (canary, canary[4:-4], canary[-20:]):
        assert all(piece.encode() not in blob for blob in seen), piece
