"""`behest worker run module:attribute` in a child process against the fake WorkerService:
the module's Worker is found, `--address` replaces the one it was built with, the token comes
from $BEHEST_TOKEN, and SIGTERM lets the task in hand finish and send its result before the
process exits 0; a second SIGTERM stops it at once, even with a sync tool stuck."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from tests.fakes.worker_service import FakeStream, FakeWorkerService

TOOLS = '''
import sys
from behest.worker import TaskContext, Worker

worker = Worker("127.0.0.1:1", name="cli-worker", max_tasks=2)


@worker.tool(idempotent=True)
def wait_for_line(order_id: str, context: TaskContext) -> str:
    """Answer once a line comes on stdin."""
    print("started", context.execution_id, flush=True)
    line = sys.stdin.readline().strip()
    return f"{order_id}: {line}"
'''


class Child:
    def __init__(self, process: asyncio.subprocess.Process, stream: FakeStream) -> None:
        assert process.stdin and process.stdout and process.stderr
        self.process, self.stream = process, stream
        self.stdin, self.stdout, self.stderr = process.stdin, process.stdout, process.stderr
        self.logged = b""

    async def logs(self, words: bytes) -> None:
        """Read stderr until `words` are logged."""
        while words not in self.logged:
            line = await self.stderr.readline()
            assert line, self.logged.decode()
            self.logged += line

    async def exit_code(self) -> int:
        self.logged += await self.stderr.read()
        return await self.process.wait()


@contextlib.asynccontextmanager
async def worker_process(tmp_path: Path) -> AsyncIterator[Child]:
    """`behest worker run` of TOOLS, once its stream is welcomed (30 s at most for all)."""
    (tmp_path / "cli_tools.py").write_text(TOOLS)
    async with FakeWorkerService() as fake:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "behest", "worker", "run", "cli_tools:worker",
            "--address", fake.address,
            cwd=tmp_path,
            env={**os.environ, "BEHEST_TOKEN": "from-env"},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            async with asyncio.timeout(30):
                yield Child(process, await fake.stream())
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def test_sigterm_finishes_the_task_in_hand_then_the_worker_exits(tmp_path: Path) -> None:
    async with worker_process(tmp_path) as child:
        stream = child.stream
        assert stream.hello.name == "cli-worker" and stream.hello.max_tasks == 2
        assert stream.metadata["authorization"] == "Bearer from-env"
        sent = stream.task("wait_for_line", {"order_id": "o-7"})
        assert (await child.stdout.readline()).decode().split() == ["started", sent.execution_id]
        child.process.send_signal(signal.SIGTERM)
        await child.logs(b"SIGTERM: stopping")
        child.stdin.write(b"shipped\n")
        await child.stdin.drain()
        result = await stream.result()
        assert (result.execution_id, result.output) == (sent.execution_id, "o-7: shipped")
        assert await child.exit_code() == 0, child.logged.decode()
        assert stream.half_closed.is_set()
        assert b"from-env" not in child.logged


async def test_a_second_sigterm_stops_at_once(tmp_path: Path) -> None:
    async with worker_process(tmp_path) as child:
        child.stream.task("wait_for_line", {"order_id": "o-8"})
        assert (await child.stdout.readline()).startswith(b"started")
        child.process.send_signal(signal.SIGTERM)
        await child.logs(b"SIGTERM: stopping")
        child.process.send_signal(signal.SIGTERM)  # the tool's thread is stuck on stdin
        assert await child.exit_code() == 0, child.logged.decode()
        assert b"SIGTERM again: stopping now" in child.logged
        assert child.stream.results.empty()
