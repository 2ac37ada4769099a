"""The `behest` commands of runs that wait: `approve`, `answer`, `reply` and `pending`, the
waiting options of `behest run`, and its questions at the terminal when a call waits for an
approval or a running tool asks the user something.

`behest run` in a terminal asks `allow? [y/N/a(lways)]` for each approval request, and for a
tool's question a JSON object that fits the question's schema (an empty line declines, end of
input cancels), and sends the answer; with stdin not a terminal it asks nothing and prints how
to answer instead (`behest approve RUN_ID CALL_ID`, `behest reply RUN_ID ELICITATION_ID`), and
goes on streaming. Client tool calls are printed with how to send their result (`behest answer
RUN_ID CALL_ID --output TEXT`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from behest.cli.formats import EXIT_OK, format_pending
from behest.cli.questions import format_questions
from behest.client import (
    Approval,
    BehestClient,
    ClientTool,
    Decision,
    ElicitAction,
    PendingCall,
    Reply,
    WaitingCall,
)

# What a denial at the terminal tells the model.
DENIED_AT_THE_TERMINAL = "denied at the terminal"
PROMPT = "allow? [y/N/a(lways)] "
# The most a timeout field holds (uint32); the server takes less (its max_wait_s).
MAX_SECONDS = 2**32 - 1

ClientFactory = Callable[[argparse.Namespace], BehestClient]


class UsageError(Exception):
    """An option's value cannot be used (the message says which and why)."""


# --- `behest run`: the run's waiting options, and the question at the terminal ----------------


def add_run_options(run: argparse.ArgumentParser) -> None:
    """The options of `behest run` that make calls wait."""
    run.add_argument(
        "--approve-tool",
        metavar="TOOL",
        action="append",
        default=[],
        help="every call of this server tool waits for an approval (repeatable)",
    )
    run.add_argument(
        "--approve-side-effects",
        action="store_true",
        help="every call of a server tool not marked read-only waits for an approval",
    )
    run.add_argument(
        "--client-tool",
        metavar="SPEC",
        action="append",
        default=[],
        help='a tool you run yourself: a name, or {"name": …, "description": …, '
        '"parameters": JSON Schema} (repeatable); answer its calls with `behest answer`',
    )
    run.add_argument(
        "--approval-timeout",
        type=int,
        default=0,
        metavar="SECONDS",
        help="how long an approval request waits before it is denied (default: the server's)",
    )
    run.add_argument(
        "--client-tool-timeout",
        type=int,
        default=0,
        metavar="SECONDS",
        help="how long a client tool call waits for its result (default: the server's)",
    )


def wait_options(args: argparse.Namespace) -> dict[str, Any]:
    """The waiting options of `behest run`'s arguments, RunOptions' fields by name."""
    client_tools = dict(_client_tool(spec) for spec in args.client_tool)
    for name, value in [
        ("--approval-timeout", args.approval_timeout),
        ("--client-tool-timeout", args.client_tool_timeout),
    ]:
        if not 0 <= value <= MAX_SECONDS:
            raise UsageError(f"{name} must be a number of seconds from 0 to {MAX_SECONDS}")
    return {
        "client_tools": client_tools,
        "approval_required_tools": tuple(args.approve_tool),
        "approve_side_effects": args.approve_side_effects,
        "approval_timeout_s": args.approval_timeout,
        "client_tool_timeout_s": args.client_tool_timeout,
    }


def _client_tool(spec: str) -> tuple[str, ClientTool]:
    if not spec.lstrip().startswith("{"):
        return spec.strip(), ClientTool()
    try:
        value = json.loads(spec)
    except ValueError as exc:
        raise UsageError(f"--client-tool: the JSON text is not valid ({exc})") from None
    name = value.get("name") if isinstance(value, dict) else None
    if not isinstance(name, str) or not name:
        raise UsageError('--client-tool: the JSON object needs a "name"')
    parameters = value.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict):
        raise UsageError('--client-tool: "parameters" must be a JSON Schema object')
    return name, ClientTool(str(value.get("description", "")), parameters)


