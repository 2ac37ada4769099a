"""Storage faults through a real server: a full disk, an outside writer holding the SQLite
file, a long reader. Whatever the database does, no answer is false:

- runs in flight when the disk fills end FAILED with FAILURE_CODE_STORAGE once their end can
  be stored, never COMPLETED without their answer; their streams end with RESOURCE_EXHAUSTED
  saying the disk is full instead of stalling; creations are refused saying no run was
  created; health is NOT_SERVING until space is freed; afterwards every log replays gapless
  with one terminal event and new runs complete;
- while another process holds BEGIN IMMEDIATE for twice the busy timeout, health, GetRun
  and ListRuns answer within 1 s, CancelRun within its 10 s, and no run is lost;
- after a reader held a snapshot while runs wrote, the WAL is cut back to its usual size.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest.store.sql.sqlite_writer import WAL_SIZE_LIMIT_BYTES
from tests.fault.history import TERMINAL
from tests.support import CI, Server, create_request, fast_settings, kind, start_server, stop_server

DISK_MB = 24
WORD = "x" * 20_000  # one text delta of 20 KB
WORDS = 60
BUSY_TIMEOUT_S = 1.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A DISK_MB filesystem (tmpfs) for the server's data directory."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        if CI:
            pytest.fail(f"cannot mount a small tmpfs under CI: {made.stderr.strip()}")
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@contextlib.asynccontextmanager
async def serving(data_dir: Path, **settings: object) -> AsyncIterator[Server]:
    server = await start_server(fast_settings(data_dir, coalesce_text_deltas=False, **settings))
    try:
        yield server
    finally:
        await stop_server(server)


def fill(directory: Path) -> Path:
    """Fill the filesystem of `directory` to the last byte; the file that holds the rest."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as out:
        for size in (1 << 20, 1 << 12, 1):
            block = b"\1" * size
            while True:
                try:
                    out.write(block)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    return filler


async def health_changes(server: Server) -> AsyncIterator[int]:
    health = health_pb2_grpc.HealthStub(server.channel)
    async for reply in health.Watch(health_pb2.HealthCheckRequest(service="")):
        yield reply.status


async def wait_for_status(changes: AsyncIterator[int], wanted: int) -> None:
    async with asyncio.timeout(30):
        async for status in changes:
            if status == wanted:
                return


async def whole_log(server: Server, run_id: str) -> list[pb.AgentEvent]:
    """The run's log from its start to its terminal event (waiting for the end)."""
    request = pb.WatchRunEventsRequest(run_id=run_id)
    return [e async for e in server.runs.WatchRunEvents(request, timeout=60)]


async def assert_truthful(server: Server, run_id: str, text: str) -> str:
    """The run's log is gapless with one terminal event, and a completion carries its whole
    answer (text, message, usage, output); returns how it ended."""
    events = await whole_log(server, run_id)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    kinds = [kind(e) for e in events]
    assert sum(k in TERMINAL for k in kinds) == 1 and kinds[-1] in TERMINAL, kinds[-5:]
    run = (await server.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    if kinds[-1] == "run_completed":
        streamed = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
        assert streamed.split() == text.split()
        assert "assistant_message_committed" in kinds and "usage_recorded" in kinds
        output = await server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=run_id))
        said = [p.text.text for m in output.output.messages for p in m.content]
        assert "".join(said).split() == text.split()
        assert run.status == c.RUN_STATUS_COMPLETED
    elif kinds[-1] == "run_failed":
        failed = events[-1].run_failed
        assert failed.code == pb.FAILURE_CODE_STORAGE, failed
        assert "could not be stored" in failed.error and "disk is full" in failed.error
        assert run.status == c.RUN_STATUS_FAILED
    return kinds[-1]


async def follow_to_fault(call: grpc.aio.UnaryStreamCall) -> tuple[str, str]:
    """Read a stream to its end: ("terminal", kind) or (status code name, details)."""
    try:
        async for event in call:
            if kind(event) in TERMINAL:
                return "terminal", kind(event)
    except grpc.aio.AioRpcError as err:
        return err.code().name, err.details() or ""
    return "eof", ""


