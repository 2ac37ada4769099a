"""The Python client's auto-resume against a real server that is killed mid-stream.

`behest serve` runs as a child process on a port picked once; it is killed with SIGKILL while
the client is streaming a slow run, and started again on the same data directory and the same
port. The client, knowing nothing of this, reconnects to the same address and must finish the
run with every event once: 1..N, no gap, no duplicate, one terminal event, last.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import AsyncIterator
from pathlib import Path

from behest.client import BehestClient, Event, RunOptions
from tests.support import script, server_process

# A model that streams 80 words, one every 20 ms. A model call cut by a kill is made again
# after the restart, as the run's next call: the script's next step.
WORDS = " ".join(f"w{i}" for i in range(80))
SLOW = script(*({"text": WORDS, "delay_ms": 20} for _ in range(3)))


def free_port() -> int:
    """A port nothing listens on now. The server binds it with SO_REUSEADDR (gRPC's default),
    so the restarted server can take it again while the killed one's connections linger."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def serve(data_dir: Path, port: int) -> AsyncIterator[asyncio.subprocess.Process]:
    """`behest serve` on 127.0.0.1:`port` (the same across a restart), once it serves."""
    async with server_process(data_dir, listen=f"127.0.0.1:{port}") as (process, address):
        assert address == f"127.0.0.1:{port}"
        yield process


def assert_complete_once(events: list[Event]) -> None:
    """1..N without gap or repeat, one run, one terminal event, and it is the last."""
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert len({e.run_id for e in events}) == 1
    assert events[0].kind == "run_started"
    assert [e.terminal for e in events].count(True) == 1
    assert events[-1].kind == "run_completed"


async def stream_through_kills(tmp_path: Path, kill_after: set[int]) -> list[Event]:
    """Stream SLOW through the client; after the client has seen each count of events in
    `kill_after`, SIGKILL the server and start a new one (same data, same port) meanwhile."""
    port = free_port()
    seen: list[Event] = []
    async with contextlib.AsyncExitStack() as servers:
        process = await servers.enter_async_context(serve(tmp_path, port))
        restarts: list[asyncio.Task[asyncio.subprocess.Process]] = []
        # Attempts and backoff bound one outage: a restart takes a second or two.
        client = BehestClient(
            f"127.0.0.1:{port}",
            reconnect_attempts=30,
            reconnect_backoff_s=0.05,
            reconnect_backoff_max_s=0.5,
        )
        try:
            async with client:
                async for event in client.stream_run(SLOW, RunOptions(model="script")):
                    seen.append(event)
                    if len(seen) in kill_after:
                        if restarts:
                            process = await restarts[-1]  # the current server
                        process.send_signal(signal.SIGKILL)
                        await process.wait()
                        # The client is left to find the server gone while a new one starts.
                        restart = servers.enter_async_context(serve(tmp_path, port))
                        restarts.append(asyncio.create_task(restart))
                assert len(restarts) == len(kill_after), "the run ended before every kill"
                # What the client saw is the run's log as stored.
                [run_id] = {e.run_id for e in seen}
                assert [e async for e in client.watch(run_id)] == seen
        finally:
            # Every server started is registered with `servers`, which stops them all.
            await asyncio.gather(*restarts, return_exceptions=True)
    return seen


async def test_the_client_finishes_a_run_across_a_server_kill_and_restart(
    tmp_path: Path,
) -> None:
    seen = await stream_through_kills(tmp_path, {5})

    assert_complete_once(seen)
    assert len(seen) > 10  # the kill came mid-stream, with events still to come


async def test_the_client_finishes_a_run_across_two_kills(tmp_path: Path) -> None:
    seen = await stream_through_kills(tmp_path, {4, 12})

    assert_complete_once(seen)
    assert len(seen) > 17
