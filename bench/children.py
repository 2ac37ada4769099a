"""The bench's child processes (behest servers, the floor server) and its PostgreSQL database.

Both servers listen on 127.0.0.1:0 and announce their port in a JSON log line on stderr; the
rest of their stderr is drained (a full pipe would stall the server) and its tail kept for the
error message when a child dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import sys
import tempfile
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
TAIL_LINES = 40


class ChildError(RuntimeError):
    """A child process did not start, or died."""


class Child:
    """A server in a child process: its address, its stderr tail, its resident memory."""

    def __init__(
        self, name: str, process: asyncio.subprocess.Process, serving: dict[str, Any]
    ) -> None:
        self.name = name
        self.process = process
        self.address = f"127.0.0.1:{int(serving['port'])}"
        # The "serving" log line: a behest server's has its node name.
        self.serving = serving
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._drain: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def node(self) -> str:
        """A behest server's node name (its runs' `owner`)."""
        return str(self.serving.get("node", ""))

    def rss_bytes(self) -> int:
        """VmRSS of the child, from /proc/<pid>/status."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise ChildError(f"{self.name}: no VmRSS in /proc/{self.pid}/status")

    def check_alive(self) -> None:
        if self.process.returncode is not None:
            last = self.tail[-1] if self.tail else "(nothing)"
            raise ChildError(
                f"{self.name} exited with {self.process.returncode}: {last}\n"
                "its last output:\n" + "\n".join(self.tail)
            )

    def start_draining(self, stream: asyncio.StreamReader) -> None:
        async def drain() -> None:
            while line := await stream.readline():
                self.tail.append(line.decode(errors="replace").rstrip())

        self._drain = asyncio.create_task(drain())

    async def kill(self) -> None:
        """SIGKILL (kill -9), and wait for it to be gone."""
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time (nothing if it has exited)."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(STOP_TIMEOUT_S):
                    await self.process.wait()
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        if self._drain is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._drain


async def _start(name: str, args: list[str], env: dict[str, str], ready_msg: str) -> Child:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        cwd=ROOT,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    seen: deque[str] = deque(maxlen=TAIL_LINES)
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while True:
                line = await process.stderr.readline()
                if not line:
                    await process.wait()
                    last = seen[-1] if seen else "(nothing)"
                    raise ChildError(
                        f"{name} exited with {process.returncode} before serving: {last}\n"
                        "its output:\n" + "\n".join(seen)
                    )
                seen.append(line.decode(errors="replace").rstrip())
                entry = _json_line(line)
                if entry.get("msg") == ready_msg:
                    break
    except BaseException:
        if process.returncode is None:
            process.kill()
            await process.wait()
        raise
    child = Child(name, process, entry)
    child.tail.extend(seen)
    child.start_draining(process.stderr)
    return child


def _json_line(line: bytes) -> dict[str, Any]:
    if not line.startswith(b"{"):
        return {}
    try:
        entry = json.loads(line)
    except ValueError:
        return {}
    return entry if isinstance(entry, dict) else {}


def behest_env(database_url: str = "") -> dict[str, str]:
    """The environment of a behest child: ours, plus JSON logs, no shutdown grace, the store."""
    env = {**os.environ, "BEHEST_LOG_FORMAT": "json", "BEHEST_SHUTDOWN_GRACE_S": "0"}
    # The SQLite items must run on SQLite whatever the caller's shell has set; replicas
    # (item 9) must each have a node name of their own.
    env.pop("BEHEST_DATABASE_URL", None)
    env.pop("BEHEST_NODE_ID", None)
    if database_url:
        env["BEHEST_DATABASE_URL"] = database_url
    # The serving line is logged at INFO.
    if env.get("BEHEST_LOG_LEVEL", "INFO").upper() not in ("DEBUG", "INFO"):
        env["BEHEST_LOG_LEVEL"] = "INFO"
    return env


def server_settings_env() -> dict[str, str]:
    """The BEHEST_* settings the caller passes on to every behest child (URLs redacted)."""
    passed = {}
    for key, value in sorted(behest_env().items()):
        if key.startswith("BEHEST_") and not key.startswith(("BEHEST_BENCH_", "BEHEST_TEST_")):
            passed[key] = "<redacted>" if "://" in value else value
    return passed


async def start_behest(
    data_dir: Path,
    database_url: str = "",
    settings: dict[str, str] | None = None,
    *,
    name: str = "behest server",
) -> Child:
    """`python -m behest serve` on 127.0.0.1:0 with its data in `data_dir`.

    `settings`: BEHEST_* variables for this server only (they win over the caller's).
    """
    args = ["-m", "behest", "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir)]
    env = {**behest_env(database_url), **(settings or {})}
    return await _start(name, args, env, "behest serving")


@asynccontextmanager
async def replicas(
    count: int, database_url: str, settings: dict[str, str] | None = None
) -> AsyncIterator[list[Child]]:
    """`count` behest servers on one PostgreSQL database, started at once, each with a data
    directory of its own; all stopped on the way out (SIGTERM, or nothing for one already
    killed). Each takes a node name of its own (behest_env drops the caller's BEHEST_NODE_ID).
    """
    async with AsyncExitStack() as stack:
        dirs = [
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="behest-bench-")))
            for _ in range(count)
        ]

        async def one(i: int) -> Child:
            child = await start_behest(
                dirs[i], database_url, settings, name=f"behest replica {'ABCDEFGH'[i % 8]}"
            )
            return await stack.enter_async_context(running(child))

        # A replica that fails to start cancels the others' starts (each kills its process);
        # those already serving are stopped by the stack.
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(one(i)) for i in range(count)]
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None
        yield [task.result() for task in tasks]


def bearer_auth(token: str) -> dict[str, str]:
    """The settings of a behest server that takes `token` as a bearer token (its SHA-256)."""
    prefix = "BEHEST_AUTH__TOKENS__BENCH__"
    return {
        "BEHEST_AUTH__MODE": "bearer",
        f"{prefix}SHA256": hashlib.sha256(token.encode()).hexdigest(),
        f"{prefix}PRINCIPAL": "bench",
        f"{prefix}TENANT": "bench",
    }


async def start_floor() -> Child:
    """`python -m bench.floor_server` on 127.0.0.1:0."""
    args = ["-m", "bench.floor_server", "--listen", "127.0.0.1:0"]
    return await _start("floor server", args, dict(os.environ), "floor serving")


@asynccontextmanager
async def running(child: Child) -> AsyncIterator[Child]:
    try:
        yield child
    finally:
        await child.stop()


def redact(url: str) -> str:
    """`url` without its password."""
    return make_url(url).render_as_string(hide_password=True)
