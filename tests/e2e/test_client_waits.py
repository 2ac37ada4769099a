"""The Python client's runs that wait, against a real server: unattended answers, replays
that never ask twice, and answers that get through a dropped connection.

The `script` model calls the server's `calculator` (made to wait for an approval) and
`lookup`, a client tool; its last step says what tool results it was given.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from behest.client import (
    Approval,
    BehestClient,
    ClientTool,
    Decision,
    Event,
    FailedPrecondition,
    NotFound,
    PendingCall,
    PendingCallKind,
    RunOptions,
    RunStatus,
    TextDelta,
    WaitingCall,
)
from tests.support import Server, script, server_process

LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {"word": {"type": "string"}},
    "required": ["word"],
}
CALCULATOR = {"name": "calculator", "arguments": {"expression": "2+2"}}
LOOKUP = {"name": "lookup", "arguments": {"word": "behest"}}
# One model turn calls both (call_1_1 waits for an approval, call_1_2 for the client).
BOTH_AT_ONCE = script({"tool_calls": [CALCULATOR, LOOKUP]}, {"say": "tool_results"})
# One after the other: the run waits twice.
ONE_THEN_THE_OTHER = script(
    {"tool_calls": [CALCULATOR]}, {"tool_calls": [LOOKUP]}, {"say": "tool_results"}
)


class Answers:
    """An approver and a lookup function that record what they were asked."""

    def __init__(self, approval: Approval | None = None) -> None:
        self.approval = approval or Approval(Decision.ALLOW)
        self.approvals: list[WaitingCall] = []
        self.lookups: list[dict[str, Any]] = []

    async def approve(self, call: WaitingCall) -> Approval:
        self.approvals.append(call)
        return self.approval

    async def lookup(self, arguments: dict[str, Any]) -> str:
        self.lookups.append(arguments)
        return f"{arguments['word']}: a word"

    def tool(self) -> ClientTool:
        return ClientTool("look a word up", LOOKUP_SCHEMA, run=self.lookup)


def text_of(events: list[Event]) -> str:
    """The text of the run's last model turn."""
    last = max(i for i, e in enumerate(events) if e.kind == "model_started")
    return "".join(e.data.delta for e in events[last:] if isinstance(e.data, TextDelta))


def assert_complete_once(events: list[Event]) -> None:
    """1..N without gap or repeat, one terminal event, last, and it is run_completed."""
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert [e.terminal for e in events].count(True) == 1
    assert events[-1].kind == "run_completed", events[-1]


def of_kind(events: list[Event], name: str) -> list[Any]:
    return [e.data for e in events if e.kind == name]


# --- unattended -------------------------------------------------------------------------------


async def test_the_helper_finishes_a_run_with_an_approval_and_a_client_tool_unattended(
    server: Server,
) -> None:
    answers = Answers()
    async with BehestClient(server.address) as client:
        events = [
            e
            async for e in client.stream_run(
                BOTH_AT_ONCE,
                RunOptions(
                    model="script",
                    approval_required_tools=["calculator"],
                    client_tools={"lookup": answers.tool()},
                ),
                approve=answers.approve,
            )
        ]
        assert_complete_once(events)
        run_id = events[0].run_id
        assert text_of(events) == "calculator: 4\nlookup: behest: a word"
        [asked] = answers.approvals
        assert (asked.run_id, asked.call_id, asked.tool) == (run_id, "call_1_1", "calculator")
        assert asked.arguments == {"expression": "2+2"}
        assert asked.expires_at is not None
        assert answers.lookups == [{"word": "behest"}]
        [resolved] = of_kind(events, "approval_resolved")
        assert resolved.decision == Decision.ALLOW
        [answered] = of_kind(events, "client_tool_answered")
        assert (answered.tool_name, answered.is_error, answered.timed_out) == (
            "lookup",
            False,
            False,
        )
        assert await client.pending_calls(run_id) == []


