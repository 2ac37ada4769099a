"""`python -m bench` (`make bench`): issue 6's benchmark suite, issue 12's auth row (item 8)
and replicas on PostgreSQL (item 9); see bench/README.md.

Starts the floor server and behest servers as child processes on 127.0.0.1:0, measures each
item with clients in this process, prints a table of figures, targets, ratios and verdicts, and
writes the same as JSON (bench/results/<UTC timestamp>.json unless --json says otherwise).
Exits 1 if an item could not be measured; a missed target is reported, not an error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from behest import event_loop
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest.config import Settings
from bench import children, doors, items, sessions, workers
from bench.children import ROOT
from bench.sizes import FULL, QUICK, Sizes
from tests.stored import fresh_database

RESULTS = ROOT / "bench" / "results"
ITEMS = ("1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12")
NAMES = {
    "1": "floors",
    "2": "one long run",
    "3": "many runs",
    "4": "time to first event",
    "5": "replay (WatchRunEvents, ListRunEvents)",
    "6": "idle watchers",
    "7": "PostgreSQL (items 2-5)",
    "8": "bearer auth",
    "9": "replicas on PostgreSQL",
    "10": "worker tools",
    "11": "HTTP doors (Connect, SSE) against gRPC",
    "12": "a session's stored bytes, and its forks'",
}
# Items whose verdict is a ratio to a floor: asking for one of them measures the floors too.
NEEDS_FLOORS = {"2", "3", "4", "7", "10"}
USE_UVLOOP = Settings.load().use_uvloop
POSTGRES_ENV = ("BEHEST_BENCH_POSTGRES_URL", "BEHEST_TEST_POSTGRES_URL")


@dataclass
class Row:
    """One line of the table: a figure, and its target, ratio and verdict where it has one."""

    item: str
    measure: str
    value: float | None
    unit: str
    target: str = ""
    ratio: float | None = None
    passed: bool | None = None


@dataclass
class Suite:
    """The run's configuration and everything measured so far."""

    sizes: Sizes
    only: set[str]
    postgres_url: str
    results: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.errors)

    def error(self, key: str, name: str, message: str) -> None:
        """Record that item `key` could not be measured; the table points below it."""
        traceback.print_exc(file=sys.stderr)
        self.rows.append(Row(key, f"{name}: not measured (error below)", None, ""))
        self.errors.append(f"item {key}: {message.splitlines()[0]}")

    def floor(self, key: str) -> float | None:
        floors = self.results.get("1", {})
        value = floors.get(key)
        return float(value) if isinstance(value, int | float) else None

    async def item(
        self, key: str, measure: Callable[[], Awaitable[dict[str, Any]]], name: str = ""
    ) -> dict[str, Any]:
        """Run one item under the item timeout; an exception is recorded, not raised."""
        name = name or NAMES[key.split(".")[-1]]
        print(f"item {key}: {name} …", file=sys.stderr, flush=True)
        began = time.perf_counter()
        try:
            result = await items.with_timeout(self.sizes.item_timeout_s, measure())
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if isinstance(exc, TimeoutError):
                message = f"timed out after {self.sizes.item_timeout_s:.0f} s"
            result = {"error": message}
            self.error(key, name, message)
        result["item_seconds"] = time.perf_counter() - began
        return result


async def run_floors(suite: Suite) -> None:
    floor = await children.start_floor()
    async with children.running(floor):
        result = await suite.item("1", lambda: items.measure_floors(floor.address, suite.sizes))
    suite.results["1"] = {"name": NAMES["1"], **result}
    if "error" in result:
        return
    s = suite.sizes
    starts = f"{s.many_runs} streams of {s.many_runs_deltas} started at once"
    suite.rows += [
        Row("1", "floor: one stream", result["one_stream_msgs_per_s"], "msg/s"),
        Row(
            "1",
            f"floor: {s.floor_streams} streams, aggregate",
            result["streams_msgs_per_s"],
            "msg/s",
        ),
        Row("1", "floor: unary round trip, median", result["unary_rtt_median_ms"], "ms"),
        Row("1", f"floor: {starts}, first message p50", result["first_message_p50_ms"], "ms"),
        Row("1", f"floor: {starts}, first message p99", result["first_message_p99_ms"], "ms"),
    ]


