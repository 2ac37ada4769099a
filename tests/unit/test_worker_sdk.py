"""behest.worker against a fake WorkerService (tests/fakes/worker_service.py): tools declared
from their hints and docstrings, tasks run and answered, errors, the concurrency limit,
heartbeats, reconnects with results carried over, refusals, and a stop that drains."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator
from datetime import UTC
from pathlib import Path
from typing import Annotated, Any

import grpc
import pytest
from pydantic import BaseModel, Field

import behest.worker
from behest.worker import (
    RetryableError,
    TaskContext,
    Worker,
    WorkerError,
    current_task_context,
)
from tests.certs import CertificateAuthority
from tests.fakes.worker_service import FakeWorkerService, deadline_in
from tests.unit.test_layers import graph, problems


class Item(BaseModel):
    sku: str
    quantity: int = 1


class Shipped(BaseModel):
    order_id: str
    items: list[Item]


def fast_worker(address: str, **options: Any) -> Worker:
    options.setdefault("name", "test-worker")
    return Worker(address, reconnect_backoff_s=0.001, reconnect_backoff_max_s=0.01, **options)


@pytest.fixture
async def fake() -> AsyncIterator[FakeWorkerService]:
    async with FakeWorkerService() as service:
        yield service


@contextlib.asynccontextmanager
async def serving(worker: Worker) -> AsyncIterator[asyncio.Task[None]]:
    """worker.serve() in a task; stopped at once when the block ends, if still serving."""
    task = asyncio.create_task(worker.serve())
    try:
        yield task
    finally:
        worker.stop(drain=False)
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


# --- declarations -----------------------------------------------------------------------------


def test_the_schema_comes_from_the_hints_and_the_description_from_the_docstring() -> None:
    worker = Worker("127.0.0.1:1")

    @worker.tool(idempotent=True, timeout_s=5, max_attempts=3)
    async def lookup_order(
        order_id: str,
        items: list[Item] | None = None,
        limit: Annotated[int, Field(ge=1, description="at most this many")] = 10,
        context: TaskContext | None = None,
    ) -> str:
        """Look an order up by its id.

        Returns it as text."""
        return ""

    tool = worker.tools["lookup_order"]
    assert tool.description == "Look an order up by its id.\n\nReturns it as text."
    assert tool.context_parameter == "context"
    assert (tool.idempotent, tool.timeout_s, tool.max_attempts) == (True, 5, 3)
    assert tool.parameters_schema == {
        "$defs": {
            "Item": {
                "properties": {
                    "sku": {"type": "string"},
                    "quantity": {"default": 1, "type": "integer"},
                },
                "required": ["sku"],
                "type": "object",
            }
        },
        "additionalProperties": False,
        "properties": {
            "order_id": {"type": "string"},
            "items": {
                "anyOf": [{"items": {"$ref": "#/$defs/Item"}, "type": "array"}, {"type": "null"}],
                "default": None,
            },
            "limit": {
                "default": 10,
                "description": "at most this many",
                "minimum": 1,
                "type": "integer",
            },
        },
        "required": ["order_id"],
        "type": "object",
    }


def test_the_context_is_found_by_its_type_or_its_name_and_left_out_of_the_schema() -> None:
    worker = Worker("127.0.0.1:1")

    @worker.tool
    def by_type(ctx: TaskContext, json: str) -> str:  # a name pydantic's models use
        return json

    @worker.tool(name="by-name", description="told, not read")
    def by_name(context, n: int = 0):  # type: ignore[no-untyped-def]
        """Not this."""
        return n

    @worker.tool
    def none_at_all() -> str:
        return ""

    assert worker.tools["by_type"].context_parameter == "ctx"
    assert worker.tools["by_type"].parameters_schema["properties"] == {"json": {"type": "string"}}
    named = worker.tools["by-name"]
    assert (named.context_parameter, named.description) == ("context", "told, not read")
    assert named.parameters_schema["properties"] == {"n": {"default": 0, "type": "integer"}}
    empty = worker.tools["none_at_all"].parameters_schema
    assert empty == {"additionalProperties": False, "properties": {}, "type": "object"}
    assert worker.tools["none_at_all"].context_parameter is None
    assert by_type.__name__ == "by_type"  # the function itself comes back


def test_what_cannot_be_declared_is_refused_at_once() -> None:
    worker = Worker("127.0.0.1:1")

    def variadic(*args: int) -> str:
        return ""

    def keywords(**kwargs: int) -> str:
        return ""

    def clash() -> str:
        return ""

    with pytest.raises(TypeError, match=r"\*args and \*\*kwargs"):
        worker.tool(variadic)
    with pytest.raises(TypeError, match=r"\*args and \*\*kwargs"):
        worker.tool(keywords)
    with pytest.raises(ValueError, match="tool name 'a b'"):
        worker.tool(name="a b")(clash)
    with pytest.raises(ValueError, match="max_attempts"):
        worker.tool(max_attempts=0)(clash)
    with pytest.raises(ValueError, match="timeout_s must be more than 0"):
        worker.tool(timeout_s=0)(clash)
    worker.tool(clash)
    with pytest.raises(ValueError, match="'clash' already"):
        worker.tool(clash)
    with pytest.raises(ValueError, match="max_tasks"):
        Worker("127.0.0.1:1", max_tasks=0)


def test_an_output_schema_is_taken_as_given_or_made_of_a_type() -> None:
    worker = Worker("127.0.0.1:1")
    worker.tool(name="given", output_schema={"type": "object"})(lambda: "{}")
    worker.tool(name="typed", output_schema=Item)(lambda: "{}")
    assert worker.tools["given"].output_schema == {"type": "object"}
    assert worker.tools["typed"].output_schema == {
        "properties": {"sku": {"type": "string"}, "quantity": {"default": 1, "type": "integer"}},
        "required": ["sku"],
        "type": "object",
    }


# --- tasks and results ------------------------------------------------------------------------


async def test_the_hello_declares_the_tools_and_the_stream_carries_the_token(
    fake: FakeWorkerService,
) -> None:
    worker = fast_worker(fake.address, token="s3cret", max_tasks=3)

    @worker.tool(idempotent=True, read_only=True, requires_approval=True, schedule_timeout_s=9)
    async def lookup_order(order_id: str) -> str:
        """Look an order up by its id."""
        return order_id

    async with serving(worker):
        stream = await fake.stream()
    assert stream.metadata["authorization"] == "Bearer s3cret"
    assert (stream.hello.name, stream.hello.max_tasks) == ("test-worker", 3)
    [spec] = stream.hello.tools
    assert (spec.name, spec.description) == ("lookup_order", "Look an order up by its id.")
    assert json.loads(spec.parameters_schema) == worker.tools["lookup_order"].parameters_schema
    assert (spec.idempotent, spec.read_only, spec.concurrency_safe, spec.requires_approval) == (
        True,
        True,
        False,
        True,
    )
    assert (spec.timeout_s, spec.schedule_timeout_s, spec.max_attempts) == (30, 9, 1)
    assert spec.output_schema == "" and not spec.verifiable


async def test_a_task_runs_with_its_context_and_its_result_is_sent(
    fake: FakeWorkerService,
) -> None:
    worker = fast_worker(fake.address)
    seen: list[tuple[TaskContext, TaskContext | None]] = []

    @worker.tool
    async def lookup_order(order_id: str, context: TaskContext) -> str:
        seen.append((context, current_task_context()))
        return f"order {order_id}: shipped"

    async with serving(worker):
        stream = await fake.stream()
        sent = stream.task(
            "lookup_order",
            {"order_id": "o-1"},
            attempt=2,
            run_id="run-1",
            session_id="sess-1",
            call_id="call-1",
            deadline=deadline_in(30),
        )
        result = await stream.result()
    assert (result.execution_id, result.attempt) == (sent.execution_id, 2)
    assert result.output == "order o-1: shipped"
    assert not result.is_error and not result.retryable
    [(context, current)] = seen
    assert current is context
    assert context == TaskContext(
        execution_id=sent.execution_id,
        attempt=2,
        idempotency_key=sent.idempotency_key,
        tool_name="lookup_order",
        run_id="run-1",
        session_id="sess-1",
        call_id="call-1",
        deadline=sent.deadline.ToDatetime(tzinfo=UTC),
        worker_id="w-1",
    )
    assert current_task_context() is None


async def test_a_sync_tool_runs_in_a_thread_with_the_context(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address)
    seen: list[tuple[str, str]] = []

    @worker.tool
    def ship(order_id: str, items: list[Item]) -> Shipped:
        context = current_task_context()
        assert context is not None
        seen.append((threading.current_thread().name, context.execution_id))
        return Shipped(order_id=order_id, items=items)

    async with serving(worker):
        stream = await fake.stream()
        sent = stream.task("ship", {"order_id": "o-2", "items": [{"sku": "a"}]})
        result = await stream.result()
    assert json.loads(result.output) == {"order_id": "o-2", "items": [{"sku": "a", "quantity": 1}]}
    [(thread, execution_id)] = seen
    assert thread.startswith("behest-worker") and execution_id == sent.execution_id


class Unreadable:
    pass


async def test_failures_become_error_results_in_plain_words(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address)

    @worker.tool
    async def fails(kind: str) -> Any:
        if kind == "retry":
            raise RetryableError("the backend is busy")
        if kind == "empty":
            raise LookupError()
        if kind == "dict":
            return {"kind": kind, "n": [1, 2]}
        if kind == "object":
            return Unreadable()
        raise ValueError(f"no order {kind}")

    outcomes = {}
    async with serving(worker):
        stream = await fake.stream()
        for arguments in [
            {"kind": "o-9"},
            {"kind": "retry"},
            {"kind": "empty"},
            {"kind": "dict"},
            {"kind": "object"},
            {"kind": 3, "extra": True},
            "not json",
        ]:
            stream.task("fails", arguments, execution_id=json.dumps(arguments))
        stream.task("missing", {}, execution_id="missing")
        for _ in range(8):
            result = await stream.result()
            outcomes[result.execution_id] = (result.output, result.is_error, result.retryable)
    assert outcomes == {
        '{"kind": "o-9"}': ("no order o-9", True, False),
        '{"kind": "retry"}': ("the backend is busy", True, True),
        '{"kind": "empty"}': ("LookupError", True, False),
        '{"kind": "dict"}': ('{"kind":"dict","n":[1,2]}', False, False),
        '{"kind": "object"}': (
            "fails returned a Unreadable, which cannot be written as JSON",
            True,
            False,
        ),
        '{"kind": 3, "extra": true}': (
            "invalid arguments: kind: Input should be a valid string; "
            "extra: Extra inputs are not permitted",
            True,
            False,
        ),
        '"not json"': (
            "invalid arguments: Invalid JSON: expected ident at line 1 column 2",
            True,
            False,
        ),
        "missing": ("this worker does not serve a tool 'missing'", True, False),
    }


async def test_an_async_tool_is_stopped_at_its_timeout(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address)
    never = asyncio.Event()

    @worker.tool(timeout_s=0.05)
    async def hangs() -> str:
        await never.wait()
        return "never"

    async with serving(worker):
        stream = await fake.stream()
        stream.task("hangs")
        result = await stream.result()
    assert (result.output, result.is_error) == ("hangs timed out after 0.05 s", True)


class Gate:
    """Tools that wait to be let go, counting how many run at once."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.started = 0
        self.go = asyncio.Event()
        self._changed = asyncio.Condition()

    async def run(self) -> None:
        async with self._changed:
            self.running += 1
            self.started += 1
            self.most = max(self.most, self.running)
            self._changed.notify_all()
        try:
            await self.go.wait()
        finally:
            self.running -= 1

    async def started_at_least(self, count: int) -> None:
        async with asyncio.timeout(10), self._changed:
            await self._changed.wait_for(lambda: self.started >= count)


