"""The measurements of issue 6: the floors (item 1) and behest's items 2-6; item 8 (issue 12);
item 9 (replicas on PostgreSQL).

Every function takes open channels or stubs and its sizes, and returns plain figures; the
targets, ratios and verdicts are applied in bench/__main__.py.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from bench._floor import floor_pb2, floor_pb2_grpc
from bench.children import Child
from bench.sizes import Sizes
from tests.stored import engine_on, run_rows, stored_events

TERMINAL = frozenset({"run_completed", "run_failed", "run_cancelled"})
# A Blob with a 96-byte payload and a small sequence is ~100 bytes on the wire.
FLOOR_PAYLOAD_BYTES = 96
# The slow runs of the idle-watchers item emit one delta this often, so they stay live.
IDLE_DELAY_MS = 2000


def now() -> float:
    return time.perf_counter()


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank; the samples need not be sorted."""
    ordered = sorted(samples)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def channel(address: str, *, own_connection: bool = False) -> grpc.aio.Channel:
    """A channel to `address`; with own_connection it does not share its TCP connection."""
    options = [("grpc.use_local_subchannel_pool", 1)] if own_connection else []
    return grpc.aio.insecure_channel(address, options=options)


# --- Item 1: the floors ------------------------------------------------------------------


async def floor_one_stream(stub: floor_pb2_grpc.FloorServiceStub, messages: int) -> float:
    """Messages/s of one Stream of `messages` Blobs."""
    began = now()
    count = 0
    request = floor_pb2.Count(messages=messages, payload_bytes=FLOOR_PAYLOAD_BYTES)
    async for _ in stub.Stream(request):
        count += 1
    elapsed = now() - began
    if count != messages:
        raise RuntimeError(f"floor stream sent {count} of {messages} messages")
    return count / elapsed


async def floor_streams(
    stub: floor_pb2_grpc.FloorServiceStub, streams: int, messages_each: int
) -> float:
    """Aggregate messages/s of `streams` concurrent Streams of `messages_each` Blobs."""
    request = floor_pb2.Count(messages=messages_each, payload_bytes=FLOOR_PAYLOAD_BYTES)

    async def one() -> int:
        count = 0
        async for _ in stub.Stream(request):
            count += 1
        return count

    began = now()
    counts = await asyncio.gather(*(one() for _ in range(streams)))
    elapsed = now() - began
    if sum(counts) != streams * messages_each:
        raise RuntimeError(f"floor streams sent {sum(counts)} of {streams * messages_each}")
    return sum(counts) / elapsed


async def floor_first_messages_ms(
    stub: floor_pb2_grpc.FloorServiceStub, streams: int, messages_each: int
) -> list[float]:
    """Time to the first Blob of each of `streams` Streams started at once, in ms.

    The same shape as item 3 (its runs and deltas), without behest: what any grpc.aio
    service here needs before the first message of the last stream arrives.
    """
    request = floor_pb2.Count(messages=messages_each, payload_bytes=FLOOR_PAYLOAD_BYTES)

    async def one() -> float:
        began, first = now(), None
        async for _ in stub.Stream(request):
            if first is None:
                first = (now() - began) * 1000
        assert first is not None
        return first

    return list(await asyncio.gather(*(one() for _ in range(streams))))


async def floor_unary_ms(stub: floor_pb2_grpc.FloorServiceStub, calls: int) -> list[float]:
    """Round trips of `calls` sequential Pings, in ms."""
    samples = []
    for _ in range(calls):
        began = now()
        await stub.Ping(floor_pb2.PingRequest())
        samples.append((now() - began) * 1000)
    return samples