# Items 2, 3 and 5 count events, so their server sends one event per model delta; items 2
# and 3 run again on a server with default settings, which joins the deltas that wait for a
# commit (its figure is model deltas/s), and item 4 runs there.
PER_EVENT = {"BEHEST_COALESCE_TEXT_DELTAS": "false"}
PER_EVENT_ITEMS = ("2", "3", "5")
DEFAULT_ITEMS = ("2", "3", "4")


async def run_store_items(
    suite: Suite, into: dict[str, Any], prefix: str, store: str, database_url: str
) -> None:
    """Items 2-5 against behest servers on `store`, each result put in `into` by item."""
    wanted = [k for k in ("2", "3", "4", "5") if prefix or k in suite.only]
    per_event = [k for k in wanted if k in PER_EVENT_ITEMS]
    if per_event:
        await _on_server(suite, into, prefix, store, database_url, per_event, joined=False)
    default = [k for k in wanted if k in DEFAULT_ITEMS]
    if default:
        await _on_server(suite, into, prefix, store, database_url, default, joined=True)


async def _on_server(
    suite: Suite,
    into: dict[str, Any],
    prefix: str,
    store: str,
    database_url: str,
    keys: list[str],
    *,
    joined: bool,
) -> None:
    s = suite.sizes
    with tempfile.TemporaryDirectory(prefix="behest-bench-") as data_dir:
        settings = {} if joined else PER_EVENT
        server = await children.start_behest(Path(data_dir), database_url, settings)
        async with children.running(server), items.channel(server.address) as ch:
            stub = rpc.RunServiceStub(ch)
            overhead = await items.warm_up(stub)
            measures: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
                "2": lambda: items.long_run(stub, s.long_run_deltas, s.long_run_repeats),
                "3": lambda: items.many_runs(
                    stub, s.many_runs, s.many_runs_deltas, s.many_runs_repeats
                ),
                "4": lambda: items.first_event(stub, s.first_event_warm_up, s.first_event_samples),
                "5": lambda: items.replay(stub, s.replay_events, overhead, s.replay_repeats),
            }
            for key in keys:
                label = f"{prefix}{key}"
                result = await suite.item(label, measures[key])
                if joined and key in PER_EVENT_ITEMS:
                    into.setdefault(key, {"name": NAMES[key], "store": store})["joined"] = result
                else:
                    into[key] = {"name": NAMES[key], "store": store, **result}
                if key == "4" and store == "postgresql":
                    into[key]["over_sqlite"] = over_sqlite(suite, result)
                if "error" not in result:
                    suite.rows += store_rows(suite, label, key, store, result, joined=joined)
                server.check_alive()


