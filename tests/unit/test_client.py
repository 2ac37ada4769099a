"""BehestClient's resume logic and the CLI's exit codes, against a scripted fake RunService."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from behest._proto.agent.v1 import common_pb2, run_pb2, run_pb2_grpc
from behest.cli import main
from behest.client import BehestClient, CreatedRun, NotFound, Unavailable

RUN_ID = "run-1"


def run_events(terminal: dict[str, Any] | None = None) -> list[run_pb2.AgentEvent]:
    payloads: list[dict[str, Any]] = [
        {"run_started": run_pb2.RunStartedEvent(session_id="sess-1")},
        {"model_started": run_pb2.ModelStartedEvent(iteration=1)},
        {"text_delta": run_pb2.TextDeltaEvent(delta="hello ")},
        {"text_delta": run_pb2.TextDeltaEvent(delta="world")},
        terminal
        or {
            "run_completed": run_pb2.RunCompletedEvent(
                finish_reason=common_pb2.FINISH_REASON_STOP, iterations=1
            )
        },
    ]
    return [run_pb2.AgentEvent(sequence=i, run_id=RUN_ID, **p) for i, p in enumerate(payloads, 1)]


class FakeRuns(run_pb2_grpc.RunServiceServicer):
    """One run's log; each stream call may be cut with UNAVAILABLE after a number of events."""

    def __init__(self) -> None:
        self.log = run_events()
        self.status: common_pb2.RunStatus.ValueType = common_pb2.RUN_STATUS_COMPLETED
        self.create_cuts: list[int | None] = []
        self.watch_cuts: list[int | None] = []
        self.unavailable_creates = 0
        self.creates: list[run_pb2.CreateRunRequest] = []
        self.watches: list[run_pb2.WatchRunEventsRequest] = []
        self.get_runs = 0
        self.list_requests: list[run_pb2.ListRunsRequest] = []
        self.cancels: list[str] = []

    def CreateRun(self, request: Any, context: Any) -> run_pb2.CreateRunResponse:
        self.creates.append(request)
        if self.unavailable_creates:
            self.unavailable_creates -= 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
        return run_pb2.CreateRunResponse(run_id=RUN_ID, session_id="sess-1")

    def CreateRunStream(self, request: Any, context: Any) -> Iterator[run_pb2.AgentEvent]:
        self.creates.append(request)
        cut = self.create_cuts.pop(0) if self.create_cuts else None
        yield from self._send(self.log, cut, context)

    def WatchRunEvents(self, request: Any, context: Any) -> Iterator[run_pb2.AgentEvent]:
        self.watches.append(request)
        if request.run_id != RUN_ID:
            context.abort(grpc.StatusCode.NOT_FOUND, f"run {request.run_id!r} not found")
        cut = self.watch_cuts.pop(0) if self.watch_cuts else None
        after = [e for e in self.log if e.sequence > request.last_event_id]
        yield from self._send(after, cut, context)

    def GetRun(self, request: Any, context: Any) -> run_pb2.GetRunResponse:
        self.get_runs += 1
        return run_pb2.GetRunResponse(run=self._record())

    def ListRuns(self, request: Any, context: Any) -> run_pb2.ListRunsResponse:
        self.list_requests.append(request)
        return run_pb2.ListRunsResponse(runs=[self._record()])

    def GetRunOutput(self, request: Any, context: Any) -> run_pb2.GetRunOutputResponse:
        return run_pb2.GetRunOutputResponse(output=run_pb2.RunOutput(run_id=RUN_ID, iterations=1))

    def CancelRun(self, request: Any, context: Any) -> run_pb2.CancelRunResponse:
        self.cancels.append(request.run_id)
        return run_pb2.CancelRunResponse()

    def _record(self) -> run_pb2.RunRecord:
        return run_pb2.RunRecord(
            id=RUN_ID,
            session_id="sess-1",
            status=self.status,
            provider=common_pb2.ProviderId(value="local"),
            model=common_pb2.ModelName(value="echo"),
        )

    @staticmethod
    def _send(
        events: list[run_pb2.AgentEvent], cut: int | None, context: Any
    ) -> Iterator[run_pb2.AgentEvent]:
        for i, event in enumerate(events):
            if i == cut:
                context.abort(grpc.StatusCode.UNAVAILABLE, "server restarting")
            yield event
        if cut is not None and cut >= len(events):
            context.abort(grpc.StatusCode.UNAVAILABLE, "server restarting")


@pytest.fixture
def fake() -> Iterator[tuple[FakeRuns, str]]:
    servicer = FakeRuns()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    run_pb2_grpc.add_RunServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def client(address: str) -> BehestClient:
    return BehestClient(address, reconnect_attempts=3, reconnect_backoff_s=0.001)