async def measure_floors(address: str, sizes: Sizes) -> dict[str, Any]:
    """Item 1: each floor `sizes.floor_repeats` times, the median of each kept."""
    async with channel(address) as ch:
        stub = floor_pb2_grpc.FloorServiceStub(ch)
        # Warm up the connection and both methods.
        await floor_unary_ms(stub, 20)
        await floor_one_stream(stub, 500)
        one, many, rtt, first = [], [], [], []
        for _ in range(sizes.floor_repeats):
            one.append(await floor_one_stream(stub, sizes.floor_one_stream_messages))
            many.append(
                await floor_streams(stub, sizes.floor_streams, sizes.floor_messages_per_stream)
            )
            rtt.append(statistics.median(await floor_unary_ms(stub, sizes.floor_unary_calls)))
            first += await floor_first_messages_ms(stub, sizes.many_runs, sizes.many_runs_deltas)
    return {
        "one_stream_msgs_per_s": statistics.median(one),
        "streams_msgs_per_s": statistics.median(many),
        "unary_rtt_median_ms": statistics.median(rtt),
        "first_message_p50_ms": percentile(first, 50),
        "first_message_p99_ms": percentile(first, 99),
        "samples": {"one_stream": one, "streams": many, "unary_rtt_median_ms": rtt},
    }


# --- behest runs ---------------------------------------------------------------------------


def create_request(input_: str, model: str) -> pb.CreateRunRequest:
    return pb.CreateRunRequest(
        provider=c.ProviderId(value="local"), model=c.ModelName(value=model), input=input_
    )


def script(deltas: int, delay_ms: float | None = None) -> str:
    """The `script` model's input for one model call of `deltas` text deltas."""
    step: dict[str, Any] = {"deltas": deltas}
    if delay_ms is not None:
        step["delay_ms"] = delay_ms
    return json.dumps({"steps": [step]})


@dataclass
class Tally:
    """What one client saw of one stream of a run's events."""

    started: float
    first_at: float | None = None
    ended_at: float | None = None
    events: int = 0
    # The model's deltas (each of the `script` model's is "w<i> ") and the events carrying them.
    model_deltas: int = 0
    text_delta_events: int = 0
    last_sequence: int = 0
    run_id: str = ""
    outcome: str = ""
    problem: str = ""

    @property
    def first_event_ms(self) -> float | None:
        return None if self.first_at is None else (self.first_at - self.started) * 1000

    @property
    def seconds(self) -> float:
        assert self.ended_at is not None
        return self.ended_at - self.started


Metadata = tuple[tuple[str, str], ...]


async def follow(
    call: Any, started: float, *, after: int = 0, on_first: Callable[[], None] | None = None
) -> Tally:
    """Read a CreateRunStream or WatchRunEvents call to its end, checking what it sends.

    A stream counts as a problem unless its sequences run on from `after` without a gap and
    it ends with run_completed.
    """
    tally = Tally(started=started, last_sequence=after)
    try:
        async for event in call:
            if tally.first_at is None:
                tally.first_at = now()
                tally.run_id = event.run_id
                if on_first is not None:
                    on_first()
            tally.events += 1
            if event.sequence != tally.last_sequence + 1 and not tally.problem:
                tally.problem = f"sequence {event.sequence} after {tally.last_sequence}"
            tally.last_sequence = event.sequence
            kind = event.WhichOneof("event")
            if kind == "text_delta":
                tally.text_delta_events += 1
                tally.model_deltas += event.text_delta.delta.count(" ")
            elif kind in TERMINAL:
                tally.outcome = kind
        tally.ended_at = now()
    except grpc.aio.AioRpcError as exc:
        tally.ended_at = now()
        tally.problem = tally.problem or f"{exc.code().name}: {exc.details()}"
    if not tally.problem and tally.outcome != "run_completed":
        tally.problem = f"ended with {tally.outcome or 'no terminal event'}"
    return tally


def raise_problem(tally: Tally, what: str) -> None:
    if tally.problem:
        raise RuntimeError(f"{what}: {tally.problem} (run {tally.run_id or 'unknown'})")


async def warm_up(stub: rpc.RunServiceStub, metadata: Metadata = ()) -> int:
    """A few short runs, so the first measured one does not pay for first-use costs.

    Returns how many events a one-delta `script` run has besides its delta, so item 5 can ask
    for a run of exactly the number of events it wants. `metadata` goes with every call.
    """
    for i in range(5):
        request = create_request(f"warm up {i}", "echo")
        tally = await follow(stub.CreateRunStream(request, metadata=metadata), now())
        raise_problem(tally, "warm-up run")
    request = create_request(script(1), "script")
    tally = await follow(stub.CreateRunStream(request, metadata=metadata), now())
    raise_problem(tally, "warm-up run")
    return tally.events - 1


