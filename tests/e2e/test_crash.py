"""A kill -9 loses nothing that was shown, and every run still ends exactly once."""

from __future__ import annotations

import signal
from pathlib import Path

import grpc

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from tests.support import collect, create_request, kind, script, server_process

TERMINAL = {"run_completed", "run_failed", "run_cancelled"}


async def test_runs_and_events_survive_kill_9_and_restart(tmp_path: Path) -> None:
    # A model call cut by the crash is repeated after the restart, as the run's next call.
    slow = script(
        {"text": " ".join(f"w{i}" for i in range(400)), "delay_ms": 10},
        {"text": "finished after the crash", "delay_ms": 5},
    )
    seen: dict[str, list[pb.AgentEvent]] = {}
    async with server_process(tmp_path) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            streams = [
                stub.CreateRunStream(create_request(slow, model="script")) for _ in range(10)
            ]
            for stream in streams:
                events = []
                async for event in stream:
                    events.append(event)
                    if len(events) == 8:
                        break
                seen[events[0].run_id] = events
            process.send_signal(signal.SIGKILL)
            await process.wait()
            for stream in streams:
                stream.cancel()

    async with server_process(tmp_path) as (_, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            for run_id, before in seen.items():
                cursor = before[-1].sequence
                rest = await collect(
                    stub.WatchRunEvents(
                        pb.WatchRunEventsRequest(run_id=run_id, last_event_id=cursor)
                    )
                )
                assert [e.sequence for e in rest] == list(range(cursor + 1, cursor + 1 + len(rest)))
                assert kind(rest[-1]) in TERMINAL
                everything = await collect(
                    stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id))
                )
                assert everything[: len(before)] == before
                assert [kind(e) in TERMINAL for e in everything].count(True) == 1
                assert kind(everything[-1]) == "run_completed"
                last_call = max(i for i, e in enumerate(everything) if kind(e) == "model_started")
                assert everything[last_call].model_started.iteration == 1
                text = [
                    e.text_delta.delta for e in everything[last_call:] if kind(e) == "text_delta"
                ]
                assert "".join(text) == "finished after the crash"
                run = await stub.GetRun(pb.GetRunRequest(run_id=run_id))
                assert run.run.status == c.RUN_STATUS_COMPLETED
            snapshots = await rpc.SnapshotServiceStub(channel).ListSnapshots(
                pb.ListSnapshotsRequest()
            )
            assert list(snapshots.snapshots) == []