async def test_a_full_disk_fails_runs_truthfully_and_refuses_creations(small_disk: Path) -> None:
    text = " ".join([WORD] * WORDS)
    paced = json.dumps({"steps": [{"text": text, "delay_ms": 40}]})
    async with serving(small_disk, max_input_bytes=4 << 20) as server:
        changes = health_changes(server)
        assert await anext(changes) == SERVING
        calls = [server.runs.CreateRunStream(create_request(paced, model="script")) for _ in "abc"]
        run_ids = []
        for call in calls:  # every run is in flight, its text streaming, when the disk fills
            async for event in call:
                if kind(event) == "run_started":
                    run_ids.append(event.run_id)
                if kind(event) == "text_delta":
                    break
        filler = fill(small_disk)

        # Each stream ends within its deadline: with the fault in words, never in silence.
        ends = await asyncio.gather(*(asyncio.wait_for(follow_to_fault(c), 30) for c in calls))
        for code, details in ends:
            assert (code, "disk is full" in details) == ("RESOURCE_EXHAUSTED", True), details
        await wait_for_status(changes, NOT_SERVING)
        refusal = None
        for _ in range(20):  # a creation may fit in what a failed write left free
            try:
                created = await server.runs.CreateRun(create_request("while full"), timeout=30)
                run_ids.append(created.run_id)
            except grpc.aio.AioRpcError as err:
                refusal = err
                break
        assert refusal is not None and refusal.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (refusal.details() or "").startswith(
            "no run was created: the database's disk is full"
        )
        # Reads go on while writes cannot land.
        got = await server.runs.GetRun(pb.GetRunRequest(run_id=run_ids[0]), timeout=5)
        assert got.run.id == run_ids[0]

        filler.unlink()
        await wait_for_status(changes, SERVING)
        outcomes = [await assert_truthful(server, run_id, text) for run_id in run_ids[:3]]
        assert "run_failed" in outcomes, outcomes  # the case that used to complete falsely
        for run_id in run_ids[3:]:
            await assert_truthful(server, run_id, "while full")
        after = await server.runs.CreateRun(create_request("space again"))
        assert await assert_truthful(server, after.run_id, "space again") == "run_completed"


def hold_write_lock(database: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process that holds the SQLite file's write lock for `seconds` (the fault's
    length); it prints "held" once it has the lock."""
    code = (
        "import sqlite3, sys, time\n"
        f"db = sqlite3.connect({str(database)!r}, isolation_level=None)\n"
        "db.execute('BEGIN IMMEDIATE')\n"
        "print('held', flush=True)\n"
        f"time.sleep({seconds})\n"
        "db.execute('COMMIT')\n"
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


async def within(seconds: float, call: object) -> float:
    began = time.perf_counter()
    await call  # type: ignore[misc]
    elapsed = time.perf_counter() - began
    assert elapsed < seconds, elapsed
    return elapsed


async def test_an_outside_writer_holding_the_database_freezes_nothing(tmp_path: Path) -> None:
    slow = json.dumps({"steps": [{"deltas": 150, "delay_ms": 20}]})
    async with serving(tmp_path, sqlite_busy_timeout_s=BUSY_TIMEOUT_S) as server:
        health = health_pb2_grpc.HealthStub(server.channel)
        streams = [server.runs.CreateRunStream(create_request(slow, model="script")) for _ in "ab"]
        run_ids = []
        for call in streams:
            run_ids.append((await anext(aiter(call))).run_id)
        holder = hold_write_lock(tmp_path / "behest.db", 2 * BUSY_TIMEOUT_S)
        assert holder.stdout is not None
        assert await asyncio.to_thread(holder.stdout.readline) == "held\n"
        cancel = asyncio.create_task(
            within(10.5, server.runs.CancelRun(pb.CancelRunRequest(run_id=run_ids[1]), timeout=11))
        )
        probes = 0
        while holder.poll() is None:  # throughout the hold
            await within(1.0, health.Check(health_pb2.HealthCheckRequest(), timeout=1))
            await within(1.0, server.runs.GetRun(pb.GetRunRequest(run_id=run_ids[0]), timeout=1))
            await within(1.0, server.runs.ListRuns(pb.ListRunsRequest(), timeout=1))
            probes += 1
        assert holder.wait() == 0 and probes >= 3
        holder.stdout.close()
        await cancel  # answered OK (the run ended cancelled) within its bound
        ends = [await follow_to_fault(call) for call in streams]
        assert ends == [("terminal", "run_completed"), ("terminal", "run_cancelled")], ends
        for run_id in run_ids:
            events = await whole_log(server, run_id)
            assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        texts = [
            e.text_delta.delta
            for e in await whole_log(server, run_ids[0])
            if kind(e) == "text_delta"
        ]
        assert "".join(texts).split() == [f"w{i}" for i in range(1, 151)]


async def test_the_wal_is_cut_back_after_a_long_reader(tmp_path: Path) -> None:
    big = json.dumps({"steps": [{"text": " ".join([WORD] * 100)}]})
    async with serving(tmp_path, max_input_bytes=4 << 20) as server:
        wal = tmp_path / "behest.db-wal"
        reader = sqlite3.connect(tmp_path / "behest.db", isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchone()  # holds its snapshot
        for _ in range(4):
            created = await server.runs.CreateRun(create_request(big, model="script"))
            await whole_log(server, created.run_id)
        grown = wal.stat().st_size
        assert grown > 2 * WAL_SIZE_LIMIT_BYTES, grown
        reader.execute("COMMIT")
        reader.close()
        for _ in range(3):  # the next commits checkpoint the WAL fully, then restart it
            created = await server.runs.CreateRun(create_request("small"))
            await whole_log(server, created.run_id)
        assert wal.stat().st_size <= WAL_SIZE_LIMIT_BYTES, (grown, wal.stat().st_size)