async def long_run(stub: rpc.RunServiceStub, deltas: int, repeats: int) -> dict[str, Any]:
    """Item 2: one `script` run of `deltas` text deltas streamed to one client.

    Run `repeats` times, one after the other; the median events/s is the figure.
    """
    rates, delta_rates, seconds = [], [], []
    tally = Tally(started=now())
    for _ in range(repeats):
        request = create_request(script(deltas), "script")
        tally = await follow(stub.CreateRunStream(request), now())
        raise_problem(tally, "long run")
        if tally.model_deltas != deltas:
            raise RuntimeError(f"long run streamed {tally.model_deltas} of {deltas} deltas")
        rates.append(tally.events / tally.seconds)
        delta_rates.append(deltas / tally.seconds)
        seconds.append(tally.seconds)
    return {
        "deltas": deltas,
        "events": tally.events,
        "text_delta_events": tally.text_delta_events,
        "events_per_s": statistics.median(rates),
        "deltas_per_s": statistics.median(delta_rates),
        "samples": rates,
        "seconds": seconds,
    }


async def many_runs(
    stub: rpc.RunServiceStub, runs: int, deltas: int, repeats: int
) -> dict[str, Any]:
    """Item 3: `runs` concurrent CreateRunStream runs of `deltas` deltas each.

    Done `repeats` times: the aggregate events/s is the median over the repeats, the
    first-event percentiles are over every run of every repeat, the errors are summed.
    """
    request = create_request(script(deltas), "script")
    rates, delta_rates, first, errors = [], [], [], []
    events = text_delta_events = 0
    for _ in range(repeats):
        began = now()
        tallies = await asyncio.gather(
            *(follow(stub.CreateRunStream(request), now()) for _ in range(runs))
        )
        ended = max(t.ended_at or now() for t in tallies)
        errors += [t.problem for t in tallies if t.problem]
        first += [ms for t in tallies if (ms := t.first_event_ms) is not None]
        events = sum(t.events for t in tallies)
        text_delta_events = sum(t.text_delta_events for t in tallies)
        rates.append(events / (ended - began))
        delta_rates.append(sum(t.model_deltas for t in tallies) / (ended - began))
    return {
        "runs": runs,
        "deltas_each": deltas,
        "events": events,
        "text_delta_events": text_delta_events,
        "events_per_s": statistics.median(rates),
        "deltas_per_s": statistics.median(delta_rates),
        "samples": rates,
        "first_event_p50_ms": percentile(first, 50) if first else None,
        "first_event_p99_ms": percentile(first, 99) if first else None,
        "first_event_max_ms": max(first) if first else None,
        "errors": len(errors),
        "error_examples": sorted(set(errors))[:5],
    }


async def first_event(stub: rpc.RunServiceStub, warm_up_runs: int, samples: int) -> dict[str, Any]:
    """Item 4: sequential `echo` runs; time from the CreateRunStream call to its first event."""
    first_ms = []
    for i in range(warm_up_runs + samples):
        tally = await follow(
            stub.CreateRunStream(create_request(f"first event {i}", "echo")), now()
        )
        raise_problem(tally, "first-event run")
        if i >= warm_up_runs:
            assert tally.first_event_ms is not None
            first_ms.append(tally.first_event_ms)
    return {
        "samples": samples,
        "median_ms": statistics.median(first_ms),
        "p90_ms": percentile(first_ms, 90),
        "min_ms": min(first_ms),
    }


async def replay(
    stub: rpc.RunServiceStub, events: int, overhead: int, repeats: int
) -> dict[str, Any]:
    """Item 5: WatchRunEvents from 0 on a finished run of `events` events, then ListRunEvents
    over the same run, page by page (each the median of repeats)."""
    written = await follow(
        stub.CreateRunStream(create_request(script(events - overhead), "script")), now()
    )
    raise_problem(written, "run to replay")
    rates = []
    for _ in range(repeats):
        request = pb.WatchRunEventsRequest(run_id=written.run_id, last_event_id=0)
        tally = await follow(stub.WatchRunEvents(request), now())
        raise_problem(tally, "replay")
        if tally.events != written.events:
            raise RuntimeError(f"replay sent {tally.events} of {written.events} events")
        rates.append(tally.events / tally.seconds)
    listed = [await list_events(stub, written.run_id, written.events) for _ in range(repeats)]
    return {
        "events": written.events,
        "events_per_s": statistics.median(rates),
        "samples": rates,
        "list_events_page": LIST_EVENTS_PAGE,
        "list_events_per_s": statistics.median(listed),
        "list_events_samples": listed,
    }


