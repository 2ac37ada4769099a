"""The `behest` commands of runs: `run` (start one and stream it), `watch` (follow one) and
`runs list | get | output | cancel`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

from behest.cli import inputs, questions, waits
from behest.cli.formats import (
    EXIT_OK,
    EXIT_RUN_NOT_COMPLETED,
    STATUSES,
    format_output,
    format_run,
    format_runs,
    status_name,
)
from behest.cli.render import EventPrinter
from behest.client import BehestClient, Event, Output, Run, RunStatus

ClientFactory = Callable[[argparse.Namespace], BehestClient]


def add_commands(commands: Any, server: argparse.ArgumentParser, client: ClientFactory) -> Any:
    """`behest run`, `behest watch` and `behest runs …`; the `runs` actions, for more."""
    run = commands.add_parser("run", parents=[server], help="start a run and stream it")
    run.add_argument("input", help="the user's message")
    run.add_argument("--session", default="", help="continue this session")
    run.add_argument(
        "--on-busy",
        default="reject",
        choices=["reject", "enqueue", "interrupt", "rollback", "steer"],
        help="with --session, when its run is still going: refuse (default), start after it, "
        "cancel it, cancel it and take its messages out of the session, or add the message "
        "to it",
    )
    run.add_argument(
        "--agent",
        default="",
        metavar="REF",
        help="run a stored agent: NAME, NAME@VERSION or NAME@ALIAS (the options given here "
        "override its definition's)",
    )
    run.add_argument("--provider", default="", help="default: the agent's, else local")
    run.add_argument("--model", default="", help="default: the agent's, else echo")
    run.add_argument("--metadata", default="", help="a JSON object stored with the run")
    run.add_argument("--tool-choice", default="", help="auto, none or required")
    waits.add_run_options(run)
    inputs.add_run_options(run)
    run.set_defaults(func=lambda args, printer: _run(args, printer, client))

    watch = commands.add_parser("watch", parents=[server], help="follow a run's events")
    watch.add_argument("run_id")
    watch.add_argument("--after", type=int, default=0, help="last sequence already seen")
    watch.set_defaults(func=lambda args, printer: _watch(args, printer, client))

    runs = commands.add_parser("runs", help="list, inspect, cancel and prune runs")
    actions = runs.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[server], help="list runs, newest first")
    listing.add_argument("--session", default="")
    listing.add_argument("--status", choices=STATUSES, help="only runs in this status")
    listing.add_argument(
        "--agent", default="", metavar="NAME[@VERSION]", help="only runs of this agent"
    )
    listing.add_argument("--limit", type=int, default=20)
    listing.set_defaults(func=lambda args, printer: _runs_list(args, client))
    for name, func, text in [
        ("get", _runs_get, "show one run"),
        ("output", _runs_output, "show what a finished run produced"),
        ("cancel", _runs_cancel, "cancel an active run"),
    ]:
        action = actions.add_parser(name, parents=[server], help=text)
        action.add_argument("run_id")
        action.set_defaults(func=lambda args, printer, _func=func: _func(args, client))
    return actions


def _run(args: argparse.Namespace, printer: EventPrinter, client: ClientFactory) -> int:
    options = inputs.run_options(args, waits.wait_options(args))
    # In a terminal approvals and questions are asked; otherwise shown with how to answer them.
    interactive = waits.is_terminal(sys.stdin)
    printer.approval_hints = not interactive
    approve = waits.terminal_approver(sys.stdin, sys.stderr) if interactive else None
    reply = questions.terminal_questioner(sys.stdin, sys.stderr) if interactive else None

    async def go() -> int:
        async with client(args) as behest:
            events = behest.stream_run(args.input, options, approve=approve, answer_question=reply)
            return await _render_all(events, printer)

    return asyncio.run(go())


def _watch(args: argparse.Namespace, printer: EventPrinter, client: ClientFactory) -> int:
    async def go() -> int:
        async with client(args) as behest:
            code = await _render_all(behest.watch(args.run_id, args.after), printer)
            if printer.exit_code is None:
                # The run had ended before the cursor: nothing was left to show but its status.
                status = (await behest.get_run(args.run_id)).status
                print(f"run {args.run_id} {status_name(status)}", file=printer.err)
                return EXIT_OK if status == RunStatus.COMPLETED else EXIT_RUN_NOT_COMPLETED
            return code

    return asyncio.run(go())


async def _render_all(events: AsyncIterator[Event], printer: EventPrinter) -> int:
    async for event in events:
        printer.render(event)
    # The client only ends a stream at the terminal event; without one, nothing is known.
    return EXIT_RUN_NOT_COMPLETED if printer.exit_code is None else printer.exit_code


def _runs_list(args: argparse.Namespace, client: ClientFactory) -> int:
    status = RunStatus[args.status.upper()] if args.status else RunStatus.UNSPECIFIED
    agent, _, version = args.agent.partition("@")
    if version and not version.isdigit():
        raise waits.UsageError(f"--agent: NAME or NAME@VERSION (a number), not {args.agent!r}")

    async def go() -> list[Run]:
        async with client(args) as behest:
            return await behest.list_runs(
                session_id=args.session,
                status=status,
                agent=agent,
                agent_version=int(version or 0),
                limit=args.limit,
            )

    found = asyncio.run(go())
    print(format_runs(found) if found else "no runs")
    return EXIT_OK


def _runs_get(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> Run:
        async with client(args) as behest:
            return await behest.get_run(args.run_id)

    print(format_run(asyncio.run(go())))
    return EXIT_OK


def _runs_output(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> Output:
        async with client(args) as behest:
            return await behest.get_output(args.run_id)

    print(format_output(asyncio.run(go())))
    return EXIT_OK


def _runs_cancel(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> None:
        async with client(args) as behest:
            await behest.cancel(args.run_id)

    asyncio.run(go())
    print(f"cancelled run {args.run_id}")
    return EXIT_OK
