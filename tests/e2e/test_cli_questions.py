"""The `behest` command and the questions running tools ask (elicitation), against a real
server with the echo MCP server (whose `book` tool asks "How many nights in {city}?"):
`behest run` printing how to reply or asking at a terminal, `behest pending` showing the
question, `behest reply` answering it. The commands run as child processes (`python -m
behest`), as in test_cli_waits.py."""

from __future__ import annotations

import asyncio
import io
import json
import os
import pty
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest.cli.formats import format_pending
from behest.cli.questions import QUESTION_PROMPT, ask_question, format_questions
from behest.cli.render import EventPrinter
from behest.client import ElicitAction, Question
from behest.client._wire import event_of, pending_of
from tests.e2e.test_cli_waits import TIMEOUT_S, ended, start_run
from tests.e2e.test_elicitation import BOOK, echo_servers
from tests.support import (
    Cli,
    Server,
    behest,
    cli_environment,
    fast_settings,
    start_server,
    stop_server,
)

# `behest reply RUN_ID ELICITATION_ID …` in the hint.
HINT = re.compile(r"to reply: behest reply (\S+) (\S+) --accept JSON \| --decline \| --cancel")
SCHEMA = {
    "type": "object",
    "properties": {"nights": {"type": "integer", "minimum": 1, "maximum": 30}},
    "required": ["nights"],
}


@pytest.fixture
async def asking(database_url: str, tmp_path: Path) -> AsyncIterator[Server]:
    """A server with the echo MCP server (whose `book` tool asks), on both stores."""
    overrides: dict[str, object] = {"mcp": echo_servers()}
    if database_url:
        overrides["database_url"] = database_url
    running = await start_server(fast_settings(tmp_path, **overrides))
    try:
        yield running
    finally:
        await stop_server(running)


async def hint(process: asyncio.subprocess.Process) -> tuple[str, str, str]:
    """Read the running command's stderr until it says how to reply: (what the answer must
    fit, the run id, the elicitation id)."""
    assert process.stderr is not None
    fits = ""
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            line = (await process.stderr.readline()).decode()
            assert line, "the command ended before it said how to reply"
            if "the answer is a JSON object that fits: " in line:
                fits = line.split("fits: ", 1)[1].strip()
            if match := HINT.search(line):
                return fits, match[1], match[2]


async def behest_reading(stdin: str, *args: str) -> Cli:
    """`python -m behest ARGS` with `stdin` on its standard input."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "behest",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=cli_environment(),
    )
    out, err = await asyncio.wait_for(process.communicate(stdin.encode()), TIMEOUT_S)
    assert process.returncode is not None
    return Cli(process.returncode, out.decode(), err.decode())


async def test_run_prints_how_to_reply_pending_shows_the_question_and_reply_answers_it(
    asking: Server,
) -> None:
    address = ["--server", asking.address]
    run = await start_run(asking, BOOK, stdin=asyncio.subprocess.PIPE)
    fits, run_id, elicitation_id = await hint(run)
    assert json.loads(fits)["required"] == ["nights"]

    pending = await behest("pending", run_id, *address)
    assert pending.code == 0, pending.err
    lines = pending.out.splitlines()
    assert lines[1].split()[:3] == [elicitation_id, "reply", "echo__book"]
    assert lines[3].startswith(f"question {elicitation_id} of echo__book (call call_1_1): ")
    assert lines[3].endswith(": How many nights in Lisbon?")
    assert lines[4] == f"  the answer is a JSON object that fits: {fits}"
    assert lines[5].endswith(
        f"behest reply {run_id} {elicitation_id} --accept JSON | --decline | --cancel"
    )

    wrong = await behest("reply", run_id, elicitation_id, "--accept", '{"nights": 0}', *address)
    assert wrong.code == 2
    assert wrong.error.startswith(
        "error: INVALID_ARGUMENT: answers[0].content does not match the question's schema"
    )
    replied = await behest_reading(
        '{"nights": 2}', "reply", run_id, elicitation_id, "--accept", "-", *address
    )
    assert replied.code == 0, replied.err
    assert replied.out == f"answered: question {elicitation_id} of run {run_id}\nthe run goes on\n"

    done = await ended(run)
    assert done.code == 0, done.err
    assert "? echo__book asks: How many nights in Lisbon? (question " in done.out
    assert "✓ echo__book's question answered by anonymous\n" in done.out
    assert "echo__book: booked 2 night(s) in Lisbon (server pid" in done.out
    assert done.out.endswith("✓ completed (stop, 2 iterations)\n")

    after = await behest("pending", run_id, *address)
    assert after.out == f"run {run_id} waits for no call\n"


async def test_reply_declines_and_takes_its_answer_from_a_file(
    asking: Server, tmp_path: Path
) -> None:
    address = ["--server", asking.address]
    answer = tmp_path / "answer.json"
    answer.write_text('{"nights": 4}')
    for how, expected in [
        (["--decline"], ("declined", "not booked: the user chose decline")),
        (["--cancel"], ("cancelled", "not booked: the user chose cancel")),
        (["--accept", f"@{answer}"], ("answered", "booked 4 night(s) in Lisbon")),
    ]:
        run = await start_run(asking, BOOK, stdin=asyncio.subprocess.PIPE)
        _, run_id, elicitation_id = await hint(run)
        replied = await behest("reply", run_id, elicitation_id, *how, *address)
        assert replied.code == 0, replied.err
        assert replied.out.startswith(f"{expected[0]}: question {elicitation_id} of run {run_id}\n")
        done = await ended(run)
        assert done.code == 0, done.err
        assert f"echo__book: {expected[1]}" in done.out


async def test_run_in_a_terminal_asks_until_the_answer_fits_and_sends_it(
    asking: Server,
) -> None:
    terminal, child_side = pty.openpty()
    try:
        run = await start_run(asking, BOOK, stdin=child_side)
        os.close(child_side)
        await prompted(run)
        os.write(terminal, b'{"nights": "three"}\n')
        said = await prompted(run)
        assert "  does not fit at nights: 'three' is not of type 'integer'\n" in said
        os.write(terminal, b'{"nights": 3, "breakfast": true}\n')
        done = await ended(run)
    finally:
        os.close(terminal)
    assert done.code == 0, done.err
    assert "echo__book: booked 3 night(s) in Lisbon with breakfast" in done.out
    assert "behest reply" not in done.err  # it asked instead


async def prompted(process: asyncio.subprocess.Process) -> str:
    """Read the running command's stderr until it asks for a reply; what it said."""
    assert process.stderr is not None
    said = b""
    async with asyncio.timeout(TIMEOUT_S):
        while not said.endswith(QUESTION_PROMPT.encode()):
            chunk = await process.stderr.read(1)
            assert chunk, f"the command ended without asking: {said.decode()}"
            said += chunk
    return said.decode()


