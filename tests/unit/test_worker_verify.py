"""A worker tool's check (`@worker.tool(verify=...)`) against the fake WorkerService: the hello
declares the tools with one verifiable, a `verify` is answered with a verdict (it ran, with
its output; it did not; cannot tell, as a check that fails, is slow or says nothing readable),
sync and async checks get the checked arguments and the context of the execution in question,
checks do not take the tasks' slots but have as many of their own, and a verdict whose stream
broke first is not sent."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from behest.worker import TaskContext, Verified, Worker, current_task_context
from tests.fakes.worker_service import FakeWorkerService
from tests.unit.test_worker_sdk import Gate, Item, Unreadable, fast_worker, serving


@pytest.fixture
async def fake() -> AsyncIterator[FakeWorkerService]:
    async with FakeWorkerService() as service:
        yield service


def verdict_of(verdict: Any) -> tuple[bool, bool, str, bool]:
    return (verdict.known, verdict.ran, verdict.output, verdict.is_error)


UNKNOWN = (False, False, "", False)


# --- declarations -----------------------------------------------------------------------------


async def test_the_hello_declares_verifiable_only_the_tools_with_a_check(
    fake: FakeWorkerService,
) -> None:
    worker = fast_worker(fake.address)

    @worker.tool(verify=lambda order_id: None)
    def refund(order_id: str) -> str:
        return order_id

    @worker.tool
    def lookup(order_id: str) -> str:
        return order_id

    assert worker.tools["refund"].verifiable and not worker.tools["lookup"].verifiable
    async with serving(worker):
        stream = await fake.stream()
    assert {spec.name: spec.verifiable for spec in stream.hello.tools} == {
        "refund": True,
        "lookup": False,
    }


def test_a_check_that_cannot_be_called_with_the_tools_arguments_is_refused_at_once() -> None:
    worker = Worker("127.0.0.1:1")

    def tool(order_id: str, context: TaskContext) -> str:
        return order_id

    def other(order: str) -> bool:
        return True

    def variadic(**kwargs: Any) -> bool:
        return True

    def two_contexts(context: Any, ctx: TaskContext) -> bool:
        return True

    with pytest.raises(TypeError, match="tool tool's check: 'order' is not a parameter"):
        worker.tool(verify=other)(tool)
    with pytest.raises(TypeError, match=r"check: \*args and \*\*kwargs"):
        worker.tool(verify=variadic)(tool)
    with pytest.raises(TypeError, match="check: two parameters ask for the context"):
        worker.tool(verify=two_contexts)(tool)
    with pytest.raises(TypeError, match="verify must be a function, not a str"):
        worker.tool(verify="yes")(tool)  # type: ignore[arg-type]
    assert not worker.tools


# --- verdicts ---------------------------------------------------------------------------------


async def test_what_a_check_returns_is_the_verdict(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address)
    answers: dict[str, Any] = {
        "json": Verified(ran=True, output={"refund": "r-1", "cents": [100]}),
        "text": Verified(ran=True, output="refunded 1.00"),
        "error": Verified(ran=True, output="card declined", is_error=True),
        "true": True,
        "not-run": Verified(ran=False, output="ignored"),
        "false": False,
        "none": None,
        "wrong": "yes",
        "object": Verified(ran=True, output=Unreadable()),
    }

    async def check(kind: str) -> Any:
        if kind == "raise":
            raise LookupError("the payments API is down")
        return answers[kind]

    @worker.tool(verify=check)
    async def refund(kind: str) -> str:
        return kind

    verdicts = {}
    async with serving(worker):
        stream = await fake.stream()
        for kind in [*answers, "raise"]:
            stream.verify("refund", {"kind": kind}, execution_id=kind)
        for _ in range(len(answers) + 1):
            verdict = await stream.verdict()
            verdicts[verdict.execution_id] = verdict_of(verdict)
    assert verdicts == {
        "json": (True, True, '{"refund":"r-1","cents":[100]}', False),
        "text": (True, True, "refunded 1.00", False),
        "error": (True, True, "card declined", True),
        "true": (True, True, "refund ran; its output is not known", False),
        "not-run": (True, False, "", False),
        "false": (True, False, "", False),
        "none": UNKNOWN,
        "wrong": UNKNOWN,
        "object": UNKNOWN,
        "raise": UNKNOWN,
    }
    assert stream.results.empty()  # the tool itself never ran


async def test_an_async_check_gets_the_checked_arguments_and_the_executions_context(
    fake: FakeWorkerService,
) -> None:
    worker = fast_worker(fake.address)
    seen: list[tuple[list[Item], TaskContext, TaskContext | None]] = []

    async def shipped(items: list[Item], ctx: TaskContext) -> Verified:
        seen.append((items, ctx, current_task_context()))
        return Verified(ran=True, output=f"shipped {len(items)} under {ctx.idempotency_key}")

    @worker.tool(timeout_s=20, verify=shipped)
    async def ship(order_id: str, items: list[Item], context: TaskContext) -> str:
        return order_id

    async with serving(worker):
        stream = await fake.stream()
        before = datetime.now(UTC)
        asked = stream.verify(
            "ship",
            {"order_id": "o-1", "items": [{"sku": "a"}, {"sku": "b", "quantity": 2}]},
            attempt=2,
            run_id="run-1",
            call_id="call-1",
        )
        verdict = await stream.verdict()
        after = datetime.now(UTC)
    assert (verdict.execution_id, verdict.attempt) == (asked.execution_id, 2)
    assert verdict_of(verdict) == (True, True, f"shipped 2 under {asked.idempotency_key}", False)
    [(items, context, current)] = seen
    assert items == [Item(sku="a"), Item(sku="b", quantity=2)]
    assert current is context
    assert context.deadline is not None
    assert before + timedelta(seconds=20) <= context.deadline <= after + timedelta(seconds=20)
    assert context == TaskContext(
        execution_id=asked.execution_id,
        attempt=2,
        idempotency_key=asked.idempotency_key,
        tool_name="ship",
        run_id="run-1",
        session_id="",
        call_id="call-1",
        deadline=context.deadline,
        worker_id="w-1",
    )
    assert current_task_context() is None


async def test_a_sync_check_runs_in_a_thread_with_the_context(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address)
    seen: list[tuple[str, str, str | None]] = []

    def refunded(order_id: str, /, context: TaskContext) -> bool:
        current = current_task_context()
        seen.append((threading.current_thread().name, order_id, current and current.call_id))
        return order_id == "o-refunded"

    @worker.tool(verify=refunded)
    def refund(order_id: str, /, cents: int) -> str:
        return order_id

    async with serving(worker):
        stream = await fake.stream()
        stream.verify("refund", {"order_id": "o-refunded", "cents": 1}, call_id="c-1")
        first = await stream.verdict()
        stream.verify("refund", {"order_id": "o-other", "cents": 1}, call_id="c-2")
        second = await stream.verdict()
    assert verdict_of(first) == (True, True, "refund ran; its output is not known", False)
    assert verdict_of(second) == (True, False, "", False)
    assert [(thread.startswith("behest-worker refund check"), o, c) for thread, o, c in seen] == [
        (True, "o-refunded", "c-1"),
        (True, "o-other", "c-2"),
    ]


async def test_what_has_no_check_or_no_valid_arguments_cannot_tell(
    fake: FakeWorkerService,
) -> None:
    worker = fast_worker(fake.address)
    worker.tool(name="checked", verify=lambda n: True)(lambda n: str(n))
    worker.tool(name="unchecked")(lambda: "")

    verdicts = {}
    async with serving(worker):
        stream = await fake.stream()
        stream.verify("checked", {"n": 1}, execution_id="valid")
        stream.verify("checked", {"n": 1, "extra": True}, execution_id="invalid")
        stream.verify("checked", "not json", execution_id="not-json")
        stream.verify("unchecked", {}, execution_id="unchecked")
        stream.verify("missing", {}, execution_id="missing")
        for _ in range(5):
            verdict = await stream.verdict()
            verdicts[verdict.execution_id] = verdict.known
    assert verdicts == {
        "valid": True,
        "invalid": False,
        "not-json": False,
        "unchecked": False,
        "missing": False,
    }


# --- time, slots, breaks ----------------------------------------------------------------------


async def test_a_check_slower_than_the_tools_timeout_cannot_tell(
    fake: FakeWorkerService,
) -> None:
    worker = fast_worker(fake.address, max_tasks=1)
    never = asyncio.Event()
    cancelled = asyncio.Event()
    let_go = threading.Event()

    async def hangs() -> bool:
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True

    def stuck() -> bool:
        let_go.wait(10)
        return True

    async def after_the_thread() -> bool:
        return let_go.is_set()

    worker.tool(name="async_slow", timeout_s=0.05, verify=hangs)(lambda: "")
    worker.tool(name="sync_slow", timeout_s=0.05, verify=stuck)(lambda: "")
    worker.tool(name="patient", timeout_s=10, verify=after_the_thread)(lambda: "")
    worker.tool(name="echo")(lambda: "echoed")

    async with serving(worker):
        stream = await fake.stream()
        stream.verify("async_slow")
        assert verdict_of(await stream.verdict()) == UNKNOWN
        assert cancelled.is_set()  # an async check is stopped at its time
        stream.verify("sync_slow")
        assert verdict_of(await stream.verdict()) == UNKNOWN
        # The stuck thread holds the one check slot: this check waits past its time for it.
        stream.verify("async_slow")
        assert verdict_of(await stream.verdict()) == UNKNOWN
        stream.verify("patient", execution_id="patient")
        stream.task("echo")  # its result comes once the worker has read the verify before it
        assert (await stream.result()).output == "echoed"
        let_go.set()  # the thread ends, and gives its slot to the patient check
        verdict = await stream.verdict()
    assert (verdict.execution_id, verdict.known, verdict.ran) == ("patient", True, True)


async def test_checks_take_no_task_slot_but_have_as_many_of_their_own(
    fake: FakeWorkerService,
) -> None:
    worker = fast_worker(fake.address, max_tasks=2)
    tasks, checks = Gate(), Gate()

    async def check(n: int) -> bool:
        await checks.run()
        return True

    @worker.tool(verify=check)
    async def wait(n: int) -> str:
        await tasks.run()
        return str(n)

    worker.tool(name="echo")(lambda: "echoed")

    async with serving(worker):
        stream = await fake.stream()
        stream.task("wait", {"n": 1})
        stream.task("wait", {"n": 2})
        await tasks.started_at_least(2)  # both task slots taken
        for n in range(4):
            stream.verify("wait", {"n": n})
        await checks.started_at_least(2)
        tasks.go.set()
        assert sorted([(await stream.result()).output for _ in range(2)]) == ["1", "2"]
        # The echo's result comes after the worker read the verifies before it: every check
        # has started or waits for a slot by now.
        stream.task("echo")
        assert (await stream.result()).output == "echoed"
        assert checks.running == 2
        checks.go.set()
        verdicts = [await stream.verdict() for _ in range(4)]
    assert all(verdict.known and verdict.ran for verdict in verdicts)
    assert (checks.started, checks.most) == (4, 2)


async def test_a_verdict_whose_stream_broke_is_not_sent_on_the_next(
    fake: FakeWorkerService,
) -> None:
    worker = fast_worker(fake.address)
    gate = Gate()

    async def check(kind: str) -> bool:
        if kind == "wait":
            await gate.run()
        return True

    worker.tool(name="refund", verify=check)(lambda kind: kind)

    async with serving(worker):
        first = await fake.stream()
        first.verify("refund", {"kind": "wait"}, execution_id="e-wait")
        await gate.started_at_least(1)
        first.end(grpc.StatusCode.UNAVAILABLE, "server stopping")
        second = await fake.stream()
        assert gate.running == 0  # its check was stopped with the stream
        second.verify("refund", {"kind": "now"}, execution_id="e-now")
        verdict = await second.verdict()
        second.task("refund", {"kind": "done"})
        assert (await second.result()).output == "done"
    assert verdict.execution_id == "e-now"
    assert first.verdicts.empty() and second.verdicts.empty()
