"""kill -9 rounds: slow runs and their watchers live through several SIGKILLs of the server.

`behest serve` runs as a child process on one data directory. Each round creates a few slow
runs (model calls with delays and calculator calls), each followed by its creating stream and
by a watcher that also hangs up at random; the server is killed with SIGKILL at a random
moment (or when some watcher sees a chosen kind of event), restarted on the same data
directory, and every watcher re-attaches with the last sequence it saw. After the last round
the server lives until every run has ended, and the history checker compares what every
client saw with the stored logs: no gap, no duplicate, one terminal event per run.

The random choices come from one seed, printed and attached to any failure;
BEHEST_FAULT_SEED replays one.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from tests.fault.history import (
    History,
    Watcher,
    kind,
    read_connection,
    read_stored,
)
from tests.support import create_request, script, server_process

ROUNDS = 5  # kills; the server then lives a sixth time, until every run has ended
FIRST_RUNS = 8
RUNS_PER_ROUND = 3
# When a round's kill comes: when a watcher first sees this kind of event after the round's
# runs are created, or after a random delay, whichever comes first ("" = the delay only).
KILL_ON = ("", "", "tool_execution_started", "tool_call_delta", "model_started", "text_delta")
KILL_DELAY_S = (0.2, 1.2)
MAX_CONNECTIONS = 40  # a watcher hangs up by itself at most this often, then stays
BUDGET_S = 50.0


def seed_from_env() -> int:
    value = os.environ.get("BEHEST_FAULT_SEED")
    return int(value) if value else random.SystemRandom().randrange(2**32)


def slow_run(rng: random.Random) -> pb.CreateRunRequest:
    """Four model calls that each stream text for a while and ask for the calculator, then
    a final answer: well over a second uninterrupted, so it lives through a kill or two.

    A call cut by a crash is repeated as the script's next step (the script counts calls),
    so a run interrupted often just ends sooner; it always ends run_completed.
    """
    steps: list[dict[str, object]] = []
    for n in range(4):
        a, b = rng.randint(1, 999), rng.randint(1, 999)
        steps.append(
            {
                "text": f"step {n}:",
                "deltas": rng.randint(25, 50),
                "delay_ms": 10,
                "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{a} * {b}"}}],
            }
        )
    steps.append({"text": "all done", "deltas": rng.randint(10, 30), "delay_ms": 10})
    return create_request(script(*steps), model="script")


# --- the server's lives ---------------------------------------------------------------------


@dataclass
class Life:
    """One `behest serve` process between its start and its SIGKILL."""

    number: int
    stub: rpc.RunServiceStub
    killed: bool = False


@dataclass
class Servers:
    """The current life; watchers wait here for the next one after a kill."""

    life: Life | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    kill_on: str = ""
    trigger: asyncio.Event = field(default_factory=asyncio.Event)

    async def begin(self, life: Life) -> None:
        async with self.changed:
            self.life = life
            self.changed.notify_all()

    async def serving(self, after: Life | None = None) -> Life:
        """A life that was not killed, newer than `after` if that one was killed."""
        async with self.changed:
            await self.changed.wait_for(
                lambda: (
                    self.life is not None
                    and not self.life.killed
                    and (after is None or not after.killed or self.life.number > after.number)
                )
            )
            assert self.life is not None
            return self.life

    def saw(self, event: pb.AgentEvent) -> None:
        if self.kill_on and kind(event) == self.kill_on:
            self.trigger.set()


@dataclass
class Tally:
    errors: int = 0  # streams that failed while their server was alive
    killed: int = 0  # streams cut by a kill


async def follow(
    servers: Servers,
    watcher: Watcher,
    rng: random.Random,
    tally: Tally,
    *,
    first: tuple[Life, grpc.aio.UnaryStreamCall] | None = None,
    hang_ups: bool = True,
) -> None:
    """Follow a run to its terminal event across kills (re-attaching to the next server with
    the last sequence seen) and random hang-ups. `first`: an open CreateRunStream whose first
    event the watcher has read."""
    life: Life | None = None
    if first is None:
        watcher.connect(0)
    while True:
        if first is not None:
            life, call = first
            first = None
        else:
            life = await servers.serving(after=life)
            request = pb.WatchRunEventsRequest(
                run_id=watcher.run_id, last_event_id=watcher.last_sequence
            )
            call = life.stub.WatchRunEvents(request)
        choice = rng.random() if hang_ups and len(watcher.connections) < MAX_CONNECTIONS else 1.0
        after_events = rng.randint(1, 20) if choice < 0.4 else 0
        after_s = rng.uniform(0.01, 0.3) if 0.4 <= choice < 0.6 else None
        error = await read_connection(
            call, watcher, after_events=after_events, after_s=after_s, on_event=servers.saw
        )
        if error is not None:
            # The killer marks a life killed before it sends SIGKILL.
            watcher.close_with(error, expected=life.killed)
            if life.killed:
                tally.killed += 1
            else:
                tally.errors += 1
        if watcher.done or watcher.connections[-1].end == "eof" or tally.errors >= 5:
            return  # done, or something the checker reports
        watcher.connect()


# --- the test -------------------------------------------------------------------------------


async def test_watchers_reattach_across_kill_9_rounds_and_see_exactly_the_log(
    tmp_path: Path,
) -> None:
    seed = seed_from_env()
    print(f"fault kill9 seed: {seed} (replay with BEHEST_FAULT_SEED={seed})")
    try:
        async with asyncio.timeout(BUDGET_S):
            await _rounds(tmp_path, seed)
    except BaseException as exc:
        exc.add_note(f"fault kill9 seed: {seed} (replay with BEHEST_FAULT_SEED={seed})")
        raise


async def _rounds(data_dir: Path, seed: int) -> None:
    rng = random.Random(seed)
    history = History(f"seed {seed}")
    servers = Servers()
    tally = Tally()
    run_ids: list[str] = []
    channels: list[grpc.aio.Channel] = []
    interrupted: list[int] = []  # per kill: runs whose watchers had not yet seen their end
    racers: list[asyncio.Task[tuple[str, bool]]] = []
    started = time.monotonic()
    async with AsyncExitStack() as stack:
        # Channels stay open until the end: closing one would cancel its calls locally, and
        # the watchers must see what a kill does to them. (Closed after the last server.)
        stack.push_async_callback(_close, channels)
        async with asyncio.TaskGroup() as group:
            for number in range(ROUNDS + 1):
                process, address = await stack.enter_async_context(server_process(data_dir))
                channels.append(grpc.aio.insecure_channel(address))
                life = Life(number, rpc.RunServiceStub(channels[-1]))
                servers.kill_on = rng.choice(KILL_ON)
                servers.trigger.clear()
                await servers.begin(life)
                if number == ROUNDS:
                    break  # the last life: it serves until every run has ended
                count = FIRST_RUNS if number == 0 else RUNS_PER_ROUND
                for _ in range(count):
                    run_ids.append(await _start_run(group, servers, life, history, rng, tally))
                # Where the kill lands: the trigger, or this delay (placement; nothing waits
                # for it to happen).
                try:
                    async with asyncio.timeout(rng.uniform(*KILL_DELAY_S)):
                        await servers.trigger.wait()
                except TimeoutError:
                    pass
                # A CreateRun (with an idempotency key) in flight as the kill comes; its
                # client retries it on the next server, as a real one would.
                request = slow_run(rng)
                request.client_request_id = f"racing-{number}"
                watcher = history.watcher(f"racing-{number}/watcher")
                watcher_rng = random.Random(rng.randrange(2**32))
                racing = group.create_task(
                    _racing_create(servers, life, request, watcher, watcher_rng, tally)
                )
                await asyncio.sleep(rng.uniform(0.0, 0.02))  # where the kill lands
                life.killed = True
                process.send_signal(signal.SIGKILL)
                await process.wait()
                interrupted.append(len({w.run_id for w in history.watchers if not w.done}))
                racers.append(racing)
            # The TaskGroup ends once every watcher has seen its run's terminal event.
        raced = [racing.result() for racing in racers]
        run_ids += [run_id for run_id, _ in raced]
        stub = rpc.RunServiceStub(channels[-1])
        logs, records = await read_stored(stub, run_ids)
        summary = history.check(logs, records)
        for run_id in run_ids:
            last = logs[run_id][-1]
            assert kind(last) == "run_completed", f"run {run_id} ended {kind(last)}: {last}"
        snapshots = await rpc.SnapshotServiceStub(channels[-1]).ListSnapshots(
            pb.ListSnapshotsRequest()
        )
        assert list(snapshots.snapshots) == [], "snapshots left after every run ended"
        # No run was created twice by a retried CreateRun, none that was acknowledged is lost.
        listed = await stub.ListRuns(pb.ListRunsRequest(pagination=c.Pagination(limit=100)))
        assert sorted(r.id for r in listed.runs) == sorted(run_ids), "stored runs differ"
        assert tally.errors == 0, f"{tally.errors} streams failed while their server was up"
        repeats = sum(_repeated_calls(logs[run_id]) for run_id in run_ids)
        print(
            f"seed {seed}: {ROUNDS} kills, runs alive at each kill {interrupted}, "
            f"CreateRuns cut by a kill {sum(not answered for _, answered in raced)}/{len(raced)}, "
            f"{tally.killed} streams cut by kills, {repeats} model calls repeated; {summary}; "
            f"{time.monotonic() - started:.1f} s"
        )
        assert sum(interrupted) > 0, "no kill interrupted a run: the test tests nothing"


async def _close(channels: list[grpc.aio.Channel]) -> None:
    for channel in channels:
        await channel.close()


async def _start_run(
    group: asyncio.TaskGroup,
    servers: Servers,
    life: Life,
    history: History,
    rng: random.Random,
    tally: Tally,
) -> str:
    """Create a slow run with CreateRunStream (its creator follows it) and add a watcher."""
    call = life.stub.CreateRunStream(slow_run(rng))
    number = len(history.watchers) // 2
    creator = history.watcher(f"run{number}/creator")
    creator.connect(0)
    first = await call.read()  # run_started: durable when the stream sends it
    assert isinstance(first, pb.AgentEvent), f"CreateRunStream gave {first}"
    creator.receive(first)
    creator_rng = random.Random(rng.randrange(2**32))
    watcher_rng = random.Random(rng.randrange(2**32))
    group.create_task(
        follow(servers, creator, creator_rng, tally, first=(life, call), hang_ups=False)
    )
    watcher = history.watcher(f"run{number}/watcher", creator.run_id)
    group.create_task(follow(servers, watcher, watcher_rng, tally))
    return creator.run_id


async def _racing_create(
    servers: Servers,
    life: Life,
    request: pb.CreateRunRequest,
    watcher: Watcher,
    watcher_rng: random.Random,
    tally: Tally,
) -> tuple[str, bool]:
    """CreateRun (with an idempotency key) sent as the server is killed, then the same again
    on the next server (a client that does not know whether its first attempt took). A reply
    that arrived must name the run the retry finds. Then `watcher` follows the run to its
    end; returns the run's id and whether the first attempt was answered."""
    key = request.client_request_id
    answered = ""
    try:
        answered = (await life.stub.CreateRun(request)).run_id
    except grpc.aio.AioRpcError as exc:
        assert life.killed, f"CreateRun {key} failed on a live server: {exc.code().name}"
    again = ""
    while not again:  # the next server may be killed too before it answers
        life = await servers.serving(after=life)
        try:
            again = (await life.stub.CreateRun(request)).run_id
        except grpc.aio.AioRpcError as exc:
            assert life.killed, f"CreateRun {key} failed on a live server: {exc.code().name}"
    assert not answered or again == answered, (
        f"CreateRun {key} answered run {answered} before the kill, its retry gave run {again}"
    )
    watcher.run_id = again
    await follow(servers, watcher, watcher_rng, tally)
    return again, bool(answered)


def _repeated_calls(log: list[pb.AgentEvent]) -> int:
    """Model calls started again for an iteration that had one (a retry, or after a crash)."""
    iterations = [e.model_started.iteration for e in log if kind(e) == "model_started"]
    return len(iterations) - len(set(iterations))