def store_rows(
    suite: Suite, label: str, key: str, store: str, r: dict[str, Any], *, joined: bool
) -> list[Row]:
    s = suite.sizes
    # Per event: what each event costs. Joined: how fast the model's text gets through.
    rate, unit = (r.get("deltas_per_s"), "deltas/s") if joined else (r.get("events_per_s"), "ev/s")
    mode = f"{store}, joined: {r.get('text_delta_events', 0):,} text events" if joined else store
    if key == "2":
        ratio = _ratio(rate, suite.floor("one_stream_msgs_per_s"))
        return [
            Row(
                label,
                f"one run of {s.long_run_deltas:,} deltas, {mode}",
                rate,
                unit,
                "≥ 0.5x one-stream floor",
                ratio,
                None if ratio is None else ratio >= 0.5,
            )
        ]
    if key == "3":
        ratio = _ratio(rate, suite.floor("streams_msgs_per_s"))
        runs = f"{s.many_runs} runs x {s.many_runs_deltas} deltas, {mode}"
        p99 = r["first_event_p99_ms"]
        return [
            Row(
                label,
                f"{runs}: aggregate",
                rate,
                unit,
                f"≥ 0.5x {s.floor_streams}-stream floor",
                ratio,
                None if ratio is None else ratio >= 0.5,
            ),
            Row(label, f"{runs}: first event p50", r["first_event_p50_ms"], "ms"),
            Row(
                label,
                f"{runs}: first event p99",
                p99,
                "ms",
                "< 50 ms",
                None,
                None if p99 is None else p99 < 50,
            ),
            Row(label, f"{runs}: errors", r["errors"], "", "0", None, r["errors"] == 0),
        ]
    if key == "4":
        ratio = _ratio(r["median_ms"], suite.floor("unary_rtt_median_ms"))
        rows = [
            Row(
                label,
                f"first event of CreateRunStream (echo), median, {store}",
                r["median_ms"],
                "ms",
                "≤ 3x unary round trip",
                ratio,
                None if ratio is None else ratio <= 3,
            )
        ]
        vs_sqlite = over_sqlite(suite, r) if store == "postgresql" else None
        if vs_sqlite is not None:
            rows.append(
                Row(
                    label,
                    "first event, median: PostgreSQL / SQLite (item 4)",
                    None,
                    "",
                    "≤ 1.5x SQLite",
                    vs_sqlite,
                    vs_sqlite <= 1.5,
                )
            )
        return rows
    replay_rate, list_rate = r["events_per_s"], r["list_events_per_s"]
    return [
        Row(
            label,
            f"replay of a finished {r['events']:,}-event run, {store}",
            replay_rate,
            "ev/s",
            "≥ 20,000 ev/s",
            None,
            replay_rate >= 20_000,
        ),
        Row(
            label,
            f"ListRunEvents over the same run, pages of {r['list_events_page']:,}, {store}",
            list_rate,
            "ev/s",
            "≥ 50,000 ev/s",
            None,
            list_rate >= 50_000,
        ),
    ]


def _ratio(value: float | None, floor: float | None) -> float | None:
    return None if not floor or value is None else value / floor


def over_sqlite(suite: Suite, postgres: dict[str, Any]) -> float | None:
    """Item 7.4's median time to first event over item 4's (SQLite), both of this run."""
    sqlite = suite.results.get("4", {})
    return _ratio(postgres.get("median_ms"), sqlite.get("median_ms"))


async def run_idle_watchers(suite: Suite) -> None:
    s = suite.sizes
    with tempfile.TemporaryDirectory(prefix="behest-bench-") as data_dir:
        server = await children.start_behest(Path(data_dir))
        async with children.running(server), items.channel(server.address) as ch:
            await items.warm_up(rpc.RunServiceStub(ch))
            result = await suite.item(
                "6",
                lambda: items.idle_watchers(
                    server, s.idle_runs, s.idle_watchers_per_run, s.idle_channels, s.idle_settle_s
                ),
            )
    suite.results["6"] = {"name": NAMES["6"], "store": "sqlite", **result}
    if "error" not in result:
        growth = result["growth_mb"]
        suite.rows.append(
            Row(
                "6",
                f"server RSS growth, {result['watchers']:,} watchers on {s.idle_runs} live runs",
                growth,
                "MB",
                "< 100 MB",
                None,
                growth < 100,
            )
        )


async def run_postgres(suite: Suite) -> None:
    if not suite.postgres_url:
        reason = f"no PostgreSQL: set {' or '.join(POSTGRES_ENV)} to measure items 2-5 on it"
        suite.results["7"] = {"name": NAMES["7"], "skipped": reason}
        suite.rows.append(Row("7", "PostgreSQL: skipped (no URL set)", None, ""))
        print(f"item 7: {reason}", file=sys.stderr, flush=True)
        return
    result: dict[str, Any] = {"name": NAMES["7"], "url": children.redact(suite.postgres_url)}
    try:
        async with fresh_database(suite.postgres_url, "behest_bench") as url:
            result["items"] = {}
            await run_store_items(suite, result["items"], "7.", "postgresql", url)
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        suite.error("7", "PostgreSQL", result["error"])
    suite.results["7"] = result


