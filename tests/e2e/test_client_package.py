"""behest.client as a user writes it, against a real server: only the package's public names
create, stream, watch, list, answer and cancel runs; everything that comes back is one of
behest's types (no protobuf message), and each documented failure raises its BehestError.

The `script` model calls the server's `calculator`, made to wait for an approval here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import hashlib
import secrets
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message as ProtoMessage

from behest.client import (
    Approval,
    ApprovalRequested,
    BehestClient,
    BehestError,
    CreatedRun,
    Decision,
    Event,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PendingCallKind,
    ResourceExhausted,
    RunCancelled,
    RunCompleted,
    RunOptions,
    RunStatus,
    TextDelta,
    Unauthenticated,
    Unavailable,
    WaitingCall,
)
from tests.support import Server, fast_settings, script, start_server, stop_server

CALCULATOR = {"name": "calculator", "arguments": {"expression": "2+2"}}
APPROVE_ONCE = script({"tool_calls": [CALCULATOR]}, {"say": "tool_results"})
WAITS = RunOptions(model="script", approval_required_tools=["calculator"])


def assert_ours(value: Any, path: str = "result") -> None:
    """`value` and everything in it (but `.raw`) is behest's own or a plain Python value."""
    assert not isinstance(value, ProtoMessage), path
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        assert type(value).__module__.startswith("behest.client."), path
        for field in dataclasses.fields(value):
            if field.name != "raw":
                assert_ours(getattr(value, field.name), f"{path}.{field.name}")
    elif isinstance(value, enum.Enum):
        assert type(value).__module__.startswith("behest.client."), path
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            assert_ours(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            assert_ours(item, f"{path}[{key!r}]")
    else:
        assert value is None or isinstance(value, str | int | float | bytes | datetime), path


async def until_waiting(client: BehestClient, run_id: str) -> list[Event]:
    """Follow a run until its first call waits; the events so far."""
    seen = []
    async with contextlib.aclosing(client.watch(run_id)) as events:
        async for event in events:
            seen.append(event)
            if isinstance(event.data, ApprovalRequested):
                break
    return seen


async def test_a_script_of_public_names_drives_runs_and_gets_only_behests_types(
    server: Server,
) -> None:
    asked: list[WaitingCall] = []

    async def approve(call: WaitingCall) -> Approval:
        asked.append(call)
        return Approval(Decision.ALLOW)

    async with BehestClient(server.address) as client:
        streamed = [e async for e in client.stream_run("hello there")]
        assert "".join(e.data.delta for e in streamed if isinstance(e.data, TextDelta)) == (
            "hello there"
        )
        assert streamed[-1].terminal and isinstance(streamed[-1].data, RunCompleted)

        created = await client.create_run(APPROVE_ONCE, WAITS)
        assert isinstance(created, CreatedRun)
        watched = [e async for e in client.watch(created.run_id, approve=approve)]
        assert [c.tool for c in asked] == ["calculator"]
        assert isinstance(watched[-1].data, RunCompleted)

        # Answered by hand: the pending call, an answer, a second answer refused.
        by_hand = await client.create_run(APPROVE_ONCE, WAITS)
        await until_waiting(client, by_hand.run_id)
        [pending] = await client.pending_calls(by_hand.run_id)
        assert (pending.call.name, pending.kind) == ("calculator", PendingCallKind.APPROVAL)
        call = pending.call.id
        assert await client.submit_approvals(by_hand.run_id, {call: Decision.ALLOW}) == []
        with pytest.raises(FailedPrecondition):
            await client.submit_approvals(by_hand.run_id, {call: Approval(Decision.DENY, "no")})
        answered = [e async for e in client.watch(by_hand.run_id)]

        cancelled = await client.create_run(APPROVE_ONCE, WAITS)
        await until_waiting(client, cancelled.run_id)
        assert await client.cancel(cancelled.run_id) == RunStatus.CANCELLED
        [end] = [e async for e in client.watch(cancelled.run_id, after=1) if e.terminal]
        assert isinstance(end.data, RunCancelled)

        finished = await client.list_runs(status=RunStatus.COMPLETED)
        assert {r.id for r in finished} == {streamed[0].run_id, created.run_id, by_hand.run_id}
        run = await client.get_run(created.run_id)
        output = await client.get_output(created.run_id)
        stored = [e async for e in client.run_events(created.run_id)]
        assert stored == watched
        sessions = await client.list_sessions()
        session = await client.get_session(run.session_id)
        messages = [m async for m in client.session_messages(run.session_id)]
        catalog = (await client.list_tools(), await client.list_providers(), await client.usage())

    results = [streamed, created, watched, pending, answered, cancelled, end, finished, run]
    for result in [*results, output, stored, sessions, session, messages, catalog]:
        assert_ours(result)
    assert all(e.raw is not None for e in streamed) and run.raw is not None
    assert output.finish_reason.name == "STOP" and messages[-1].text == output.messages[-1].text


async def test_each_documented_failure_raises_its_behest_error(server: Server) -> None:
    nobody = str(uuid.uuid4())
    async with BehestClient(server.address) as client:
        with pytest.raises(NotFound) as unknown:
            await client.get_run(nobody)
        with pytest.raises(NotFound):
            _ = [e async for e in client.watch(nobody)]
        with pytest.raises(InvalidArgument) as not_an_id:
            await client.get_run("no-such-run")
        with pytest.raises(InvalidArgument) as bad:
            await client.create_run("hi", RunOptions(metadata="not json"))
    assert unknown.value.code == grpc.StatusCode.NOT_FOUND and nobody in unknown.value.message
    assert not_an_id.value.message == "run_id must be a UUID, got 'no-such-run'"
    assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT and "metadata" in bad.value.message
    assert isinstance(bad.value, BehestError)


async def test_a_wrong_token_is_unauthenticated(tmp_path: Path) -> None:
    token = secrets.token_urlsafe(32)
    entry = {"sha256": hashlib.sha256(token.encode()).hexdigest(), "principal": "a", "tenant": "t"}
    tables = {"auth": {"mode": "bearer", "tokens": {"a": entry}}}
    server = await start_server(fast_settings(tmp_path).with_tables(tables, source="test"))
    try:
        async with BehestClient(server.address, token=token) as client:
            assert await client.list_runs() == []
        async with BehestClient(server.address, token=secrets.token_urlsafe(32)) as client:
            with pytest.raises(Unauthenticated) as refused:
                await client.list_runs()
            with pytest.raises(Unauthenticated):
                _ = [e async for e in client.stream_run("hi")]
    finally:
        await stop_server(server)
    assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, **settings: object) -> AsyncIterator[Server]:
    server = await start_server(fast_settings(tmp_path, **settings))
    try:
        yield server
    finally:
        await stop_server(server)