async def test_create_run_sends_the_waiting_options(server: Server) -> None:
    async with BehestClient(server.address) as client:
        run_id = (
            await client.create_run(
                BOTH_AT_ONCE,
                RunOptions(
                    model="script",
                    client_tools={"lookup": ("look a word up", LOOKUP_SCHEMA)},
                    approval_required_tools=["calculator"],
                    approve_side_effects=True,
                    approval_timeout_s=120,
                    client_tool_timeout_s=60,
                ),
            )
        ).run_id
        record = await client.get_run(run_id)
        assert [(t.name, t.description) for t in record.client_tools] == [
            ("lookup", "look a word up")
        ]
        assert list(record.approval_required_tools) == ["calculator"]
        assert record.approve_side_effects
        assert (record.approval_timeout_s, record.client_tool_timeout_s) == (120, 60)
        await client.cancel(run_id)


async def test_a_denial_and_a_failing_client_tool_reach_the_model_as_plain_errors(
    server: Server,
) -> None:
    async def broken_lookup(arguments: dict[str, Any]) -> str:
        raise LookupError("no such word in the dictionary")

    answers = Answers(Approval(Decision.DENY, "not today"))
    async with BehestClient(server.address) as client:
        events = [
            e
            async for e in client.stream_run(
                BOTH_AT_ONCE,
                RunOptions(
                    model="script",
                    approval_required_tools=["calculator"],
                    client_tools={
                        "lookup": ClientTool("look a word up", LOOKUP_SCHEMA, broken_lookup)
                    },
                ),
                approve=answers.approve,
            )
        ]
    assert_complete_once(events)
    said = text_of(events)
    assert "calculator: error: " in said and "not today" in said
    assert "lookup: error: lookup failed: no such word in the dictionary" in said
    assert "Traceback" not in said and "LookupError" not in said
    [resolved] = of_kind(events, "approval_resolved")
    assert (resolved.decision, resolved.reason) == (Decision.DENY, "not today")
    assert of_kind(events, "client_tool_answered")[0].is_error


async def test_submitting_answers_by_hand_follows_the_rules_of_the_contract(
    server: Server,
) -> None:
    async with BehestClient(server.address) as client:
        run_id = (
            await client.create_run(
                BOTH_AT_ONCE,
                RunOptions(
                    model="script",
                    client_tools={"lookup": ("look a word up", LOOKUP_SCHEMA)},
                    approval_required_tools=["calculator"],
                ),
            )
        ).run_id
        waiting = await waiting_for(client, run_id, 2)
        assert [(p.call.id, p.kind) for p in waiting] == [
            ("call_1_1", PendingCallKind.APPROVAL),
            ("call_1_2", PendingCallKind.CLIENT_TOOL),
        ]
        assert (await client.get_run(run_id)).status == RunStatus.WAITING_FOR_INPUT

        with pytest.raises(NotFound) as unknown:
            await client.submit_approvals(run_id, {"call_9_9": Decision.ALLOW})
        assert unknown.value.code == grpc.StatusCode.NOT_FOUND
        assert await client.submit_approvals(run_id, {"call_1_1": Decision.ALLOW}) == ["call_1_2"]
        # The same answer again is harmless; another one is refused.
        assert await client.submit_approvals(run_id, {"call_1_1": Decision.ALLOW}) == ["call_1_2"]
        with pytest.raises(FailedPrecondition) as otherwise:
            await client.submit_approvals(run_id, {"call_1_1": Approval(Decision.DENY, "no")})
        assert otherwise.value.code == grpc.StatusCode.FAILED_PRECONDITION

        assert await client.submit_tool_results(run_id, {"call_1_2": ("gone", True)}) == []
        events = [e async for e in client.watch(run_id)]
    assert_complete_once(events)
    assert text_of(events) == "calculator: 4\nlookup: error: gone"


async def waiting_for(client: BehestClient, run_id: str, count: int) -> list[PendingCall]:
    """Follow the run until `count` requests went by; the calls it waits for then."""
    seen = 0
    async with contextlib.aclosing(client.watch(run_id)) as events:
        async for event in events:
            seen += event.kind in ("approval_requested", "client_tool_requested")
            if seen == count:
                break
    return await client.pending_calls(run_id)