# ListRunEvents' largest page: a 10,000-event run is one call (and an empty last page is none).
LIST_EVENTS_PAGE = 10_000


async def list_events(stub: rpc.RunServiceStub, run_id: str, expected: int) -> float:
    """ListRunEvents pages from 0 to the end of a finished run; events/s. The pages must be
    gapless and end at its terminal event."""
    began, after, more, count, kind = now(), 0, True, 0, ""
    while more:
        request = pb.ListRunEventsRequest(
            run_id=run_id, after_sequence=after, limit=LIST_EVENTS_PAGE
        )
        page = await stub.ListRunEvents(request)
        for event in page.events:
            if event.sequence != after + 1:
                raise RuntimeError(f"ListRunEvents: sequence {event.sequence} after {after}")
            after = event.sequence
        count += len(page.events)
        more = page.more
        if page.events:
            kind = page.events[-1].WhichOneof("event") or ""
    seconds = now() - began
    if count != expected or kind != "run_completed":
        raise RuntimeError(f"ListRunEvents sent {count} of {expected} events, ending with {kind}")
    return count / seconds


async def idle_watchers(
    server: Child, runs: int, watchers_per_run: int, channels: int, settle_s: float
) -> dict[str, Any]:
    """Item 6: server RSS growth with runs x watchers_per_run open WatchRunEvents on live runs.

    The runs are slow `script` runs (one delta every IDLE_DELAY_MS) created before the
    baseline is read, so the growth is the watchers' alone. The watchers are spread over
    `channels` connections. The figure is read once every watcher has had its first event
    and `settle_s` has passed.
    """
    chans = [channel(server.address, own_connection=True) for _ in range(channels)]
    stubs = [rpc.RunServiceStub(ch) for ch in chans]
    control = stubs[0]
    run_ids: list[str] = []
    calls: list[Any] = []
    tasks: list[asyncio.Task[Tally]] = []
    try:
        slow = create_request(script(1_000_000, delay_ms=IDLE_DELAY_MS), "script")
        for _ in range(runs):
            run_ids.append((await control.CreateRun(slow)).run_id)
        # Warm the watch path up (first-use costs are not the watchers'), then let go.
        await _watch_until_first(stubs, run_ids[:1], 10, calls, tasks)
        await _close(calls, tasks)
        await asyncio.sleep(settle_s)
        server.check_alive()
        before = server.rss_bytes()
        began = now()
        await _watch_until_first(stubs, run_ids, watchers_per_run, calls, tasks)
        opened_s = now() - began
        await asyncio.sleep(settle_s)
        server.check_alive()
        after = server.rss_bytes()
        problems = [t.result().problem for t in tasks if t.done() and t.result().problem]
        if problems:
            raise RuntimeError(f"{len(problems)} watchers ended early: {problems[0]}")
        return {
            "runs": runs,
            "watchers": runs * watchers_per_run,
            "connections": channels,
            "rss_before_mb": before / 2**20,
            "rss_after_mb": after / 2**20,
            "growth_mb": (after - before) / 2**20,
            "growth_kb_per_watcher": (after - before) / 1024 / (runs * watchers_per_run),
            "seconds_to_open": opened_s,
        }
    finally:
        await _close(calls, tasks)
        for run_id in run_ids:
            try:
                await control.CancelRun(pb.CancelRunRequest(run_id=run_id))
            except grpc.aio.AioRpcError:
                pass  # already ended: nothing to cancel
        for ch in chans:
            await ch.close()