async def run_auth(suite: Suite) -> None:
    """Item 8: short runs on a server with auth off and on one with a bearer token, in turns."""
    s = suite.sizes
    token = secrets.token_urlsafe(32)
    metadata = (("authorization", f"Bearer {token}"),)
    with (
        tempfile.TemporaryDirectory(prefix="behest-bench-") as off_dir,
        tempfile.TemporaryDirectory(prefix="behest-bench-") as on_dir,
    ):
        off = await children.start_behest(Path(off_dir), settings={"BEHEST_AUTH__MODE": "none"})
        async with children.running(off):
            on = await children.start_behest(Path(on_dir), settings=children.bearer_auth(token))
            async with (
                children.running(on),
                items.channel(off.address) as off_channel,
                items.channel(on.address) as on_channel,
            ):
                off_stub, on_stub = rpc.RunServiceStub(off_channel), rpc.RunServiceStub(on_channel)
                await items.warm_up(off_stub)
                await items.warm_up(on_stub, metadata)
                result = await suite.item(
                    "8",
                    lambda: items.auth_overhead(
                        off_stub, on_stub, metadata, s.auth_runs, s.auth_concurrency, s.auth_repeats
                    ),
                )
                off.check_alive()
                on.check_alive()
    suite.results["8"] = {
        "name": NAMES["8"],
        "store": "sqlite",
        "auth": {"off": "mode none", "on": "mode bearer, one token; every call sends it"},
        **result,
    }
    if "error" in result:
        return
    runs = f"{s.auth_runs:,} echo runs, {s.auth_concurrency} at a time"
    ratio = result["ratio"]
    suite.rows += [
        Row("8", f"{runs}, auth off", result["off_runs_per_s"], "runs/s"),
        Row(
            "8",
            f"{runs}, bearer auth on",
            result["on_runs_per_s"],
            "runs/s",
            "≥ 0.9x auth off",
            ratio,
            ratio >= 0.9,
        ),
    ]


async def run_replicas(suite: Suite) -> None:
    """Item 9: replicas on one fresh PostgreSQL database (9.1 watch latency, 9.2 failover)."""
    if not suite.postgres_url:
        reason = f"no PostgreSQL: set {' or '.join(POSTGRES_ENV)} to measure replicas on it"
        suite.results["9"] = {"name": NAMES["9"], "skipped": reason}
        suite.rows.append(Row("9", "replicas on PostgreSQL: skipped (no URL set)", None, ""))
        print(f"item 9: {reason}", file=sys.stderr, flush=True)
        return
    s = suite.sizes
    result: dict[str, Any] = {"name": NAMES["9"], "url": children.redact(suite.postgres_url)}
    suite.results["9"] = result
    try:
        async with fresh_database(suite.postgres_url, "behest_bench") as url:

            async def watch() -> dict[str, Any]:
                async with (
                    children.replicas(2, url, PER_EVENT) as (a, b),
                    items.channel(a.address) as a_channel,
                    items.channel(b.address) as b_channel,
                ):
                    owner, other = rpc.RunServiceStub(a_channel), rpc.RunServiceStub(b_channel)
                    await items.warm_up(owner)
                    await items.warm_up(other)
                    measured = await items.cross_replica_watch(
                        owner, other, s.replica_runs, s.replica_events, s.replica_delay_ms
                    )
                    a.check_alive()
                    b.check_alive()
                    return measured

            result["watch"] = await suite.item("9.1", watch, "replicas: cross-replica watch")
            if "error" not in result["watch"]:
                suite.rows += watch_rows(suite, result["watch"])

            async def fail_over() -> dict[str, Any]:
                lease = {"BEHEST_RUN_LEASE_S": f"{s.failover_lease_s:g}"}
                body = items.failover_script(
                    s.failover_steps, s.failover_step_deltas, s.failover_delay_ms
                )
                async with (
                    children.replicas(3, url, {**PER_EVENT, **lease}) as (a, b, c),
                    items.channel(a.address) as a_channel,
                    items.channel(b.address) as b_channel,
                ):
                    creator, watcher = rpc.RunServiceStub(a_channel), rpc.RunServiceStub(b_channel)
                    await items.warm_up(creator)
                    await items.warm_up(watcher)
                    measured = await items.failover(
                        a,
                        creator,
                        watcher,
                        [b.node, c.node],
                        url,
                        s.failover_runs,
                        body,
                        # Past the victim's first lease renewal (every third of the lease).
                        settle_s=s.failover_lease_s / 2,
                        wait_s=failover_script_s(s) + s.failover_lease_s + 30,
                    )
                    b.check_alive()
                    c.check_alive()
                    return {"lease_s": s.failover_lease_s, **measured}

            result["failover"] = await suite.item("9.2", fail_over, "replicas: failover")
            if "error" not in result["failover"]:
                suite.rows += failover_rows(suite, result["failover"])
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        suite.error("9", NAMES["9"], result["error"])