async def test_stream_run_resumes_with_watch_after_the_last_sequence(
    fake: tuple[FakeRuns, str],
) -> None:
    servicer, address = fake
    servicer.create_cuts = [3]
    async with client(address) as c:
        seen = [e.sequence async for e in c.stream_run("hello world")]
    assert seen == [1, 2, 3, 4, 5]
    assert [(w.run_id, w.last_event_id) for w in servicer.watches] == [(RUN_ID, 3)]
    assert servicer.creates[0].client_request_id  # generated, so a retried create is idempotent


async def test_break_before_the_first_event_repeats_the_same_create(
    fake: tuple[FakeRuns, str],
) -> None:
    servicer, address = fake
    servicer.create_cuts = [0, None]
    async with client(address) as c:
        seen = [e.sequence async for e in c.stream_run("hi", client_request_id="mine")]
    assert seen == [1, 2, 3, 4, 5]
    assert [r.client_request_id for r in servicer.creates] == ["mine", "mine"]
    assert servicer.watches == []


async def test_watch_resumes_after_repeated_breaks(fake: tuple[FakeRuns, str]) -> None:
    servicer, address = fake
    servicer.watch_cuts = [1, 0, 1]
    async with client(address) as c:
        seen = [e.sequence async for e in c.watch(RUN_ID, after=1)]
    assert seen == [2, 3, 4, 5]
    assert [w.last_event_id for w in servicer.watches] == [1, 2, 2, 3]


async def test_watch_gives_up_after_the_bounded_attempts(fake: tuple[FakeRuns, str]) -> None:
    servicer, address = fake
    servicer.watch_cuts = [0] * 10
    async with client(address) as c:
        with pytest.raises(Unavailable) as info:
            _ = [e async for e in c.watch(RUN_ID)]
    assert info.value.code == grpc.StatusCode.UNAVAILABLE
    assert info.value.message == "server restarting"
    assert len(servicer.watches) == 4  # the first try and 3 reconnects


async def test_other_statuses_are_raised_at_once(fake: tuple[FakeRuns, str]) -> None:
    servicer, address = fake
    async with client(address) as c:
        with pytest.raises(NotFound) as info:
            _ = [e async for e in c.watch("unknown")]
    assert info.value.code == grpc.StatusCode.NOT_FOUND
    assert len(servicer.watches) == 1


async def test_watch_at_the_end_of_a_finished_run_yields_nothing(
    fake: tuple[FakeRuns, str],
) -> None:
    servicer, address = fake
    async with client(address) as c:
        assert [e async for e in c.watch(RUN_ID, after=5)] == []
    assert servicer.get_runs == 1


async def test_create_run_is_retried_with_the_same_request_id(fake: tuple[FakeRuns, str]) -> None:
    servicer, address = fake
    servicer.unavailable_creates = 2
    async with client(address) as c:
        assert await c.create_run("hi") == CreatedRun(RUN_ID, "sess-1")
    ids = {r.client_request_id for r in servicer.creates}
    assert len(servicer.creates) == 3 and len(ids) == 1 and "" not in ids


def test_cli_run_streams_the_answer_and_exits_0(
    fake: tuple[FakeRuns, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, address = fake
    assert main(["run", "hello world", "--server", address]) == 0
    captured = capsys.readouterr()
    assert captured.out == "hello world\n✓ completed (stop, 1 iteration)\n"
    assert captured.err == f"run {RUN_ID}  session sess-1\n"


def test_cli_exits_1_on_a_failed_run(
    fake: tuple[FakeRuns, str], capsys: pytest.CaptureFixture[str]
) -> None:
    servicer, address = fake
    servicer.log = run_events({"run_failed": run_pb2.RunFailedEvent(error="boom")})
    assert main(["watch", RUN_ID, "--server", address]) == 1
    assert capsys.readouterr().out.endswith("✗ failed: boom\n")


def test_cli_exits_2_on_an_rpc_error_without_traceback(
    fake: tuple[FakeRuns, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, address = fake
    assert main(["watch", "unknown", "--server", address]) == 2
    assert capsys.readouterr().err == "error: NOT_FOUND: run 'unknown' not found\n"


def test_cli_runs_commands(fake: tuple[FakeRuns, str], capsys: pytest.CaptureFixture[str]) -> None:
    servicer, address = fake
    args = ["--server", address]
    assert main(["runs", "list", "--session", "sess-1", "--status", "failed", *args]) == 0
    request = servicer.list_requests[0]
    assert (request.session_id, request.status) == ("sess-1", common_pb2.RUN_STATUS_FAILED)
    assert request.pagination.limit == 20
    assert main(["runs", "get", RUN_ID, *args]) == 0
    assert main(["runs", "output", RUN_ID, *args]) == 0
    assert main(["runs", "cancel", RUN_ID, *args]) == 0
    assert servicer.cancels == [RUN_ID]
    out = capsys.readouterr().out
    assert f"{RUN_ID}  completed  local/echo" in out
    assert "status    completed" in out
    assert f"cancelled run {RUN_ID}" in out
