"""A server's log stream is JSON, line for line: its MCP servers' stderr comes wrapped in
entries that name the server, and grpc-core's own lines are off unless asked for."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import grpc

from behest._proto.agent.v1 import run_pb2_grpc as rpc
from tests.support import collect, create_request, kind, script, server_process

ECHO_SERVER = Path(__file__).parents[1] / "mcp_servers" / "echo_server.py"
ADD = {"name": "echo__add", "arguments": {"a": 2, "b": 3}}


def not_json(line: str) -> bool:
    try:
        return not isinstance(json.loads(line), dict)
    except ValueError:
        return True


async def test_a_server_with_an_mcp_server_writes_only_json_lines(tmp_path: Path) -> None:
    settings = tmp_path / "behest.toml"
    settings.write_text(
        f'[mcp.servers.echo]\ncommand = "{sys.executable}"\nargs = ["{ECHO_SERVER}"]\n'
    )
    lines: list[str] = []
    env = {
        "BEHEST_CONFIG": str(settings),
        # As if unset: the command's own choice for grpc-core's lines is what is tried.
        "GRPC_VERBOSITY": "",
        "GRPC_ENABLE_FORK_SUPPORT": "",
    }
    async with server_process(tmp_path / "data", lines=lines, **env) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            runs = rpc.RunServiceStub(channel)
            steps = script({"tool_calls": [ADD]}, {"text": "added"})
            events = await collect(runs.CreateRunStream(create_request(steps, model="script")))
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await process.wait()
    finished = [e.tool_execution_finished for e in events if kind(e) == "tool_execution_finished"]
    assert [(f.tool_name, f.is_error) for f in finished] == [("echo__add", False)]
    assert lines and [line for line in lines if not_json(line)] == []
    entries = [json.loads(line) for line in lines]
    wrapped = [e for e in entries if e.get("mcp_server") == "echo" and "stderr" in e["msg"]]
    assert any("serving over stdio" in e["msg"] for e in wrapped), wrapped
    assert entries[-1]["msg"] == "behest stopped"