async def _watch_until_first(
    stubs: list[rpc.RunServiceStub],
    run_ids: list[str],
    per_run: int,
    calls: list[Any],
    tasks: list[asyncio.Task[Tally]],
) -> None:
    """Open per_run watchers on each run (round-robin over stubs); wait for each first event."""
    total = len(run_ids) * per_run
    seen = 0
    all_seen = asyncio.Event()

    def first() -> None:
        nonlocal seen
        seen += 1
        if seen == total:
            all_seen.set()

    for i in range(total):
        stub = stubs[i % len(stubs)]
        call = stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_ids[i % len(run_ids)]))
        calls.append(call)
        tasks.append(asyncio.create_task(follow(call, now(), on_first=first)))
    waiter = asyncio.create_task(all_seen.wait())
    await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    if not all_seen.is_set():
        waiter.cancel()
        ended = next(t for t in tasks if t.done())
        raise RuntimeError(f"a watcher ended before its first event: {ended.result().problem}")


async def _close(calls: list[Any], tasks: list[asyncio.Task[Tally]]) -> None:
    for call in calls:
        call.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    calls.clear()
    tasks.clear()


async def short_runs_per_s(
    stub: rpc.RunServiceStub, runs: int, concurrency: int, metadata: Metadata = ()
) -> float:
    """`runs` short `echo` runs (CreateRunStream, each read to its end), `concurrency` at a
    time; runs/s from the first call to the last terminal event."""
    started = iter(range(runs))

    async def client() -> None:
        for i in started:
            request = create_request(f"short run {i}", "echo")
            tally = await follow(stub.CreateRunStream(request, metadata=metadata), now())
            raise_problem(tally, "short run")

    began = now()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return runs / (now() - began)


async def auth_overhead(
    off: rpc.RunServiceStub,
    on: rpc.RunServiceStub,
    metadata: Metadata,
    runs: int,
    concurrency: int,
    repeats: int,
) -> dict[str, Any]:
    """Item 8: the same short runs on a server without authentication (`off`) and on one
    with bearer tokens (`on`, every call sending `metadata`).

    `repeats` rounds; each measures both servers, one right after the other (off first in
    even rounds, on first in odd ones), so both see the same machine and the same number of
    runs already in their databases. The rates are the medians over the rounds, the ratio
    is the median of the rounds' on/off ratios.
    """
    rates: dict[str, list[float]] = {"off": [], "on": []}
    for round_ in range(repeats):
        for mode in ("off", "on") if round_ % 2 == 0 else ("on", "off"):
            if mode == "off":
                rates["off"].append(await short_runs_per_s(off, runs, concurrency))
            else:
                rates["on"].append(await short_runs_per_s(on, runs, concurrency, metadata))
    ratios = [
        on_rate / off_rate for off_rate, on_rate in zip(rates["off"], rates["on"], strict=True)
    ]
    return {
        "runs": runs,
        "concurrency": concurrency,
        "repeats": repeats,
        "off_runs_per_s": statistics.median(rates["off"]),
        "on_runs_per_s": statistics.median(rates["on"]),
        "ratio": statistics.median(ratios),
        "samples": rates,
        "round_ratios": ratios,
    }


# --- Item 9: replicas on PostgreSQL --------------------------------------------------------


@dataclass
class Seen:
    """What one client saw of one stream of a run's events, and when (the monotonic clock)."""

    at: dict[int, float] = field(default_factory=dict)
    sequences: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def first_at(self) -> float | None:
        return min(self.at.values()) if self.at else None

    @property
    def problem(self) -> str:
        return self.error or log_problem(self.sequences, self.kinds)


def log_problem(sequences: list[int], kinds: list[str]) -> str:
    """'' if the sequences run 1..N with no gap or repeat and there is exactly one terminal
    event, the last, run_completed; else what is wrong."""
    expected = list(range(1, len(sequences) + 1))
    if sequences != expected:
        at = next(
            i for i, (got, want) in enumerate(zip(sequences, expected, strict=True)) if got != want
        )
        before = sequences[at - 1] if at else 0
        return f"sequence {sequences[at]} after {before}"
    terminal = [kind for kind in kinds if kind in TERMINAL]
    if terminal != ["run_completed"] or kinds[-1] != "run_completed":
        return f"terminal events {terminal or 'none'}, last event {kinds[-1] if kinds else 'none'}"
    return ""


