"""MCP tools end to end: a real MCP server (tests/mcp_servers/echo_server.py) over stdio and
streamable HTTP on 127.0.0.1, driven through McpToolSource and the ToolRegistry."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import uvloop
from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from behest.domain.messages import ToolCall
from behest.tools.base import Tool, ToolResult
from behest.tools.mcp import McpServerConfig, McpToolSource, result_text
from behest.tools.mcp_states import McpServerState
from behest.tools.registry import ToolRegistry
from tests.support import mcp_http_server

ECHO_SERVER = Path(__file__).parents[1] / "mcp_servers" / "echo_server.py"
LEGACY_SERVER = Path(__file__).parents[1] / "mcp_servers" / "legacy_server.py"

Start = Callable[..., Awaitable[McpToolSource]]


def echo(name: str = "echo", **options: Any) -> McpServerConfig:
    return McpServerConfig(name=name, command=sys.executable, args=(str(ECHO_SERVER),), **options)


def python(name: str, code: str) -> McpServerConfig:
    return McpServerConfig(name=name, command=sys.executable, args=("-c", code))


def by_name(source: McpToolSource) -> dict[str, Tool]:
    """Every tool the servers have listed, whether their server is ready now or not."""
    return {tool.name: tool for server in source.servers() for tool in server.tools}


async def call(source: McpToolSource, name: str, **arguments: Any) -> ToolResult:
    result = await by_name(source)[name](arguments)
    assert isinstance(result, ToolResult)
    return result


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def until(source: McpToolSource, name: str, state: str) -> McpServerState:
    """The server's state once it is `state` (now or when it becomes so)."""
    reached: asyncio.Future[McpServerState] = asyncio.get_running_loop().create_future()

    def heard(server: McpServerState) -> None:
        if server.name == name and server.state == state and not reached.done():
            reached.set_result(server)

    source.watch(heard)
    for server in source.servers():
        heard(server)
    return await asyncio.wait_for(reached, 20)


def mcp_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "behest.tools.mcp" and r.levelno == logging.ERROR
    ]


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    """Start a source of the given configs; every source is stopped after the test."""
    sources: list[McpToolSource] = []

    async def start(*configs: McpServerConfig, **options: Any) -> McpToolSource:
        source = McpToolSource(configs, **options)
        sources.append(source)
        await source.start()
        await source.settled()
        return source

    yield start
    for source in sources:
        await source.stop()


@pytest.fixture
async def http_echo_url() -> AsyncIterator[str]:
    """The echo server over streamable HTTP on 127.0.0.1, on a port of its choosing."""
    async with mcp_http_server(ECHO_SERVER) as url:
        yield url


async def test_tools_are_named_after_their_server_and_keep_their_schemas(start: Start) -> None:
    source = await start(echo(timeout_s=7))
    tools = by_name(source)
    assert {"echo__add", "echo__shout"} <= set(tools)
    add, shout = tools["echo__add"], tools["echo__shout"]
    assert add.parameters_schema["properties"].keys() == {"a", "b"}
    assert add.parameters_schema["properties"]["a"]["type"] == "integer"
    assert add.parameters_schema["required"] == ["a", "b"]
    assert shout.parameters_schema["properties"]["text"]["type"] == "string"
    assert "Add two integers." in add.description
    assert "MCP server 'echo'" in add.description
    assert add.timeout_s == 7
    assert source.status() == {"echo": "ready"}


async def test_tool_hints_become_flags(start: Start) -> None:
    tools = by_name(await start(echo()))
    add, shout = tools["echo__add"], tools["echo__shout"]
    assert (add.read_only, add.idempotent, add.concurrency_safe) == (True, True, True)
    assert (shout.read_only, shout.idempotent, shout.concurrency_safe) == (False, False, False)


async def test_calls_return_the_tools_text(start: Start) -> None:
    source = await start(echo())
    assert await call(source, "echo__add", a=2, b=3) == ToolResult("5")
    assert await call(source, "echo__shout", text="hi") == ToolResult("HI!")


async def test_calls_run_through_the_registry(start: Start) -> None:
    registry = ToolRegistry((await start(echo())).tools())
    assert await registry.execute(ToolCall("c1", "echo__add", '{"a": 40, "b": 2}')) == ToolResult(
        "42"
    )
    rejected = await registry.execute(ToolCall("c2", "echo__add", '{"a": "x", "b": 2}'))
    assert rejected.is_error


async def test_concurrent_calls_each_get_their_own_answer(start: Start) -> None:
    source = await start(echo())
    results = await asyncio.gather(*(call(source, "echo__add", a=i, b=i) for i in range(20)))
    assert [r.text for r in results] == [str(2 * i) for i in range(20)]