def is_terminal(stream: TextIO) -> bool:
    """Whether `stream` is an interactive terminal (a replaced or closed stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def ask(call: WaitingCall, stdin: TextIO, out: TextIO) -> Approval:
    """Ask at the terminal whether `call` may run: y allows, a allows always, anything else
    (an empty line, end of input) denies."""
    out.write(PROMPT)
    out.flush()
    line = stdin.readline()
    if not line:
        out.write("\n")  # end of input: the prompt's line is ended for what follows
    answer = line.strip().lower()
    if answer in ("y", "yes"):
        return Approval(Decision.ALLOW)
    if answer in ("a", "always"):
        return Approval(Decision.ALLOW_ALWAYS)
    return Approval(Decision.DENY, DENIED_AT_THE_TERMINAL)


def terminal_approver(stdin: TextIO, out: TextIO) -> Callable[[WaitingCall], Approval]:
    """An approver for BehestClient that asks at the terminal (see `ask`)."""
    return lambda call: ask(call, stdin, out)


# --- `behest approve`, `behest answer`, `behest pending` -----------------------------------------


def add_commands(commands: Any, server: argparse.ArgumentParser, client: ClientFactory) -> None:
    """The subcommands that answer and list a run's waiting calls."""
    approve = commands.add_parser(
        "approve", parents=[server], help="allow (or deny) a call that waits for an approval"
    )
    approve.add_argument("run_id")
    approve.add_argument("call_id")
    how = approve.add_mutually_exclusive_group()
    how.add_argument("--deny", metavar="REASON", help="deny the call; the model sees why")
    how.add_argument(
        "--always", action="store_true", help="allow, and later calls of the tool in the session"
    )
    approve.set_defaults(func=lambda args, printer: _approve(args, client))

    answer = commands.add_parser(
        "answer", parents=[server], help="send the result of a client tool call"
    )
    answer.add_argument("run_id")
    answer.add_argument("call_id")
    answer.add_argument("--output", required=True, metavar="TEXT", help="what the model sees")
    answer.add_argument("--error", action="store_true", help="the tool failed; TEXT says how")
    answer.set_defaults(func=lambda args, printer: _answer(args, client))

    reply = commands.add_parser(
        "reply", parents=[server], help="answer a question a running tool asked"
    )
    reply.add_argument("run_id")
    reply.add_argument("elicitation_id")
    how = reply.add_mutually_exclusive_group(required=True)
    how.add_argument(
        "--accept",
        metavar="JSON",
        help="the answer: a JSON object that fits the question's schema (@FILE, or - for stdin)",
    )
    how.add_argument("--decline", action="store_true", help="refuse to answer")
    how.add_argument("--cancel", action="store_true", help="dismiss the question")
    reply.set_defaults(func=lambda args, printer: _reply(args, client))

    pending = commands.add_parser(
        "pending", parents=[server], help="list the calls and questions a run waits for"
    )
    pending.add_argument("run_id")
    pending.set_defaults(func=lambda args, printer: _pending(args, client))


def _approve(args: argparse.Namespace, client: ClientFactory) -> int:
    if args.deny is not None:
        approval, done = Approval(Decision.DENY, args.deny), "denied"
    elif args.always:
        approval, done = Approval(Decision.ALLOW_ALWAYS), "allowed for the session"
    else:
        approval, done = Approval(Decision.ALLOW), "allowed"

    async def go() -> list[str]:
        async with client(args) as behest:
            return await behest.submit_approvals(args.run_id, {args.call_id: approval})

    waiting = asyncio.run(go())
    print(f"{done}: call {args.call_id} of run {args.run_id}")
    _print_waiting(waiting)
    return EXIT_OK


def _answer(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> list[str]:
        async with client(args) as behest:
            result = {args.call_id: (args.output, args.error)}
            return await behest.submit_tool_results(args.run_id, result)

    waiting = asyncio.run(go())
    how = " (as an error)" if args.error else ""
    print(f"answered{how}: call {args.call_id} of run {args.run_id}")
    _print_waiting(waiting)
    return EXIT_OK


def _reply(args: argparse.Namespace, client: ClientFactory) -> int:
    if args.accept is not None:
        reply, done = Reply(ElicitAction.ACCEPT, _accepted(args.accept)), "answered"
    elif args.decline:
        reply, done = Reply(ElicitAction.DECLINE), "declined"
    else:
        reply, done = Reply(ElicitAction.CANCEL), "cancelled"

    async def go() -> list[str]:
        async with client(args) as behest:
            answers = {args.elicitation_id: reply}
            return await behest.submit_elicitation_answers(args.run_id, answers)

    waiting = asyncio.run(go())
    print(f"{done}: question {args.elicitation_id} of run {args.run_id}")
    _print_waiting(waiting)
    return EXIT_OK


def _accepted(value: str) -> dict[str, Any]:
    """--accept's JSON object: the text, @FILE's, or stdin's for -."""
    try:
        if value == "-":
            text = sys.stdin.read()
        elif value.startswith("@"):
            text = Path(value[1:]).read_text()
        else:
            text = value
    except OSError as exc:
        raise UsageError(f"--accept: {exc}") from None
    try:
        content = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--accept: the JSON text is not valid ({exc})") from None
    if not isinstance(content, dict):
        raise UsageError("--accept: the answer must be a JSON object")
    return content


def _pending(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> list[PendingCall]:
        async with client(args) as behest:
            return await behest.pending_calls(args.run_id)

    calls = asyncio.run(go())
    if not calls:
        print(f"run {args.run_id} waits for no call")
        return EXIT_OK
    print(format_pending(calls))
    for question in format_questions(args.run_id, calls):
        print(question)
    return EXIT_OK


def _print_waiting(waiting: list[str]) -> None:
    if waiting:
        print(f"the run still waits for: {', '.join(waiting)}")
    else:
        print("the run goes on")
