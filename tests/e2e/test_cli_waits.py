"""The `behest` command and runs that wait: `run` asking at a terminal or printing how to answer,
`approve`, `answer` and `pending` against a real server, and how the events are shown.

The commands run as child processes (`python -m behest`) against the test's server; `behest
run` gets a pipe as stdin (not a terminal: it must not read it) or a pseudo-terminal.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import pty
import re
import sys
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest.cli.formats import format_pending, format_run
from behest.cli.render import EventPrinter
from behest.cli.waits import DENIED_AT_THE_TERMINAL, PROMPT, ask
from behest.client import BehestClient, Decision, RunOptions, TextDelta, WaitingCall
from behest.client._wire import event_of, pending_of, run_of
from tests.support import Cli, Server, behest, cli_environment, collect, script

TIMEOUT_S = 30.0
CALCULATOR = {"name": "calculator", "arguments": {"expression": "2+2"}}
APPROVE_ONCE = script({"tool_calls": [CALCULATOR]}, {"say": "tool_results"})
LOOKUP_TOOL = json.dumps(
    {
        "name": "lookup",
        "description": "look a word up",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    }
)
TWO_LOOKUPS = script(
    {
        "tool_calls": [
            {"name": "lookup", "arguments": {"word": "behest"}},
            {"name": "lookup", "arguments": {"word": "xyzzy"}},
        ]
    },
    {"say": "tool_results"},
)
# `behest approve RUN_ID CALL_ID …` and `behest answer RUN_ID CALL_ID …` in the hints.
HINT = re.compile(r"behest (approve|answer) (\S+) (\S+)")


async def start_run(server: Server, *args: str, stdin: Any) -> asyncio.subprocess.Process:
    """`behest run ARGS` against the server, left running."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "behest",
        "run",
        "--server",
        server.address,
        "--model",
        "script",
        *args,
        stdin=stdin,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=cli_environment(),
    )


async def hints(process: asyncio.subprocess.Process, count: int) -> list[tuple[str, str, str]]:
    """Read the running command's stderr until `count` hints; (command, run id, call id) each."""
    assert process.stderr is not None
    found: list[tuple[str, str, str]] = []
    async with asyncio.timeout(TIMEOUT_S):
        while len(found) < count:
            line = (await process.stderr.readline()).decode()
            assert line, "the command ended before it said how to answer"
            match = HINT.search(line)
            if match:
                found.append((match[1], match[2], match[3]))
    return found


async def ended(process: asyncio.subprocess.Process) -> Cli:
    out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    assert process.returncode is not None
    return Cli(process.returncode, out.decode(), err.decode())


async def waiting_run(client: BehestClient, input: str, **options: Any) -> str:
    """Create a run and follow it until it waits; its id."""
    run_id = (await client.create_run(input, RunOptions(model="script", **options))).run_id
    async for event in client.watch(run_id):
        if event.kind in ("approval_requested", "client_tool_requested"):
            break
    return run_id


# --- `behest run` -------------------------------------------------------------------------------


async def test_run_without_a_terminal_prints_how_to_approve_and_goes_on_once_approved(
    server: Server,
) -> None:
    # stdin is a pipe nobody writes to: a command that read it would never end.
    run = await start_run(
        server, "--approve-tool", "calculator", APPROVE_ONCE, stdin=asyncio.subprocess.PIPE
    )
    [(command, run_id, call_id)] = await hints(run, 1)
    assert (command, call_id) == ("approve", "call_1_1")

    pending = await behest("pending", run_id, "--server", server.address)
    assert pending.code == 0, pending.err
    assert re.search(r"call_1_1\s+approval\s+calculator\s+\S+ \S+\s+\{\"expression\"", pending.out)

    approved = await behest("approve", run_id, call_id, "--server", server.address)
    assert approved.code == 0, approved.err
    assert approved.out == f"allowed: call call_1_1 of run {run_id}\nthe run goes on\n"

    done = await ended(run)
    assert done.code == 0, done.err
    assert '? calculator({"expression": "2+2"}) waits for approval (call call_1_1, until ' in (
        done.out
    )
    assert "✓ calculator allowed by anonymous\n" in done.out
    assert done.out.endswith("calculator: 4\n✓ completed (stop, 2 iterations)\n")
    assert PROMPT not in done.err


