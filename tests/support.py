"""Test support: a real behest server on 127.0.0.1:0, request builders, event helpers."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest.app import App
from behest.config import Settings

POSTGRES_URL = os.environ.get("BEHEST_TEST_POSTGRES_URL", "")


@dataclass
class Server:
    """A running in-process server and stubs on one channel to it."""

    app: App
    address: str
    channel: grpc.aio.Channel
    runs: rpc.RunServiceStub
    compaction: rpc.CompactionServiceStub
    snapshots: rpc.SnapshotServiceStub


def fast_settings(data_dir: Path, **overrides: object) -> Settings:
    """Settings for tests: ephemeral port, quick retries, quick shutdown."""
    values: dict[str, object] = {
        "listen": "127.0.0.1:0",
        "data_dir": str(data_dir),
        "provider_backoff_initial_s": 0.01,
        "provider_backoff_max_s": 0.05,
        "shutdown_grace_s": 0.0,
        "log_format": "text",
    }
    values.update(overrides)
    return Settings().with_values(values, source="tests")


PLUGIN_PATH = Path(__file__).parent / "plugin_path"


async def start_server_with_plugins(settings: Settings) -> Server:
    """A server with the test tool plugin installed (found through its entry point)."""
    sys.path.insert(0, str(PLUGIN_PATH))
    importlib.invalidate_caches()
    try:
        return await start_server(settings)
    finally:
        sys.path.remove(str(PLUGIN_PATH))


async def start_server(settings: Settings) -> Server:
    app = App(settings)
    await app.start()
    address = f"127.0.0.1:{app.port}"
    channel = grpc.aio.insecure_channel(address)
    return Server(
        app=app,
        address=address,
        channel=channel,
        runs=rpc.RunServiceStub(channel),
        compaction=rpc.CompactionServiceStub(channel),
        snapshots=rpc.SnapshotServiceStub(channel),
    )


async def stop_server(server: Server) -> None:
    await server.channel.close()
    await server.app.stop(0)


def create_request(
    input: str, *, model: str = "echo", provider: str = "local", **fields: str
) -> pb.CreateRunRequest:
    return pb.CreateRunRequest(
        provider=c.ProviderId(value=provider),
        model=c.ModelName(value=model),
        input=input,
        **fields,
    )


def script(*steps: dict[str, object]) -> str:
    """Input for the local `script` model."""
    return json.dumps({"steps": list(steps)})


def kind(event: pb.AgentEvent) -> str:
    return event.WhichOneof("event") or ""


async def collect(stream: AsyncIterator[pb.AgentEvent]) -> list[pb.AgentEvent]:
    return [event async for event in stream]