async def test_no_more_than_max_tasks_run_at_once(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address, max_tasks=2)
    gate = Gate()

    @worker.tool
    async def wait(n: int) -> str:
        await gate.run()
        return str(n)

    async with serving(worker):
        stream = await fake.stream()
        for n in range(5):  # more than the worker takes: the SDK holds the rest back
            stream.task("wait", {"n": n})
        await gate.started_at_least(2)
        gate.go.set()
        outputs = sorted([(await stream.result()).output for _ in range(5)])
    assert outputs == ["0", "1", "2", "3", "4"]
    assert gate.most == 2


async def test_heartbeats_go_on_while_a_long_task_runs(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address)
    gate = Gate()

    @worker.tool
    async def long() -> str:
        await gate.run()
        return "done"

    async with serving(worker):
        stream = await fake.stream()
        stream.task("long")
        await gate.started_at_least(1)
        beats = stream.heartbeats
        await stream.heartbeats_past(beats + 3)  # three more while the task runs
        assert gate.running == 1
        gate.go.set()
        assert (await stream.result()).output == "done"


async def test_a_worker_speaks_mtls_with_its_certificate(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    server, client = ca.server(), ca.client("worker", principal="worker-1", tenant="acme")
    tls = grpc.ssl_server_credentials(
        [(server.key, server.cert)], root_certificates=ca.pem.cert, require_client_auth=True
    )
    async with FakeWorkerService(tls=tls) as fake:
        worker = fast_worker(
            fake.address,
            tls_ca=ca.pem.cert_file,
            tls_cert=client.cert_file,
            tls_key=client.key_file,
        )
        worker.tool(name="clock")(lambda: "noon")
        assert worker.uses_tls and not worker.sends_token
        async with serving(worker):
            stream = await fake.stream()
            stream.task("clock")
            assert (await stream.result()).output == "noon"
    assert stream.peer["x509_common_name"] == ["worker-1"]
    assert "authorization" not in stream.metadata


# --- breaks, refusals, stops ------------------------------------------------------------------


async def test_a_broken_stream_is_reopened_and_a_running_tasks_result_sent_on_it(
    fake: FakeWorkerService,
) -> None:
    worker = fast_worker(fake.address)
    gate = Gate()

    @worker.tool
    async def long() -> str:
        await gate.run()
        return "done late"

    async with serving(worker):
        first = await fake.stream()
        sent = first.task("long")
        await gate.started_at_least(1)
        first.end(grpc.StatusCode.UNAVAILABLE, "server stopping")
        second = await fake.stream()
        assert second.hello == first.hello
        gate.go.set()
        result = await second.result()
    assert (result.execution_id, result.output) == (sent.execution_id, "done late")
    assert gate.started == 1 and first.results.empty()


async def test_an_unacknowledged_result_is_sent_again_and_a_refused_one_is_not(
    fake: FakeWorkerService,
) -> None:
    worker = fast_worker(fake.address)
    fake.verdict = lambda result: (result.execution_id != "e-refused", "a stale attempt")

    @worker.tool
    async def echo(text: str) -> str:
        return text

    async with serving(worker):
        first = await fake.stream()
        first.task("echo", {"text": "refused"}, execution_id="e-refused")
        assert (await first.result()).output == "refused"
        first.acking = False  # the ack of the next result is lost with the stream
        first.task("echo", {"text": "lost"}, execution_id="e-lost")
        assert (await first.result()).execution_id == "e-lost"
        first.end(grpc.StatusCode.UNAVAILABLE, "gone")
        second = await fake.stream()
        again = await second.result()
    assert (again.execution_id, again.output) == ("e-lost", "lost")
    assert second.results.empty()  # the refused one was not sent again


async def test_a_refusal_ends_serve_with_a_worker_error(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address)
    worker.tool(name="clock")(lambda: "noon")
    fake.refusals = [(grpc.StatusCode.INVALID_ARGUMENT, "tool clock: the server has one")]
    with pytest.raises(WorkerError) as raised:
        await asyncio.wait_for(worker.serve(), 10)
    assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.message == "tool clock: the server has one"
    assert fake.hellos == 1


async def test_the_reconnect_attempts_run_out(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address, reconnect_attempts=2)
    worker.tool(name="clock")(lambda: "noon")
    fake.refusals = [(grpc.StatusCode.UNAVAILABLE, "starting")] * 3
    with pytest.raises(WorkerError, match="no stream after 3 attempts") as raised:
        await asyncio.wait_for(worker.serve(), 10)
    assert raised.value.code == grpc.StatusCode.UNAVAILABLE
    assert fake.hellos == 3


async def test_streams_cut_right_after_their_welcome_count_as_failed_attempts() -> None:
    # A long interval: no stream lasts one, so none starts a new outage.
    async with FakeWorkerService(heartbeat_interval_s=60) as fake:
        worker = fast_worker(fake.address, reconnect_attempts=2)
        worker.tool(name="clock")(lambda: "noon")
        fake.cuts = [(grpc.StatusCode.INTERNAL, "oops")] * 3
        with pytest.raises(WorkerError, match="the last: INTERNAL: oops"):
            await asyncio.wait_for(worker.serve(), 10)
        assert fake.hellos == 3


async def test_a_stop_finishes_the_tasks_in_hand_then_closes(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address)
    gate = Gate()

    @worker.tool
    async def long(n: int) -> str:
        await gate.run()
        return f"finished {n}"

    async with serving(worker) as served:
        stream = await fake.stream()
        stream.task("long", {"n": 1})
        await gate.started_at_least(1)
        worker.stop()
        stream.task("long", {"n": 2})  # came too late: not run
        assert not served.done()
        gate.go.set()
        assert (await stream.result()).output == "finished 1"
        await asyncio.wait_for(served, 10)
        assert stream.half_closed.is_set()
    assert gate.started == 1 and stream.results.empty()


async def test_a_stop_without_draining_cancels_the_tasks(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address)
    gate = Gate()

    @worker.tool
    async def long() -> str:
        await gate.run()
        return "never"

    async with serving(worker) as served:
        stream = await fake.stream()
        stream.task("long")
        await gate.started_at_least(1)
        worker.stop(drain=False)
        await asyncio.wait_for(served, 10)
    assert gate.running == 0 and stream.results.empty()


async def test_serve_needs_tools_and_runs_once_at_a_time(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address)
    with pytest.raises(ValueError, match="no tools"):
        await worker.serve()
    worker.tool(name="clock")(lambda: "noon")
    async with serving(worker):
        await fake.stream()
        with pytest.raises(RuntimeError, match="serving already"):
            await worker.serve()


# --- the package's face and its layer -----------------------------------------------------


def test_all_is_sorted_and_exactly_the_public_names() -> None:
    public = {name for name in vars(behest.worker) if not name.startswith("_")}
    assert behest.worker.__all__ == sorted(public)
    assert behest.worker.__all__ == [
        "ElicitAction",
        "Reply",
        "RetryableError",
        "TaskContext",
        "Verified",
        "Worker",
        "WorkerError",
        "WorkerTool",
        "current_task_context",
    ]
    for name in behest.worker.__all__:
        assert getattr(behest.worker, name).__module__.startswith("behest.worker._"), name


def test_only_the_wire_module_speaks_the_wire() -> None:
    edges = graph()
    for module, targets in edges.items():
        if module.startswith("behest.worker") and module != "behest.worker._wire":
            assert not {t for t in targets if t.startswith("behest._proto")}, module
    edges["behest.worker._worker"].add("behest.client._client")
    assert any("behest.worker imports only" in p for p in problems(edges))