async def test_run_with_a_client_tool_prints_how_to_answer_and_answer_sends_the_results(
    server: Server,
) -> None:
    run = await start_run(
        server, "--client-tool", LOOKUP_TOOL, TWO_LOOKUPS, stdin=asyncio.subprocess.PIPE
    )
    found = await hints(run, 2)
    assert [(command, call) for command, _, call in found] == [
        ("answer", "call_1_1"),
        ("answer", "call_1_2"),
    ]
    run_id = found[0][1]

    pending = await behest("pending", run_id, "--server", server.address)
    assert pending.code == 0, pending.err
    lines = pending.out.splitlines()
    assert lines[0].split() == ["CALL", "WAITS", "FOR", "TOOL", "EXPIRES", "ARGUMENTS"]
    assert [line.split()[:4] for line in lines[1:]] == [
        ["call_1_1", "client", "result", "lookup"],
        ["call_1_2", "client", "result", "lookup"],
    ]

    first = await behest(
        "answer", run_id, "call_1_1", "--output", "a word", "--server", server.address
    )
    assert first.code == 0, first.err
    assert (
        first.out == f"answered: call call_1_1 of run {run_id}\nthe run still waits for: call_1_2\n"
    )
    second = await behest(
        "answer", run_id, "call_1_2", "--output", "not found", "--error", "--server", server.address
    )
    assert second.code == 0, second.err
    assert second.out.startswith("answered (as an error): call call_1_2")

    done = await ended(run)
    assert done.code == 0, done.err
    assert "← lookup answered by anonymous\n← lookup answered with an error by anonymous\n" in (
        done.out
    )
    assert done.out.endswith(
        "lookup: a word\nlookup: error: not found\n✓ completed (stop, 2 iterations)\n"
    )


async def test_run_in_a_terminal_asks_for_each_approval_and_sends_the_answer(
    server: Server,
) -> None:
    twice = script(
        {"tool_calls": [CALCULATOR]},
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "3*3"}}]},
        {"say": "tool_results"},
    )
    terminal, child_side = pty.openpty()
    try:
        run = await start_run(server, "--approve-tool", "calculator", twice, stdin=child_side)
        os.close(child_side)
        await prompted(run)
        os.write(terminal, b"\n")  # an empty answer denies
        await prompted(run)
        os.write(terminal, b"y\n")
        done = await ended(run)
    finally:
        os.close(terminal)
    assert done.code == 0, done.err
    assert f"✗ calculator denied by anonymous: {DENIED_AT_THE_TERMINAL}\n" in done.out
    assert "✓ calculator allowed by anonymous\n" in done.out
    assert done.out.endswith("calculator: 9\n✓ completed (stop, 3 iterations)\n")
    assert "behest approve" not in done.err  # it asked instead


async def prompted(process: asyncio.subprocess.Process) -> None:
    """Read the running command's stderr until it asks (the question ends no line)."""
    assert process.stderr is not None
    said = b""
    async with asyncio.timeout(TIMEOUT_S):
        while not said.endswith(PROMPT.encode()):
            chunk = await process.stderr.read(1)
            assert chunk, f"the command ended without asking: {said.decode()}"
            said += chunk


async def test_run_with_an_unusable_client_tool_says_why_and_exits_2(server: Server) -> None:
    bad = await behest("run", "--server", server.address, "--client-tool", "{oops", "hello")
    assert bad.code == 2
    assert bad.err.startswith("error: --client-tool: the JSON text is not valid (")
    clash = await behest("run", "--server", server.address, "--client-tool", "calculator", "hello")
    assert clash.code == 2
    assert clash.err.startswith("error: INVALID_ARGUMENT: client_tools: 'calculator'")
    assert "Traceback" not in bad.err + clash.err


# --- `behest approve` and `behest pending` ------------------------------------------------------