async def record(
    call: Any, on_event: Callable[[pb.AgentEvent], None] | None = None, seen: Seen | None = None
) -> Seen:
    """Read a WatchRunEvents call to its end, noting in `seen` when each event arrived."""
    seen = Seen() if seen is None else seen
    try:
        async for event in call:
            arrived = now()
            seen.at.setdefault(event.sequence, arrived)
            seen.sequences.append(event.sequence)
            seen.kinds.append(event.WhichOneof("event") or "")
            if on_event is not None:
                on_event(event)
    except grpc.aio.AioRpcError as exc:
        seen.error = f"{exc.code().name}: {exc.details()}"
    return seen


async def cross_replica_watch(
    owner: rpc.RunServiceStub, other: rpc.RunServiceStub, runs: int, deltas: int, delay_ms: float
) -> dict[str, Any]:
    """Item 9, watch latency: `runs` runs, one after the other, created through `owner` (which
    executes them) and each watched through both replicas at once; for every event both saw,
    the lag = when `other`'s watcher got it - when the owner's did.

    The watchers open just after CreateRun, so a run's first events may be in the store
    before one of them subscribes and reach it as a replay: only the events the owner's
    watcher saw after both had their first event are counted.
    """
    request = create_request(script(deltas, delay_ms), "script")
    lags: list[float] = []
    problems: list[str] = []
    replayed = 0
    for _ in range(runs):
        run_id = (await owner.CreateRun(request)).run_id
        watch = pb.WatchRunEventsRequest(run_id=run_id)
        on_owner, on_other = await asyncio.gather(
            record(owner.WatchRunEvents(watch)), record(other.WatchRunEvents(watch))
        )
        for side, seen in (("owner", on_owner), ("other replica", on_other)):
            if seen.problem:
                problems.append(f"{side}: {seen.problem} (run {run_id})")
        if on_owner.first_at is None or on_other.first_at is None:
            continue
        both_open = max(on_owner.first_at, on_other.first_at)
        for sequence, owner_at in on_owner.at.items():
            other_at = on_other.at.get(sequence)
            if other_at is None:
                continue  # a problem, counted above
            if owner_at > both_open:
                lags.append((other_at - owner_at) * 1000)
            else:
                replayed += 1
    if not lags:
        raise RuntimeError(f"no event seen live through both replicas: {problems[:3]}")
    return {
        "runs": runs,
        "deltas_each": deltas,
        "delay_ms": delay_ms,
        "events": len(lags),
        "events_left_out": replayed,
        "lag_p50_ms": percentile(lags, 50),
        "lag_p90_ms": percentile(lags, 90),
        "lag_p99_ms": percentile(lags, 99),
        "lag_max_ms": max(lags),
        "lag_min_ms": min(lags),
        "errors": len(problems),
        "error_examples": problems[:5],
    }


def failover_script(steps: int, deltas: int, delay_ms: float) -> str:
    """A `script` run of `steps` model calls, each streaming `deltas` words `delay_ms` apart
    and calling the calculator (other arguments each time: no doom loop), then an answer."""
    calls = [
        {
            "deltas": deltas,
            "delay_ms": delay_ms,
            "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} + {i}"}}],
        }
        for i in range(1, steps + 1)
    ]
    return json.dumps({"steps": [*calls, {"text": "finished", "delay_ms": delay_ms}]})


# Terminal statuses of the runs table (common.proto's RunStatus).
ENDED = frozenset(
    {int(c.RUN_STATUS_COMPLETED), int(c.RUN_STATUS_FAILED), int(c.RUN_STATUS_CANCELLED)}
)