async def test_reply_refuses_an_answer_that_is_not_a_json_object_before_sending_it(
    server: Server,
) -> None:
    address = ["--server", server.address]
    for value, error in [
        ("{oops", "error: --accept: the JSON text is not valid ("),
        ("[2]", "error: --accept: the answer must be a JSON object"),
        ("@/no/such/file.json", "error: --accept: [Errno 2] No such file or directory"),
    ]:
        refused = await behest("reply", "RUN", "Q", "--accept", value, *address)
        assert refused.code == 2
        assert refused.error.startswith(error), refused.err
    neither = await behest("reply", "RUN", "Q", *address)
    assert neither.code == 2
    assert "one of the arguments --accept --decline --cancel is required" in neither.err


# --- the question at the terminal, and how it is shown, without a server ----------------------


def question() -> Question:
    schema_json = json.dumps(SCHEMA)
    return Question("run-1", "call_1_1~1-ab", "call_1_1", "book", "How many?", SCHEMA, schema_json)


def test_the_terminal_question_accepts_a_fitting_object_declines_empty_cancels_at_the_end() -> None:
    for typed, action, content in [
        ('{"nights": 2}\n', ElicitAction.ACCEPT, {"nights": 2}),
        ('[1]\n{"nights": 31}\n{"nights": 30}\n', ElicitAction.ACCEPT, {"nights": 30}),
        ("\n", ElicitAction.DECLINE, None),
        ("not json\n", ElicitAction.CANCEL, None),  # asked again, then the input ends
    ]:
        out = io.StringIO()
        reply = ask_question(question(), io.StringIO(typed), out)
        assert (reply.action, reply.content) == (action, content), typed
        assert out.getvalue().startswith(
            f"  the answer is a JSON object that fits: {json.dumps(SCHEMA)}\n{QUESTION_PROMPT}"
        )
    out = io.StringIO()
    ask_question(question(), io.StringIO('[1]\n{}\n{"nights": 31}\n'), out)
    assert "  the answer must be a JSON object\n" in out.getvalue()
    assert "  does not fit at (root): 'nights' is a required property\n" in out.getvalue()
    assert "  does not fit at nights: 31 is greater than the maximum of 30\n" in out.getvalue()


def test_a_pending_question_and_its_events_are_shown_with_how_to_reply() -> None:
    asked = pb.Elicitation(
        elicitation_id="call_1_1~1-ab",
        call_id="call_1_1",
        tool_name="book",
        message="How many?",
        requested_schema='{"type":"object"}',
    )
    pending = pending_of(
        pb.PendingCall(
            call=c.ToolCall(id="call_1_1~1-ab", name="book"),
            kind=pb.PENDING_CALL_KIND_ELICITATION,
            elicitation=asked,
        )
    )
    assert format_pending([pending]).splitlines()[1].split() == [
        "call_1_1~1-ab",
        "reply",
        "book",
        "-",
    ]
    assert format_questions("run-1", [pending]) == [
        "\nquestion call_1_1~1-ab of book (call call_1_1): How many?\n"
        '  the answer is a JSON object that fits: {"type":"object"}\n'
        "  to reply: behest reply run-1 call_1_1~1-ab --accept JSON | --decline | --cancel"
    ]

    fields = {k: getattr(asked, k) for k in ("elicitation_id", "call_id", "tool_name")}
    events = [
        {
            "elicitation_requested": pb.ElicitationRequestedEvent(
                **fields, message="How many?", requested_schema='{"type":"object"}'
            )
        },
        {
            "elicitation_answered": pb.ElicitationAnsweredEvent(
                **fields, action=pb.ELICITATION_ACTION_DECLINE, answered_by="bob"
            )
        },
    ]
    for hints in (True, False):
        out, err = io.StringIO(), io.StringIO()
        printer = EventPrinter(out, err, approval_hints=hints)
        for i, payload in enumerate(events, 1):
            printer.render(event_of(pb.AgentEvent(sequence=i, run_id="run-1", **payload)))
        assert out.getvalue() == (
            "? book asks: How many? (question call_1_1~1-ab)\n✗ book's question declined by bob\n"
        )
        assert err.getvalue() == (
            '  the answer is a JSON object that fits: {"type":"object"}\n'
            "  to reply: behest reply run-1 call_1_1~1-ab --accept JSON | --decline | --cancel\n"
            if hints
            else ""
        )