async def test_approve_allows_always_refuses_another_answer_and_names_unknown_calls(
    server: Server,
) -> None:
    address = ["--server", server.address]
    # The lookup keeps the run waiting while its approval is answered again and again.
    both = script(
        {"tool_calls": [CALCULATOR, {"name": "lookup", "arguments": {}}]}, {"say": "tool_results"}
    )
    options: dict[str, Any] = {"approval_required_tools": ["calculator"]}
    async with BehestClient(server.address) as client:
        run_id = await waiting_run(
            client, both, client_tools={"lookup": ("look a word up", {})}, **options
        )
        unknown = await behest("approve", run_id, "call_9_9", *address)
        assert unknown.code == 2
        assert unknown.err == (
            f"error: NOT_FOUND: run {run_id} has no approval request 'call_9_9'\n"
        )
        always = await behest("approve", run_id, "call_1_1", "--always", *address)
        assert always.code == 0, always.err
        assert always.out == (
            f"allowed for the session: call call_1_1 of run {run_id}\n"
            "the run still waits for: call_1_2\n"
        )
        otherwise = await behest("approve", run_id, "call_1_1", "--deny", "too late", *address)
        assert otherwise.code == 2
        assert otherwise.err.startswith("error: FAILED_PRECONDITION: call 'call_1_1' was already")
        again = await behest("approve", run_id, "call_1_1", "--always", *address)
        assert again.code == 0, again.err

        await client.submit_tool_results(run_id, {"call_1_2": "fine"})
        events = await collect(client.watch(run_id))
        assert events[-1].kind == "run_completed"
        # Allowed always: the session's next calls of calculator do not wait.
        session = (await client.get_run(run_id)).session_id
        later = await collect(
            client.stream_run(
                APPROVE_ONCE, RunOptions(model="script", session_id=session, **options)
            )
        )
        assert later[-1].kind == "run_completed"
        assert "approval_requested" not in [e.kind for e in later]

        none = await behest("pending", run_id, *address)
        assert none.code == 0, none.err
        assert none.out == f"run {run_id} waits for no call\n"


async def test_approve_with_deny_tells_the_model_why(server: Server) -> None:
    async with BehestClient(server.address) as client:
        run_id = await waiting_run(client, APPROVE_ONCE, approval_required_tools=["calculator"])
        denied = await behest(
            "approve", run_id, "call_1_1", "--deny", "too risky", "--server", server.address
        )
        assert denied.code == 0, denied.err
        assert denied.out == f"denied: call call_1_1 of run {run_id}\nthe run goes on\n"
        events = await collect(client.watch(run_id))
    [resolved] = [e.data for e in events if e.kind == "approval_resolved"]
    assert (resolved.decision, resolved.reason) == (Decision.DENY, "too risky")
    said = "".join(e.data.delta for e in events if isinstance(e.data, TextDelta))
    assert said.startswith("calculator: error: ") and "too risky" in said


async def test_approve_takes_deny_or_always_not_both(server: Server) -> None:
    both = await behest(
        "approve", "RUN", "CALL", "--deny", "no", "--always", "--server", server.address
    )
    assert both.code == 2
    assert "not allowed with argument" in both.err


# --- the prompt and the rendering, without a server ---------------------------------------------


def call(tool: str = "calculator") -> WaitingCall:
    return WaitingCall("run-1", "call_1_1", tool, {"expression": "2+2"}, '{"expression": "2+2"}')


def test_the_prompt_allows_on_y_always_on_a_and_denies_otherwise() -> None:
    for typed, decision in [
        ("y\n", Decision.ALLOW),
        ("YES\n", Decision.ALLOW),
        ("a\n", Decision.ALLOW_ALWAYS),
        ("always\n", Decision.ALLOW_ALWAYS),
        ("\n", Decision.DENY),
        ("n\n", Decision.DENY),
        ("maybe\n", Decision.DENY),
        ("", Decision.DENY),  # end of input
    ]:
        out = io.StringIO()
        approval = ask(call(), io.StringIO(typed), out)
        assert approval.decision == decision, typed
        assert out.getvalue().startswith(PROMPT)
        if decision == Decision.DENY:
            assert approval.reason == DENIED_AT_THE_TERMINAL


def at(seconds: int) -> Timestamp:
    return Timestamp(seconds=seconds)


def rendered(*payloads: dict[str, Any], approval_hints: bool = True) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    printer = EventPrinter(out, err, approval_hints=approval_hints)
    for i, payload in enumerate(payloads, 1):
        printer.render(event_of(pb.AgentEvent(sequence=i, run_id="run-1", **payload)))
    return out.getvalue(), err.getvalue()


