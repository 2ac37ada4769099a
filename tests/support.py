"""Test support: a real behest server on 127.0.0.1:0, request builders, event helpers."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest.app import App
from behest.config import Settings
from behest.store.sql.migrate import MIGRATIONS

POSTGRES_URL = os.environ.get("BEHEST_TEST_POSTGRES_URL", "")
# Set by .ci/run: there a missing PostgreSQL fails the PostgreSQL tests instead of skipping them.
CI = bool(os.environ.get("BEHEST_CI"))
NO_POSTGRES = "set BEHEST_TEST_POSTGRES_URL=postgresql+asyncpg://… to run against PostgreSQL"


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
    """The app started, and its MCP servers ready or failed (the app itself waits for none:
    tests/e2e/test_mcp_supervision.py)."""
    app = App(settings)
    await app.start()
    await app.mcp.settled()
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


@asynccontextmanager
async def server_process(
    data_dir: Path,
    serving: dict[str, object] | None = None,
    *,
    listen: str = "127.0.0.1:0",
    lines: list[str] | None = None,
    **settings: str,
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """`behest serve` in a child process (on an ephemeral port unless `listen` names one);
    yields (process, address) once it serves.

    `settings`: extra BEHEST_* variables; `serving` receives the "behest serving" log entry;
    `lines`, every line of its stderr, the first ones included, and once it has exited by
    itself (a SIGTERM) the last ones too.
    """
    env = {**os.environ, "BEHEST_LOG_FORMAT": "json", "BEHEST_SHUTDOWN_GRACE_S": "0", **settings}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "behest",
        "serve",
        "--listen",
        listen,
        "--data-dir",
        str(data_dir),
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert process.stderr is not None
    kept = SERVER_LOGS.setdefault(process.pid, []) if lines is None else lines
    port = None
    async with asyncio.timeout(30):
        while port is None:
            line = await process.stderr.readline()
            assert line, "server exited before serving"
            kept.append(line.decode(errors="replace").rstrip())
            entry = json.loads(line) if line.startswith(b"{") else {}
            if entry.get("msg") == "behest serving":
                port = entry["port"]
                if serving is not None:
                    serving.update(entry)
    drain = asyncio.create_task(_keep_lines(process.stderr, kept, whole=lines is not None))
    try:
        yield process, f"127.0.0.1:{port}"
    finally:
        exited = process.returncode is not None
        if not exited:
            process.kill()
        await process.wait()
        if exited and lines is not None:
            await asyncio.wait_for(drain, 10)
        drain.cancel()


# The stderr lines of each `server_process` child, by pid: a test that fails can show them.
SERVER_LOGS: dict[int, list[str]] = {}


async def _keep_lines(stream: asyncio.StreamReader, lines: list[str], *, whole: bool) -> None:
    async for line in stream:
        lines.append(line.decode(errors="replace").rstrip())
        if not whole:
            del lines[:-200]


def sqlite_at_revision(path: Path, revision: str) -> None:
    """Create a SQLite database at `path` with the schema of migration `revision` (as an
    older behest left it), for tests of the migrations after it."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    engine = sa.create_engine(f"sqlite:///{path}")
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()


@dataclass
class Cli:
    """What `python -m behest …` did: its exit code and output."""

    code: int
    out: str
    err: str

    @property
    def error(self) -> str:
        """The CLI's error line (gRPC's own logging may add lines of its own to stderr, such as
        a failed TLS handshake's)."""
        lines = [line for line in self.err.splitlines() if line.startswith("error:")]
        assert len(lines) == 1, self.err
        return lines[0]


def cli_environment() -> dict[str, str]:
    """The test's environment without any BEHEST_* setting."""
    return {k: v for k, v in os.environ.items() if not k.startswith("BEHEST_")}


async def behest(*args: str, env: dict[str, str] | None = None, timeout_s: float = 30.0) -> Cli:
    """`python -m behest ARGS` to its end, without the test's BEHEST_* settings (unless in
    `env`), with nothing on stdin."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "behest",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**cli_environment(), **(env or {})},
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    assert process.returncode is not None
    return Cli(process.returncode, out.decode(), err.decode())


ECHO_MCP_SERVER = Path(__file__).parent / "mcp_servers" / "echo_server.py"


def echo_mcp(**more: object) -> dict[str, object]:
    """The `mcp` setting of the echo MCP server over stdio (`more`: its table's fields)."""
    server = {"command": sys.executable, "args": [str(ECHO_MCP_SERVER)], **more}
    return {"servers": {"echo": server}}


@asynccontextmanager
async def served_with_echo_mcp(
    tmp_path: Path, database_url: str, **more: object
) -> AsyncIterator[Server]:
    """A server with the echo MCP server, on SQLite ("") or the given PostgreSQL database."""
    overrides: dict[str, object] = {"mcp": echo_mcp(**more)}
    if database_url:
        overrides["database_url"] = database_url
    running = await start_server(fast_settings(tmp_path, **overrides))
    try:
        yield running
    finally:
        await stop_server(running)


@asynccontextmanager
async def mcp_http_server(script: Path) -> AsyncIterator[str]:
    """An MCP test server (tests/mcp_servers) over streamable HTTP on 127.0.0.1, on a port
    of its choosing (it prints "PORT <n>"); yields its URL, kills it after."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(script), "--http", stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), 20)
        yield f"http://127.0.0.1:{int(line.decode().removeprefix('PORT '))}/mcp"
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
