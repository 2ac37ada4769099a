"""MCP servers as supervised children, against `behest serve` with the MCP reference servers
from npm (`@modelcontextprotocol/server-memory` and `server-everything`, installed in
tests/mcp_node by `make test` and run by path with node): a killed server's tools are
unavailable at once (health, ListTools, runs) and come back with it; nothing waits for a server
but what needs its tools; a command that cannot run is named."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from behest._proto.agent.v1 import catalog_pb2 as cat
from behest._proto.agent.v1 import catalog_pb2_grpc as cat_rpc
from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from tests.support import CI, collect, create_request, kind, script, server_process

NODE_DIR = Path(__file__).resolve().parents[1] / "mcp_node" / "node_modules"
MEMORY = NODE_DIR / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"
EVERYTHING = NODE_DIR / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# The longest wait between attempts to start a server again, in these tests.
RESTART_MAX_S = 1.0


@pytest.fixture(scope="module")
def node() -> str:
    """Node with tests/mcp_node's packages (`make test` installs them with npm ci)."""
    found = shutil.which("node")
    if found and MEMORY.is_file() and EVERYTHING.is_file():
        return found
    why = "no node" if not found else f"no node_modules in {NODE_DIR.parent}: run `make test`"
    if CI:
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


def settings(tmp_path: Path, servers: dict[str, dict[str, object]]) -> dict[str, str]:
    """behest serve's environment: a settings file of these [mcp.servers.NAME] tables."""
    path = tmp_path / "behest.toml"
    path.write_text(json_toml({"mcp": {"servers": servers}}))
    return {
        "BEHEST_CONFIG": str(path),
        "BEHEST_MCP_RESTART_MAX_S": str(RESTART_MAX_S),
        "BEHEST_METRICS_LISTEN": "127.0.0.1:0",
    }


def json_toml(tables: dict[str, dict[str, dict[str, dict[str, object]]]]) -> str:
    """TOML of [mcp.servers.NAME] tables (JSON strings and arrays are TOML's too)."""
    lines = []
    for name, table in tables["mcp"]["servers"].items():
        lines.append(f"[mcp.servers.{name}]")
        for key, value in table.items():
            if isinstance(value, dict):
                inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items())
                lines.append(f"{key} = {{ {inline} }}")
            else:
                lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


class Health:
    """Watches of the health service's statuses, one per service name."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = health_pb2_grpc.HealthStub(channel)
        self._watches: dict[str, AsyncIterator[health_pb2.HealthCheckResponse]] = {}

    async def becomes(self, service: str, status: int, within_s: float = 30) -> float:
        """Seconds until `service`'s status is `status` (now or later), at most `within_s`."""
        if service not in self._watches:
            request = health_pb2.HealthCheckRequest(service=service)
            self._watches[service] = aiter(self._stub.Watch(request))
        began = time.monotonic()
        async with asyncio.timeout(within_s):
            async for answer in self._watches[service]:
                if answer.status == status:
                    return time.monotonic() - began
        raise AssertionError(f"the health watch of {service} ended")


async def list_tools(channel: grpc.aio.Channel) -> dict[str, cat.ToolInfo]:
    listed = await cat_rpc.ToolServiceStub(channel).ListTools(cat.ListToolsRequest())
    return {t.spec.name: t for t in listed.tools}


async def tool_said(
    channel: grpc.aio.Channel, name: str, arguments: dict[str, object], *tools: str
) -> str:
    """What the model saw of one call of `name`, through a `script` run naming `tools`."""
    steps = script(
        {"tool_calls": [{"name": name, "arguments": arguments}]}, {"say": "tool_results"}
    )
    request = create_request(steps, model="script")
    request.tools.extend(tools)
    events = await collect(rpc.RunServiceStub(channel).CreateRunStream(request))
    assert kind(events[-1]) == "run_completed", events[-1]
    last_turn = max(i for i, e in enumerate(events) if kind(e) == "model_started")
    said = "".join(e.text_delta.delta for e in events[last_turn:] if kind(e) == "text_delta")
    return said.removeprefix(f"{name}: ")


def children(pid: int) -> dict[int, str]:
    """The child processes of `pid`, by pid, with their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # gone meanwhile
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found[int(entry.name)] = cmdline
    return found


def mcp_states(port: int) -> dict[tuple[str, str], float]:
    """behest_mcp_server_state's samples by (server, state), from /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.labels["server"], sample.labels["state"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "behest_mcp_server_state"
    }