async def test_a_full_stream_cap_is_resource_exhausted(tmp_path: Path) -> None:
    async with serving(tmp_path, max_streams=1) as server, BehestClient(server.address) as client:
        run = await client.create_run(APPROVE_ONCE, WAITS)
        async with contextlib.aclosing(client.watch(run.run_id)) as held:
            await anext(held)  # the one stream the server allows is open
            with pytest.raises(ResourceExhausted) as full:
                _ = [e async for e in client.watch(run.run_id)]
    assert full.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert full.value.message.startswith("max_streams")


async def test_a_server_that_is_gone_is_unavailable(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        address = server.address
    client = BehestClient(address, reconnect_attempts=2, reconnect_backoff_s=0.01)
    async with client:
        with pytest.raises(Unavailable):
            await client.get_run("any")
        with pytest.raises(Unavailable):
            await client.create_run("hi")  # retried, then given up
        with pytest.raises(Unavailable) as stream:
            _ = [e async for e in client.stream_run("hi")]  # could not be resumed
    assert stream.value.code == grpc.StatusCode.UNAVAILABLE


class Outage:
    """Wraps a client's reconnect backoff: `failed` is set once a call has failed and waits."""

    def __init__(self, client: BehestClient, waits_expected: int) -> None:
        self.failed = asyncio.Event()
        self._waits, self._expected, self._backoff = 0, waits_expected, client._backoff
        client._backoff = self  # type: ignore[assignment]

    async def wait(self, attempt: int) -> bool:
        self._waits += 1
        if self._waits >= self._expected:
            self.failed.set()
        return await self._backoff.wait(attempt)


async def test_reads_and_cancels_are_retried_until_the_server_is_back(tmp_path: Path) -> None:
    async with serving(tmp_path) as server, BehestClient(server.address) as client:
        run = await client.create_run(APPROVE_ONCE, WAITS)
        address = server.address
    retrying = BehestClient(address, reconnect_attempts=200, reconnect_backoff_s=0.05)
    outage = Outage(retrying, waits_expected=2)
    async with retrying:
        calls = asyncio.gather(retrying.get_run(run.run_id), retrying.cancel(run.run_id))
        await outage.failed.wait()  # both were refused while no server listened
        async with serving(tmp_path, listen=address):
            got, cancelled = await calls
            again = await retrying.cancel(run.run_id)  # a repeat tells the same truth
    assert got.id == run.run_id
    assert cancelled == again == RunStatus.CANCELLED
