"""Tools that misbehave: MCP servers (tests/mcp_servers/faulty_server.py, the SDK's server over
stdio) answering JSON-RPC errors of any code, breaking the protocol, or answering 50 MB; the
model sees an error it can react to, the server stays (or comes back), and behest's memory
stays near the output bound."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest.tools.base import ToolResult
from behest.tools.mcp import McpServerConfig, McpToolSource
from behest.tools.output import MAX_BYTES
from tests.support import collect, create_request, kind, mcp_http_server, script, server_process

FAULTY_SERVER = Path(__file__).parents[1] / "mcp_servers" / "faulty_server.py"
MB = 1024 * 1024

Start = Callable[..., Awaitable[McpToolSource]]


def faulty(*args: str, timeout_s: float = 60) -> McpServerConfig:
    return McpServerConfig(
        name="faulty",
        command=sys.executable,
        args=(str(FAULTY_SERVER), *args),
        timeout_s=timeout_s,
    )


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    """Start a source of the given configs; every source is stopped after the test."""
    sources: list[McpToolSource] = []

    async def start(*configs: McpServerConfig) -> McpToolSource:
        source = McpToolSource(configs)
        sources.append(source)
        await source.start()
        await source.settled()
        return source

    yield start
    for source in sources:
        await source.stop()


async def call(source: McpToolSource, name: str, **arguments: Any) -> ToolResult:
    (tool,) = [t for s in source.servers() for t in s.tools if t.name == f"faulty__{name}"]
    result = await tool(arguments)
    assert isinstance(result, ToolResult)
    return result


def mcp_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "behest.tools.mcp" and r.levelno == logging.ERROR
    ]


# --- JSON-RPC errors are the server's answers, whatever their code --------------------------


@pytest.mark.parametrize("code", [-32000, -32001, -32602, 4242])
async def test_a_json_rpc_error_is_a_tool_error_with_the_servers_message(
    start: Start, code: int
) -> None:
    source = await start(faulty(timeout_s=30))
    began = time.monotonic()
    result = await call(source, "error", code=code, message=f"the widget is jammed ({code})")
    assert result == ToolResult(f"MCP tool 'error' failed: the widget is jammed ({code})", True)
    assert time.monotonic() - began < 10  # answered, not timed out
    assert await call(source, "add", a=2, b=3) == ToolResult("5")
    assert source.status() == {"faulty": "ready"}


async def test_arguments_that_are_not_valid_unicode_are_refused_and_the_server_stays(
    start: Start,
) -> None:
    source = await start(faulty())
    result = await call(source, "error", code=1, message="lone \ud800 surrogate")
    assert result.is_error
    assert "its arguments hold text that is not valid Unicode" in result.text
    assert await call(source, "add", a=2, b=3) == ToolResult("5")
    assert source.status() == {"faulty": "ready"}


# --- output that breaks the protocol: the call fails at once, the server is restarted --------


@pytest.mark.parametrize(
    ("kind", "cause"),
    [
        ("utf8", "its output is not UTF-8"),
        ("json", "it wrote a line that is not a JSON-RPC message: 'this is not JSON-RPC'"),
    ],
)
async def test_a_server_that_breaks_the_protocol_fails_the_call_at_once_and_is_restarted(
    start: Start, caplog: pytest.LogCaptureFixture, kind: str, cause: str
) -> None:
    source = await start(faulty(timeout_s=60))
    first_pid = (await call(source, "pid")).text
    began = time.monotonic()
    broken = await call(source, "garble", kind=kind)
    assert broken.is_error
    assert f"the server broke the protocol: {cause}" in broken.text
    assert "behest is restarting MCP server 'faulty'" in broken.text
    assert time.monotonic() - began < 10  # the timeout is 60 s
    # Calls made meanwhile wait for the restart, then work.
    assert await call(source, "add", a=1, b=2) == ToolResult("3")
    (logged,) = [m for m in mcp_errors(caplog) if "MCP server 'faulty'" in m]
    assert cause in logged and "restarting it" in logged
    assert (await call(source, "pid")).text != first_pid
    assert source.status() == {"faulty": "ready"}


async def test_a_banner_before_the_first_message_is_skipped(start: Start) -> None:
    source = await start(faulty("--banner"))
    assert source.status() == {"faulty": "ready"}
    assert await call(source, "add", a=1, b=2) == ToolResult("3")


# --- answers of any size cost about the output bound ----------------------------------------


@pytest.fixture
async def http_url() -> AsyncIterator[str]:
    """The faulty server over streamable HTTP on 127.0.0.1 (JSON answers)."""
    async with mcp_http_server(FAULTY_SERVER) as url:
        yield url


async def test_an_answer_over_the_bound_over_http_is_an_error_and_the_server_stays(
    http_url: str, start: Start
) -> None:
    source = await start(McpServerConfig(name="faulty", url=http_url))
    result = await call(source, "big", size=2 * MB)
    assert result.is_error
    assert "the answer is over the 1,048,576 bytes behest reads" in result.text
    assert await call(source, "add", a=1, b=2) == ToolResult("3")
    assert source.status() == {"faulty": "ready"}


def settings_file(tmp_path: Path) -> Path:
    path = tmp_path / "behest.toml"
    path.write_text(
        f'[mcp.servers.faulty]\ncommand = "{sys.executable}"\nargs = ["{FAULTY_SERVER}"]\n'
        "timeout_s = 60\n"
    )
    return path


async def tool_text(stub: rpc.RunServiceStub, tool: str, **arguments: object) -> str:
    """What the model saw of one call of `faulty__<tool>`, through a `script` run."""
    steps = script(
        {"tool_calls": [{"name": f"faulty__{tool}", "arguments": arguments}]},
        {"say": "tool_results"},
    )
    # The run waits for the server while it starts (behest serve does not).
    events = await collect(stub.CreateRunStream(create_request(steps, model="script")))
    assert kind(events[-1]) == "run_completed"
    last_turn = max(i for i, e in enumerate(events) if kind(e) == "model_started")
    said = "".join(e.text_delta.delta for e in events[last_turn:] if kind(e) == "text_delta")
    return said.removeprefix(f"faulty__{tool}: ").removeprefix("error: ")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def within_the_bound(text: str) -> bool:
    *kept, note = text.split("\n")
    return note.startswith("[output truncated: ") and len("\n".join(kept).encode()) <= MAX_BYTES


async def test_a_50_mb_answer_costs_behest_about_the_output_bound(tmp_path: Path) -> None:
    config = {"BEHEST_CONFIG": str(settings_file(tmp_path))}
    async with server_process(tmp_path / "data", **config) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            # Every path the big answer takes, taken once before measuring.
            await tool_text(stub, "big", size=2 * MB)
            before = rss_bytes(process.pid)
            began = time.monotonic()
            seen = await tool_text(stub, "big", size=50 * MB)
            took = time.monotonic() - began
            after = rss_bytes(process.pid)
    print(f"behest's RSS {before / MB:.1f} MiB before, {after / MB:.1f} MiB after; {took:.1f} s")
    assert after - before < 2 * MAX_BYTES + 20 * MB, (before, after)
    assert took < 30
    said_size = seen.removeprefix("the answer was ").partition(" bytes")[0]
    # The text twice: the SDK's server adds it as structured content too.
    assert int(said_size.replace(",", "")) > 100 * MB
    assert "behest reads; it begins:\nxxxxxxxx" in seen
    assert within_the_bound(seen)


@pytest.mark.parametrize("count", [100_000, 1_000_000])
async def test_a_result_of_nuls_stays_within_the_bound(tmp_path: Path, count: int) -> None:
    config = {"BEHEST_CONFIG": str(settings_file(tmp_path))}
    async with server_process(tmp_path / "data", **config) as (_, address):
        async with grpc.aio.insecure_channel(address) as channel:
            seen = await tool_text(rpc.RunServiceStub(channel), "nuls", count=count)
    assert "\x00" not in seen
    assert "\ufffd" * 1000 in seen
    assert within_the_bound(seen)