async def test_a_killed_server_is_unavailable_at_once_and_comes_back_with_its_tools(
    tmp_path: Path, node: str
) -> None:
    # memory runs through a link behest is given: taken away, the restarts fail until it is back.
    link = tmp_path / "memory.js"
    link.symlink_to(MEMORY)
    memory = {
        "command": node,
        "args": [str(link)],
        "env": {"MEMORY_FILE_PATH": str(tmp_path / "graph.jsonl")},
    }
    everything = {"command": node, "args": [str(EVERYTHING), "stdio"]}
    env = settings(tmp_path, {"memory": memory, "everything": everything})
    serving: dict[str, object] = {}
    async with server_process(tmp_path / "data", serving, **env) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            health = Health(channel)
            await health.becomes("behest.mcp.memory", SERVING)
            await health.becomes("behest.mcp.everything", SERVING)
            tools = await list_tools(channel)
            assert tools["memory__read_graph"].unavailable_reason == ""
            assert tools["everything__get-sum"].source == "mcp"
            created = await tool_said(
                channel,
                "memory__create_entities",
                {"entities": [{"name": "Ada", "entityType": "person", "observations": ["math"]}]},
            )
            assert '"name": "Ada"' in created
            assert mcp_states(int(str(serving["metrics_port"])))[("memory", "ready")] == 1

            (pid,) = [p for p, line in children(process.pid).items() if str(link) in line]
            link.unlink()
            os.kill(pid, signal.SIGKILL)
            assert await health.becomes("behest.mcp.memory", NOT_SERVING) < 1.0
            tools = await list_tools(channel)
            down = tools["memory__read_graph"].unavailable_reason
            assert down.startswith("MCP server 'memory' ")
            assert "(the server " in down  # it exited: its output ended (or its input)
            assert tools["everything__get-sum"].unavailable_reason == ""
            # A run waits for the restart under way, which fails: the call is a clear error.
            said = await tool_said(channel, "memory__read_graph", {})
            assert said.startswith("error: tool 'memory__read_graph' is unavailable: MCP server ")
            assert "'memory' failed (the server " in said
            states = mcp_states(int(str(serving["metrics_port"])))
            assert (states[("memory", "failed")], states[("memory", "ready")]) == (1, 0)
            assert states[("everything", "ready")] == 1
            summed = await tool_said(channel, "everything__get-sum", {"a": 2, "b": 3})
            assert summed == "The sum of 2 and 3 is 5."

            link.symlink_to(MEMORY)
            # Back within the backoff's cap, plus the time node takes to start it.
            assert await health.becomes("behest.mcp.memory", SERVING) < RESTART_MAX_S + 15
            tools = await list_tools(channel)
            assert tools["memory__read_graph"].unavailable_reason == ""
            graph = await tool_said(channel, "memory__read_graph", {})
            assert '"name": "Ada"' in graph  # the graph it kept in its file
            (again,) = [p for p, line in children(process.pid).items() if str(link) in line]
            assert again != pid


async def test_nothing_waits_for_a_server_but_what_needs_its_tools(
    tmp_path: Path, node: str
) -> None:
    """The gRPC port is up while a server never answers; a run that needs a server that is
    starting waits for it; a command that cannot run is named."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    # everything starts once the test opens the gate (sh waits to read it first).
    late = {
        "command": "sh",
        "args": ["-c", f'read x < "{gate}"; exec "{node}" "$0" stdio', str(EVERYTHING)],
    }
    mute = {"command": sys.executable, "args": ["-c", "import time; time.sleep(1e6)"]}
    gone = {"command": "behest-no-such-command"}
    env = settings(tmp_path, {"late": late, "mute": mute, "gone": gone})
    env["BEHEST_MCP_START_TIMEOUT_S"] = "50"
    lines: list[str] = []
    began = time.monotonic()
    async with server_process(tmp_path / "data", lines=lines, **env) as (process, address):
        serving_s = time.monotonic() - began
        async with grpc.aio.insecure_channel(address) as channel:
            health = Health(channel)
            await health.becomes("", SERVING, within_s=1)
            await health.becomes("behest.mcp.mute", NOT_SERVING, within_s=1)
            await health.becomes("behest.mcp.late", NOT_SERVING, within_s=1)
            assert not [name for name in await list_tools(channel) if "__" in name]
            # A run that names a tool of `late`, which is starting: it waits for it.
            steps = script(
                {"tool_calls": [{"name": "late__get-sum", "arguments": {"a": 2, "b": 3}}]},
                {"say": "tool_results"},
            )
            request = create_request(steps, model="script")
            request.tools.append("late__get-sum")
            runs = rpc.RunServiceStub(channel)
            run_id = (await runs.CreateRun(request)).run_id
            got = await runs.GetRun(pb.GetRunRequest(run_id=run_id))
            ended = (c.RUN_STATUS_COMPLETED, c.RUN_STATUS_FAILED, c.RUN_STATUS_CANCELLED)
            assert got.run.status not in ended  # it cannot call the tool before the gate opens
            await asyncio.to_thread(gate.write_text, "go\n")
            events = await collect(runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))
            assert kind(events[-1]) == "run_completed"
            said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
            assert said.endswith("late__get-sum: The sum of 2 and 3 is 5.")
            # A run that names a tool of `gone` is created, and waits for its (failed) start.
            missing = await tool_said(channel, "gone__anything", {}, "gone__anything")
            assert missing.startswith("error: tool 'gone__anything' not found")
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await process.wait()
    assert serving_s < 25  # mute would have held the port up to its 50 s start timeout
    logged = [json.loads(line) for line in lines if line.startswith("{")]
    (failed,) = [e for e in logged if e.get("mcp_server") == "gone" and e["level"] == "error"]
    assert "cannot run command 'behest-no-such-command': No such file or directory" in failed["msg"]