# --- replays ------------------------------------------------------------------------------------


async def test_a_fresh_helper_replaying_from_the_start_does_not_ask_again_for_a_decided_call(
    server: Server,
) -> None:
    first = Answers()
    async with BehestClient(server.address) as client:
        # The first helper decides the approval, has no function for lookup, and leaves.
        stream = client.stream_run(
            BOTH_AT_ONCE,
            RunOptions(
                model="script",
                approval_required_tools=["calculator"],
                client_tools={"lookup": ("look a word up", LOOKUP_SCHEMA)},
            ),
            approve=first.approve,
        )
        async with contextlib.aclosing(stream) as first_events:
            async for event in first_events:
                if event.kind == "client_tool_requested":
                    run_id = event.run_id
                    break
        assert [a.call_id for a in first.approvals] == ["call_1_1"]
        assert [p.call.id for p in await client.pending_calls(run_id)] == ["call_1_2"]

    # A new client follows the run from its start: it sees call_1_1's request again, but
    # only the lookup still waits, so that is all it answers.
    second = Answers()
    async with BehestClient(server.address) as client:
        events = [
            e
            async for e in client.watch(
                run_id, approve=second.approve, client_tools={"lookup": second.lookup}
            )
        ]
    assert_complete_once(events)
    assert of_kind(events, "approval_requested")[0].call.id == "call_1_1"
    assert second.approvals == []
    assert second.lookups == [{"word": "behest"}]
    assert text_of(events) == "calculator: 4\nlookup: behest: a word"

    # Once the run has ended, a replay answers nothing at all.
    third = Answers()
    async with BehestClient(server.address) as client:
        again = [
            e
            async for e in client.watch(
                run_id, approve=third.approve, client_tools={"lookup": third.lookup}
            )
        ]
    assert again == events
    assert (third.approvals, third.lookups) == ([], [])


# --- a dropped connection -------------------------------------------------------------------


def free_port() -> int:
    """A port nothing listens on now (the restarted server takes it again)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def serve(data_dir: Path, port: int) -> AsyncIterator[asyncio.subprocess.Process]:
    """`behest serve` on 127.0.0.1:`port` (the same across a restart), once it serves."""
    async with server_process(data_dir, listen=f"127.0.0.1:{port}") as (process, _):
        yield process


async def test_the_helper_finishes_a_run_when_the_server_dies_while_the_run_waits(
    tmp_path: Path,
) -> None:
    port = free_port()
    answers = Answers()
    seen: list[Event] = []
    async with contextlib.AsyncExitStack() as servers:
        process = await servers.enter_async_context(serve(tmp_path, port))
        restarts: list[asyncio.Task[asyncio.subprocess.Process]] = []
        client = BehestClient(
            f"127.0.0.1:{port}",
            reconnect_attempts=30,
            reconnect_backoff_s=0.05,
            reconnect_backoff_max_s=0.5,
        )
        try:
            async with client:
                stream = client.stream_run(
                    ONE_THEN_THE_OTHER,
                    RunOptions(
                        model="script",
                        approval_required_tools=["calculator"],
                        client_tools={"lookup": answers.tool()},
                    ),
                    approve=answers.approve,
                )
                async for event in stream:
                    seen.append(event)
                    if event.kind in ("approval_requested", "client_tool_requested"):
                        # The run waits; the server dies before the helper answers, and a new
                        # one starts on the same data and port meanwhile.
                        if restarts:
                            process = await restarts[-1]
                        process.send_signal(signal.SIGKILL)
                        await process.wait()
                        restart = servers.enter_async_context(serve(tmp_path, port))
                        restarts.append(asyncio.create_task(restart))
                assert len(restarts) == 2, "the run ended before it waited twice"
                assert [e async for e in client.watch(seen[0].run_id)] == seen
        finally:
            await asyncio.gather(*restarts, return_exceptions=True)

    assert_complete_once(seen)
    assert [a.call_id for a in answers.approvals] == ["call_1_1"]
    assert answers.lookups == [{"word": "behest"}]
    assert text_of(seen) == "lookup: behest: a word"