async def failover(
    victim: Child,
    creator: rpc.RunServiceStub,
    watcher: rpc.RunServiceStub,
    survivors: list[str],
    database_url: str,
    runs: int,
    body: str,
    settle_s: float,
    wait_s: float,
) -> dict[str, Any]:
    """Item 9, failover: `runs` long runs created through `victim` (so it owns them, which
    the store's `runs.owner` must confirm), each watched through `watcher` (another replica)
    from its start; `settle_s` after every run is streaming text (long enough for the victim
    to renew its leases), `victim` gets SIGKILL.

    A run's failover time = from the kill to when `watcher` delivered the run's first event
    written by its new owner (the first stored event of a later lease generation than the
    run had at the kill). Errors: a watched or stored log that is not gapless from 1 to
    exactly one terminal event (run_completed), the two differing, a run ending unowned by
    a survivor. `wait_s` bounds the wait for the runs' ends after the kill.
    """
    request = create_request(body, "script")
    created = await asyncio.gather(*(creator.CreateRun(request) for _ in range(runs)))
    run_ids = [reply.run_id for reply in created]
    streaming = {run_id: asyncio.Event() for run_id in run_ids}

    def mark(event: pb.AgentEvent) -> None:
        if event.WhichOneof("event") == "text_delta":
            streaming[event.run_id].set()

    calls = [watcher.WatchRunEvents(pb.WatchRunEventsRequest(run_id=r)) for r in run_ids]
    seen = [Seen() for _ in run_ids]
    tasks = [
        asyncio.create_task(record(call, mark, s)) for call, s in zip(calls, seen, strict=True)
    ]
    try:
        async with engine_on(database_url) as engine:
            try:
                async with asyncio.timeout(30):
                    await asyncio.gather(*(e.wait() for e in streaming.values()))
            except TimeoutError:
                raise RuntimeError("the runs did not all stream text within 30 s") from None
            await asyncio.sleep(settle_s)
            before = await run_rows(engine, run_ids)
            owners = {row.owner for row in before.values()}
            if owners != {victim.node}:
                raise RuntimeError(
                    f"runs owned by {owners}, not only by their creator {victim.node}"
                )
            if any(row.status in ENDED for row in before.values()):
                raise RuntimeError("a run ended before the kill: make the failover script longer")
            killed_at = now()
            await victim.kill()
            seen_at_kill = [len(s.sequences) for s in seen]
            try:
                async with asyncio.timeout(wait_s):
                    await asyncio.gather(*tasks)
            except TimeoutError:
                rows = await run_rows(engine, run_ids)
                raise RuntimeError(
                    f"not every run ended within {wait_s:.0f} s of the kill: "
                    f"{sum(row.status in ENDED for row in rows.values())} of {runs} did"
                ) from None
            after = await run_rows(engine, run_ids)
            stored = {run_id: await stored_events(engine, run_id) for run_id in run_ids}
    finally:
        for call in calls:
            call.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    failover_s: list[float] = []
    problems: list[str] = []
    for run_id, watched in zip(run_ids, seen, strict=True):
        log = stored[run_id]
        new = [sequence for sequence, _, gen in log if gen > before[run_id].generation]
        if watched.problem:
            problems.append(f"watched: {watched.problem} (run {run_id})")
        if stored_problem := log_problem([s for s, _, _ in log], [k for _, k, _ in log]):
            problems.append(f"stored: {stored_problem} (run {run_id})")
        if [s for s, _, _ in log] != watched.sequences:
            problems.append(
                f"watched {len(watched.sequences)} events, stored {len(log)} (run {run_id})"
            )
        if after[run_id].owner not in survivors:
            problems.append(f"ended owned by {after[run_id].owner} (run {run_id})")
        if not new or new[0] not in watched.at:
            problems.append(f"no event of a new owner seen (run {run_id})")
            continue
        failover_s.append(watched.at[new[0]] - killed_at)
    if not failover_s:
        raise RuntimeError(f"no run was taken over: {problems[:3]}")
    adopters = [after[run_id].owner for run_id in run_ids]
    return {
        "runs": runs,
        "failover_max_s": max(failover_s),
        "failover_median_s": statistics.median(failover_s),
        "failover_min_s": min(failover_s),
        "samples": failover_s,
        "events_seen_before_kill": seen_at_kill,
        "events_each": [len(s.sequences) for s in seen],
        "adopted_by": {node: adopters.count(node) for node in survivors},
        "errors": len(problems),
        "error_examples": problems[:5],
    }


async def with_timeout(seconds: float, what: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    async with asyncio.timeout(seconds):
        return await what