def failover_script_s(s: Sizes) -> float:
    """About how long a failover run takes: its deltas, and each tool call's ~6 fragments."""
    per_step = (s.failover_step_deltas + 6) * s.failover_delay_ms / 1000
    return s.failover_steps * per_step


def watch_rows(suite: Suite, r: dict[str, Any]) -> list[Row]:
    s = suite.sizes
    what = (
        f"cross-replica watch, {s.replica_runs} runs x {s.replica_events} deltas "
        f"{s.replica_delay_ms:g} ms apart ({r['events']:,} events): "
        "behind the owner's own watchers"
    )
    p99 = r["lag_p99_ms"]
    return [
        Row("9.1", f"{what}, p50", r["lag_p50_ms"], "ms"),
        Row("9.1", f"{what}, p99", p99, "ms", "≤ 50 ms", None, p99 <= 50),
        Row("9.1", "cross-replica watch: errors", r["errors"], "", "0", None, r["errors"] == 0),
    ]


def failover_rows(suite: Suite, r: dict[str, Any]) -> list[Row]:
    lease = r["lease_s"]
    limit = lease + 5
    target = f"≤ lease + 5 s ({limit:g} s)"
    what = f"failover of {r['runs']} runs after kill -9 of their owner, lease {lease:g} s"
    worst, median = r["failover_max_s"], r["failover_median_s"]
    return [
        Row("9.2", f"{what}: max", worst, "s", target, None, worst <= limit),
        Row("9.2", f"{what}: median", median, "s", target, None, median <= limit),
        Row(
            "9.2",
            "failover: errors (gaps, terminal events, owners)",
            r["errors"],
            "",
            "0",
            None,
            r["errors"] == 0,
        ),
    ]


async def run(suite: Suite) -> None:
    if suite.only & (NEEDS_FLOORS | {"1"}):
        await guarded(suite, {"1"}, run_floors(suite))
    sqlite_items = suite.only & {"2", "3", "4", "5"}
    if sqlite_items:
        await guarded(suite, sqlite_items, run_store_items(suite, suite.results, "", "sqlite", ""))
    if "6" in suite.only:
        await guarded(suite, {"6"}, run_idle_watchers(suite))
    if "7" in suite.only:
        await run_postgres(suite)
    if "8" in suite.only:
        await guarded(suite, {"8"}, run_auth(suite))
    if "9" in suite.only:
        await run_replicas(suite)
    if "10" in suite.only:
        await guarded(suite, {"10"}, run_workers(suite))
    if "11" in suite.only:
        await guarded(suite, {"11"}, run_doors(suite))
    if "12" in suite.only:
        await guarded(suite, {"12"}, run_session_bytes(suite))


async def run_session_bytes(suite: Suite) -> None:
    """Item 12: bytes per turn of a long session, their growth, and what forks add."""
    with tempfile.TemporaryDirectory(prefix="behest-bench-") as data_dir:
        server = await children.start_behest(Path(data_dir))
        database = Path(data_dir) / "behest.db"
        async with children.running(server):
            # Quick: a shorter session, with as many forks per turn.
            turns, forks = (50, 5) if suite.sizes is QUICK else (sessions.TURNS, sessions.FORKS)
            result = await suite.item(
                "12", lambda: sessions.measure(server.address, database, turns, forks)
            )
    suite.results["12"] = {"name": NAMES["12"], "store": "sqlite", **result}
    if "error" in result:
        return
    turns, forks = result["turns"], result["forks"]
    growth, ratio = result["growth"], result["forks_ratio"]
    suite.rows += [
        Row("12", f"a {turns}-turn session, bytes per turn", result["bytes_per_turn"], "B"),
        Row("12", "bytes of its last 10 turns against its first 10", growth, "x",
            "≤ 1.1x (linear)", growth, growth <= 1.1),
        Row("12", f"the session and {forks} forks with a turn each, against it", ratio, "x",
            "< 1.2x", ratio, ratio < 1.2),
    ]  # fmt: skip


