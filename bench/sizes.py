"""How big each item of the suite is: FULL for `make bench`, QUICK for `--quick` (a smoke run)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """Counts of messages, runs, deltas and samples; see bench/README.md for what each item does.

    Repeated measurements report their median; item_timeout_s bounds each item.
    """

    floor_repeats: int
    floor_one_stream_messages: int
    floor_streams: int
    floor_messages_per_stream: int
    floor_unary_calls: int
    long_run_deltas: int
    long_run_repeats: int
    many_runs: int
    many_runs_deltas: int
    many_runs_repeats: int
    first_event_warm_up: int
    first_event_samples: int
    replay_events: int
    replay_repeats: int
    idle_runs: int
    idle_watchers_per_run: int
    idle_channels: int
    idle_settle_s: float
    auth_runs: int
    auth_concurrency: int
    auth_repeats: int
    # Item 9: replicas on PostgreSQL. Watch latency: runs one after the other, each of
    # replica_events deltas replica_delay_ms apart. Failover: failover_runs runs of
    # failover_steps model calls (each failover_step_deltas deltas, failover_delay_ms apart,
    # then a calculator call), on replicas whose run lease is failover_lease_s.
    replica_runs: int
    replica_events: int
    replica_delay_ms: float
    failover_runs: int
    failover_steps: int
    failover_step_deltas: int
    failover_delay_ms: float
    failover_lease_s: float
    # Item 10: worker tools. Sequential one-call runs (after a tenth as many to warm up),
    # then runs of 5 calls, 20 at a time.
    worker_round_trips: int
    worker_runs: int
    item_timeout_s: float


FULL = Sizes(
    floor_repeats=3,
    floor_one_stream_messages=20_000,
    floor_streams=50,
    floor_messages_per_stream=400,
    floor_unary_calls=1_000,
    long_run_deltas=20_000,
    long_run_repeats=3,
    many_runs=100,
    many_runs_deltas=200,
    many_runs_repeats=3,
    first_event_warm_up=10,
    first_event_samples=100,
    replay_events=10_000,
    replay_repeats=3,
    idle_runs=10,
    idle_watchers_per_run=100,
    idle_channels=10,
    idle_settle_s=2.0,
    auth_runs=1_000,
    auth_concurrency=20,
    auth_repeats=5,
    replica_runs=5,
    replica_events=200,
    replica_delay_ms=10,
    failover_runs=6,
    failover_steps=6,
    failover_step_deltas=30,
    failover_delay_ms=100,  # 6 x 30 x 100 ms: 18 s of deltas a run
    failover_lease_s=3.0,
    worker_round_trips=200,
    worker_runs=200,
    item_timeout_s=240.0,
)
QUICK = Sizes(
    floor_repeats=1,
    floor_one_stream_messages=2_000,
    floor_streams=50,
    floor_messages_per_stream=40,
    floor_unary_calls=100,
    long_run_deltas=1_000,
    long_run_repeats=1,
    many_runs=20,
    many_runs_deltas=50,
    many_runs_repeats=1,
    first_event_warm_up=3,
    first_event_samples=20,
    replay_events=1_000,
    replay_repeats=1,
    idle_runs=2,
    idle_watchers_per_run=50,
    idle_channels=2,
    idle_settle_s=0.5,
    auth_runs=40,
    auth_concurrency=10,
    auth_repeats=2,
    replica_runs=2,
    replica_events=50,
    replica_delay_ms=10,
    failover_runs=3,
    failover_steps=4,
    failover_step_deltas=15,
    failover_delay_ms=100,  # 6 s a run
    failover_lease_s=2.0,
    worker_round_trips=20,
    worker_runs=20,
    item_timeout_s=60.0,
)