def test_the_printer_shows_waiting_calls_with_how_to_answer_them() -> None:
    tool_call = c.ToolCall(id="call_1_1", name="calculator", arguments='{"expression": "2+2"}')
    lookup = c.ToolCall(id="call_1_2", name="lookup", arguments='{"word": "behest"}')
    requests = (
        {"approval_requested": pb.ApprovalRequestedEvent(call=tool_call, expires_at=at(0))},
        {"client_tool_requested": pb.ClientToolRequestedEvent(call=lookup, expires_at=at(60))},
    )
    out, err = rendered(*requests)
    assert out == (
        '? calculator({"expression": "2+2"}) waits for approval (call call_1_1)\n'
        '? lookup({"word": "behest"}) waits for the client\'s result '
        "(call call_1_2, until 1970-01-01 00:01:00Z)\n"
    )
    assert err == (
        "  to decide: behest approve run-1 call_1_1 [--deny REASON] [--always]\n"
        "  the client runs it and answers: behest answer run-1 call_1_2 --output TEXT [--error]\n"
    )
    # Asking at the terminal instead: no approval hint, still the client tool's.
    _, asked = rendered(*requests, approval_hints=False)
    assert "behest approve" not in asked and "behest answer" in asked


def test_the_printer_shows_how_calls_were_decided_and_answered() -> None:
    def resolved(decision: Any, by: str = "alice", reason: str = "") -> dict[str, Any]:
        event = pb.ApprovalResolvedEvent(
            call_id="c", tool_name="calculator", decision=decision, decided_by=by, reason=reason
        )
        return {"approval_resolved": event}

    def answered(**fields: Any) -> dict[str, Any]:
        return {"client_tool_answered": pb.ClientToolAnsweredEvent(tool_name="lookup", **fields)}

    out, _ = rendered(
        resolved(pb.APPROVAL_DECISION_ALLOW, reason="fine"),
        resolved(pb.APPROVAL_DECISION_ALLOW_ALWAYS),
        resolved(pb.APPROVAL_DECISION_DENY, reason="too risky"),
        resolved(pb.APPROVAL_DECISION_TIMED_OUT, by=""),
        answered(answered_by="bob"),
        answered(answered_by="bob", is_error=True),
        answered(timed_out=True, is_error=True),
    )
    assert out.splitlines() == [
        "✓ calculator allowed by alice",
        "✓ calculator allowed for the rest of the session by alice",
        "✗ calculator denied by alice: too risky",
        "✗ calculator denied: nobody decided in time",
        "← lookup answered by bob",
        "← lookup answered with an error by bob",
        "← lookup timed out: the client sent no result",
    ]


def test_pending_calls_and_a_waiting_run_are_shown_readably() -> None:
    calls = [
        pb.PendingCall(
            call=c.ToolCall(id="call_1_1", name="calculator", arguments='{"expression": "1"}'),
            kind=pb.PENDING_CALL_KIND_APPROVAL,
            expires_at=at(0),
        ),
        pb.PendingCall(
            call=c.ToolCall(id="call_1_2", name="lookup", arguments="{}"),
            kind=pb.PENDING_CALL_KIND_CLIENT_TOOL,
            expires_at=at(3600),
        ),
    ]
    assert format_pending([pending_of(p) for p in calls]).splitlines() == [
        "CALL      WAITS FOR      TOOL        EXPIRES               ARGUMENTS",
        'call_1_1  approval       calculator  -                     {"expression": "1"}',
        "call_1_2  client result  lookup      1970-01-01 01:00:00Z  {}",
    ]
    run = pb.RunRecord(
        id="run-1",
        status=c.RUN_STATUS_WAITING_FOR_INPUT,
        client_tools=[c.ToolSpec(name="lookup")],
        approval_required_tools=["calculator"],
    )
    shown = format_run(run_of(run))
    assert "status       waiting_for_input\n" in shown
    assert "client tools lookup\n" in shown
    assert "approvals    calculator\n" in shown
    assert shown.endswith("the run waits for answers; see them with: behest pending run-1")