async def run_doors(suite: Suite) -> None:
    """Item 11: one long run's events/s and the first event's time over Connect and SSE,
    against gRPC's on the same server (one event per delta)."""
    s = suite.sizes
    env = {"BEHEST_HTTP_LISTEN": "127.0.0.1:0", "BEHEST_COALESCE_TEXT_DELTAS": "false"}
    with tempfile.TemporaryDirectory(prefix="behest-bench-") as data_dir:
        server = await children.start_behest(Path(data_dir), settings=env)
        base = f"http://127.0.0.1:{int(server.serving['http_port'])}"
        async with children.running(server), items.channel(server.address) as ch:
            await items.warm_up(rpc.RunServiceStub(ch))

            async def measure() -> dict[str, Any]:
                rates = await doors.long_runs(
                    server.address, base, s.long_run_deltas, s.long_run_repeats
                )
                first = await doors.first_events(
                    server.address, base, s.first_event_warm_up, s.first_event_samples
                )
                return {"events_per_s": rates, "first_event": first}

            result = await suite.item("11", measure)
    suite.results["11"] = {"name": NAMES["11"], "store": "sqlite", **result}
    if "error" in result:
        return
    rates, first = result["events_per_s"], result["first_event"]
    for door in ("connect", "sse"):
        ratio = _ratio(rates[door], rates["grpc"])
        suite.rows.append(
            Row("11", f"one long run over {door}, {rates['deltas']} deltas", rates[door],
                "ev/s", "≥ 0.5x gRPC's", ratio, ratio is not None and ratio >= 0.5)
        )  # fmt: skip
    suite.rows.append(Row("11", "one long run over gRPC (the reference)", rates["grpc"], "ev/s"))
    for door in ("connect", "sse"):
        ms = first[f"{door}_ms"]
        suite.rows.append(
            Row("11", f"time to first event over {door}", ms, "ms",
                f"gRPC {first['grpc_ms']:.2f} ms", _ratio(ms, first["grpc_ms"]))
        )  # fmt: skip


async def run_workers(suite: Suite) -> None:
    """Item 10: worker tools' round trips and calls/s against the in-process calculator's."""
    with tempfile.TemporaryDirectory(prefix="behest-bench-") as data_dir:
        server = await children.start_behest(Path(data_dir))
        async with children.running(server), items.channel(server.address) as ch:
            await items.warm_up(rpc.RunServiceStub(ch))
            result = await suite.item("10", lambda: workers.measure(server.address, suite.sizes))
    suite.results["10"] = {"name": NAMES["10"], "store": "sqlite", **result}
    if "error" in result:
        return
    unary = suite.floor("unary_rtt_median_ms")
    overhead = result["overhead_p50_ms"]
    rate = result["worker_calls_per_s"]
    calc, worker = result["calculator"], result["worker"]
    suite.rows += [
        Row("10", "in-process calculator round trip p50 / p99", calc["p50_ms"], "ms",
            f"p99 {calc['p99_ms']:.2f} ms"),
        Row("10", "worker tool round trip p50 / p99", worker["p50_ms"], "ms",
            f"p99 {worker['p99_ms']:.2f} ms"),
        Row("10", "worker tool overhead (p50 - calculator p50)", overhead, "ms",
            "≤ 3x unary", _ratio(overhead, unary), unary is not None and overhead <= 3 * unary),
        Row("10", f"worker tool calls/s, {result['workers']} workers", rate, "calls/s",
            "≥ 0.5x in-process", _ratio(rate, result["calculator_calls_per_s"]),
            rate >= 0.5 * result["calculator_calls_per_s"]),
    ]  # fmt: skip