async def test_a_server_speaking_only_the_2025_handshake_works(start: Start) -> None:
    config = McpServerConfig(name="old", command=sys.executable, args=(str(LEGACY_SERVER),))
    source = await start(config)
    assert source.status() == {"old": "ready"}
    assert by_name(source)["old__greet"].read_only
    assert await call(source, "old__greet", who="bob") == ToolResult("hello, bob")


async def test_a_tool_error_is_an_error_result(start: Start) -> None:
    result = await call(await start(echo()), "echo__fail", reason="boom")
    assert result.is_error
    assert "boom" in result.text


async def test_non_text_content_is_described(start: Start) -> None:
    result = await call(await start(echo()), "echo__picture")
    assert result == ToolResult("a red dot\n[image: image/png]")


async def test_a_slow_call_times_out_and_the_server_stays_usable(start: Start) -> None:
    source = await start(echo(timeout_s=0.5))
    began = time.monotonic()
    result = await call(source, "echo__slow", seconds=30)
    assert result.is_error
    assert "timed out" in result.text
    assert time.monotonic() - began < 3
    assert await call(source, "echo__add", a=1, b=1) == ToolResult("2")
    assert source.status() == {"echo": "ready"}


async def test_servers_that_fail_to_start_give_no_tools_and_are_logged(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    source = await start(
        McpServerConfig(name="missing", command="/nonexistent/behest-mcp-server"),
        python("quits", "raise SystemExit(1)"),
        McpServerConfig(name="refused", url=f"http://127.0.0.1:{closed_port()}/mcp"),
        echo(),
    )
    assert {t.name.partition("__")[0] for t in source.tools()} == {"echo"}
    assert await call(source, "echo__add", a=1, b=2) == ToolResult("3")
    status = source.status()
    assert status["echo"] == "ready"
    assert status["missing"] == (
        "failed: cannot run command '/nonexistent/behest-mcp-server': No such file or directory"
    )
    # Its exit is seen as its output ending or its input closed, whichever comes first.
    assert status["quits"].startswith("failed: the server ")
    assert status["refused"] == "failed: All connection attempts failed"
    errors = mcp_errors(caplog)
    for name in ("missing", "quits", "refused"):
        # Tried again and again; an error once, the next failures warnings or infos.
        (message,) = [m for m in errors if f"MCP server {name!r}" in m]
        assert "failed to start" in message
        assert "trying again in" in message
    for name in ("missing", "refused"):  # their cause is the same every time
        assert any(status[name].removeprefix("failed: ") in m for m in errors)


def test_a_missing_command_is_named_on_uvloop() -> None:
    """uvloop's OSError of a spawn names no file (asyncio's does): behest names it."""

    async def status() -> dict[str, str]:
        source = McpToolSource([McpServerConfig(name="gone", command="behest-no-such-command")])
        await source.start()
        await source.settled()
        try:
            return source.status()
        finally:
            await source.stop()

    assert uvloop.run(status()) == {
        "gone": "failed: cannot run command 'behest-no-such-command': No such file or directory"
    }


async def test_start_waits_for_no_server_and_one_that_never_answers_fails(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    source = McpToolSource(
        [python("mute", "import time; time.sleep(60)"), echo()], start_timeout_s=3
    )
    began = time.monotonic()
    try:
        await source.start()
        assert time.monotonic() - began < 0.2
        assert source.status() == {"mute": "starting", "echo": "starting"}
        assert source.tools() == []
        await source.settled()
        assert source.status() == {"mute": "failed: did not start within 3 s", "echo": "ready"}
        assert {t.name.partition("__")[0] for t in source.tools()} == {"echo"}
        assert any("MCP server 'mute'" in m for m in mcp_errors(caplog))
    finally:
        await source.stop()


async def test_a_failed_server_is_tried_again_until_it_starts(start: Start, tmp_path: Path) -> None:
    """A server whose command fails until a file exists: failed, then ready once it can."""
    flag = tmp_path / "may-start"
    code = (
        f"import os, runpy, sys; os.path.exists({str(flag)!r}) or sys.exit(1); "
        f"sys.argv = [{str(ECHO_SERVER)!r}]; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    source = await start(python("late", code), restart_max_s=0.2)
    assert source.status()["late"].startswith("failed: the server ")  # it exited
    assert source.tools() == []
    flag.touch()
    await until(source, "late", "ready")
    (later,) = source.servers()
    assert later.listed and {"late__add", "late__pid"} <= {t.name for t in later.tools}
    assert await call(source, "late__add", a=2, b=2) == ToolResult("4")


async def test_a_server_that_dies_is_restarted_and_its_tools_work_again(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    source = await start(echo(timeout_s=60), echo("other"))
    first_pid = (await call(source, "echo__pid")).text
    began = time.monotonic()
    died = await call(source, "echo__exit_now")
    assert died.is_error
    assert "the server closed the connection" in died.text
    assert "behest is restarting MCP server 'echo'" in died.text
    assert time.monotonic() - began < 10
    # A call made while it restarts waits for it.
    assert await call(source, "echo__add", a=1, b=2) == ToolResult("3")
    assert (await call(source, "echo__pid")).text != first_pid
    assert source.status() == {"echo": "ready", "other": "ready"}
    assert await call(source, "other__add", a=1, b=2) == ToolResult("3")
    assert any("MCP server 'echo'" in m and "restarting it" in m for m in mcp_errors(caplog))


async def test_stop_ends_the_server_process_and_can_be_repeated(start: Start) -> None:
    source = await start(echo())
    tool = by_name(source)["echo__add"]
    pid = int((await call(source, "echo__pid")).text)
    began = time.monotonic()
    await source.stop()
    await source.stop()
    assert time.monotonic() - began < 5
    assert source.status() == {"echo": "stopped"}
    assert source.tools() == []
    after = await tool({"a": 1, "b": 2})
    assert isinstance(after, ToolResult) and after.is_error
    for _ in range(100):  # the SDK has closed the process; the child watcher reaps it
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.02)
    else:
        pytest.fail(f"MCP server process {pid} is still alive after stop()")


async def test_stop_during_start_ends_the_start(start: Start) -> None:
    source = McpToolSource([python("mute", "import sys; sys.stdin.read()")])
    starting = asyncio.create_task(source.start())
    await asyncio.sleep(0.3)
    await source.stop()
    await asyncio.wait_for(starting, 5)
    assert source.status() == {"mute": "stopped"}


async def test_stop_before_start_is_fine() -> None:
    source = McpToolSource([echo()])
    await source.stop()
    assert source.status() == {"echo": "stopped"}


async def test_a_call_over_streamable_http(start: Start, http_echo_url: str) -> None:
    source = await start(
        McpServerConfig(name="web", url=http_echo_url, headers={"X-Behest-Test": "1"})
    )
    assert source.status() == {"web": "ready"}
    assert await call(source, "web__add", a=20, b=22) == ToolResult("42")
    assert by_name(source)["web__add"].read_only


async def test_a_dead_http_server_is_reconnected_once_it_answers_again(start: Start) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ECHO_SERVER), "--http", stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 20)
    port = int(line.decode().removeprefix("PORT "))
    url = f"http://127.0.0.1:{port}/mcp"
    source = await start(McpServerConfig(name="web", url=url, timeout_s=4), restart_max_s=0.2)
    tool = by_name(source)["web__add"]
    process.kill()
    await process.wait()
    began = time.monotonic()
    lost = await tool({"a": 1, "b": 2})
    assert isinstance(lost, ToolResult) and lost.is_error
    assert "behest is restarting MCP server 'web'" in lost.text
    assert time.monotonic() - began < 2
    # Its reconnections cannot reach it: failed, and calls fail at once, saying why.
    failed = await until(source, "web", "failed")
    assert failed.cause == "All connection attempts failed"
    assert source.tools() == []
    began = time.monotonic()
    later = await tool({"a": 1, "b": 2})
    assert isinstance(later, ToolResult) and later.is_error
    assert later.text.startswith(
        "MCP server 'web' is unavailable: All connection attempts failed; behest tries it again"
    )
    assert time.monotonic() - began < 1
    again = await asyncio.create_subprocess_exec(
        sys.executable, str(ECHO_SERVER), "--http", str(port), stdout=asyncio.subprocess.PIPE
    )
    try:
        await until(source, "web", "ready")
        assert await tool({"a": 20, "b": 22}) == ToolResult("42")
    finally:
        again.kill()
        await again.wait()


def test_structured_content_is_json_when_there_is_no_text() -> None:
    result = CallToolResult(content=[], structured_content={"sum": 5, "note": "ok"})
    assert result_text(result) == '{"sum": 5, "note": "ok"}'


def test_structured_content_is_left_out_when_there_is_text() -> None:
    result = CallToolResult(content=[TextContent(text="5")], structured_content={"sum": 5})
    assert result_text(result) == "5"


def test_resources_are_described_and_their_text_kept() -> None:
    result = CallToolResult(
        content=[
            ImageContent(data="", mime_type="image/jpeg"),
            ResourceLink(uri="file:///a.txt", name="a"),
            EmbeddedResource(resource=TextResourceContents(uri="file:///b.txt", text="bee")),
            EmbeddedResource(
                resource=BlobResourceContents(uri="file:///c.bin", blob="", mime_type="x/y")
            ),
        ],
        structured_content={"ignored": True},
    )
    assert result_text(result) == (
        "[image: image/jpeg]\n[resource link: file:///a.txt]\n"
        "[resource: file:///b.txt]\nbee\n[resource: file:///c.bin (x/y)]"
    )