async def guarded(suite: Suite, keys: set[str], step: Awaitable[None]) -> None:
    """Run a step that starts a server; if it fails, its unmeasured items record the error."""
    try:
        await step
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}"
        for key in sorted(keys - set(suite.results)):
            suite.results[key] = {"name": NAMES[key], "error": message}
            suite.error(key, NAMES[key], message)


# --- Output --------------------------------------------------------------------------------


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    if unit in ("ms", "MB", "s"):
        text = f"{value:,.2f}" if value < 100 else f"{value:,.0f}"
    else:
        text = f"{value:,.0f}"
    return f"{text} {unit}".rstrip()


def table(rows: list[Row]) -> str:
    header = ("item", "measure", "value", "target", "ratio", "result")
    lines = [
        (
            row.item,
            row.measure,
            format_value(row.value, row.unit),
            row.target,
            "" if row.ratio is None else f"{row.ratio:.2f}x",
            "" if row.passed is None else ("PASS" if row.passed else "FAIL"),
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    right = {2, 4}

    def render(cells: tuple[str, ...]) -> str:
        parts = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([render(header), rule, *(render(line) for line in lines)])


def machine() -> dict[str, Any]:
    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "grpcio": version("grpcio"),
        "protobuf": version("protobuf"),
        "sqlalchemy": version("sqlalchemy"),
        "behest": version("behest"),
        "event_loop": "uvloop"
        if event_loop.loop_factory(Settings.load().use_uvloop)
        else "asyncio",
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="behest's benchmark suite (issue 6)."
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes (a smoke run of ~20 s, not figures)"
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="ITEM",
        help="measure only these items (1-11; repeat or separate with commas); "
        "items 2, 3, 4 and 7 measure the floors too, for their ratios",
    )
    parser.add_argument(
        "--json", type=Path, help="write the JSON here (default bench/results/<UTC time>.json)"
    )
    parser.add_argument(
        "--postgres-url",
        default=next((os.environ[k] for k in POSTGRES_ENV if os.environ.get(k)), ""),
        help=f"PostgreSQL server for items 7 and 9 (default: ${' or $'.join(POSTGRES_ENV)})",
    )
    args = parser.parse_args(argv)
    only = {part.strip() for value in args.only or [] for part in value.split(",") if part.strip()}
    unknown = sorted(only - set(ITEMS))
    if unknown:
        parser.error(f"unknown item(s) {', '.join(unknown)}; items are {', '.join(ITEMS)}")
    args.only = only or set(ITEMS)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    started = datetime.now(UTC)
    suite = Suite(sizes=sizes, only=args.only, postgres_url=args.postgres_url)
    began = time.perf_counter()
    # Clients on the servers' event loop (uvloop unless BEHEST_USE_UVLOOP=false).
    event_loop.run(run(suite), use_uvloop=USE_UVLOOP)
    seconds = time.perf_counter() - began
    info = machine()
    report = {
        "started_at": started.isoformat(timespec="seconds"),
        "seconds": seconds,
        "mode": "quick" if args.quick else "full",
        "only": sorted(args.only),
        "machine": info,
        "server_env": children.server_settings_env(),
        "sizes": asdict(sizes),
        "items": {key: suite.results[key] for key in ITEMS if key in suite.results},
        "table": [asdict(row) for row in suite.rows],
        "errors": suite.errors,
    }
    path = args.json or RESULTS / f"{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"\nbehest bench ({report['mode']}), {report['started_at']}: {info['cpus']} CPUs, "
        f"Python {info['python']}, grpcio {info['grpcio']}, {info['event_loop']}"
    )
    print(table(suite.rows))
    if suite.errors:
        print("\nnot measured:\n" + "\n".join(suite.errors))
    print(f"\n{seconds:.0f} s; JSON: {path}")
    return 1 if suite.failed else 0


if __name__ == "__main__":
    sys.exit(main())
