"""`behest executions` and `behest reconcile`: what ran for a run's tool calls, and saying
how an execution whose outcome is unknown ended."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from behest.cli.formats import EXIT_OK, table, time
from behest.client import BehestClient, Reconciled, ToolExecution, Verdict

ClientFactory = Callable[[argparse.Namespace], BehestClient]


def add_commands(commands: Any, server: argparse.ArgumentParser, client: ClientFactory) -> None:
    listed = commands.add_parser(
        "executions", parents=[server], help="list a run's tool executions, or show one"
    )
    listed.add_argument("run_id", nargs="?", default="", help="the run whose executions to list")
    listed.add_argument("--id", dest="execution_id", default="", help="one execution, in full")
    listed.set_defaults(func=lambda args, printer: _executions(args, client))

    reconcile = commands.add_parser(
        "reconcile",
        parents=[server],
        help="say how an execution whose outcome is unknown ended; its run goes on",
    )
    reconcile.add_argument("execution_id")
    verdict = reconcile.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--ran", metavar="OUTPUT", help="it ran; the model gets OUTPUT")
    verdict.add_argument("--did-not-run", action="store_true", help="it did not run; run it again")
    verdict.add_argument(
        "--give-up", action="store_true", help="nobody can tell; the model gets an error"
    )
    reconcile.add_argument("--error", action="store_true", help="with --ran: OUTPUT is an error")
    reconcile.add_argument("--reason", default="", help="why (kept in the execution's record)")
    reconcile.set_defaults(func=lambda args, printer: _reconcile(args, client))


def _executions(args: argparse.Namespace, client: ClientFactory) -> int:
    if bool(args.run_id) == bool(args.execution_id):
        raise SystemExit("behest executions: give a RUN_ID, or --id EXECUTION_ID")

    async def go() -> str:
        async with client(args) as behest:
            if args.execution_id:
                return format_execution(await behest.get_tool_execution(args.execution_id))
            return format_executions(await behest.list_tool_executions(args.run_id))

    print(asyncio.run(go()))
    return EXIT_OK


def _reconcile(args: argparse.Namespace, client: ClientFactory) -> int:
    if args.ran is not None:
        verdict, output = Verdict.RAN, args.ran
    else:
        verdict, output = (Verdict.DID_NOT_RUN if args.did_not_run else Verdict.GIVE_UP), ""
    if args.error and verdict != Verdict.RAN:
        raise SystemExit("behest reconcile: --error goes with --ran")

    async def go() -> Reconciled:
        async with client(args) as behest:
            return await behest.reconcile(
                args.execution_id, verdict, output=output, is_error=args.error, reason=args.reason
            )

    done = asyncio.run(go())
    print(f"reconciled ({verdict.name.lower()}): execution {args.execution_id}")
    waiting = done.waiting_call_ids
    print(f"the run still waits for: {', '.join(waiting)}" if waiting else "the run goes on")
    return EXIT_OK


def format_executions(executions: Sequence[ToolExecution]) -> str:
    """A table of executions, one line each."""
    rows = [("EXECUTION", "CALL", "TOOL", "ATTEMPT", "STATUS", "STARTED", "BY")]
    rows += [
        (
            e.id,
            e.call_id,
            e.tool_name,
            str(e.attempt),
            e.status.name.lower(),
            time(e.started_at),
            e.executor,
        )
        for e in executions
    ]
    return table(rows)


def format_execution(execution: ToolExecution) -> str:
    """One execution, a field per line, then its transitions."""
    fields = [
        ("execution", execution.id),
        ("run", execution.run_id),
        ("call", f"{execution.call_id} ({execution.tool_name}, {execution.source})"),
        ("attempt", str(execution.attempt)),
        ("status", execution.status.name.lower()),
        ("idempotent", "yes" if execution.idempotent else "no"),
        ("key", execution.idempotency_key),
        ("result", ("error: " if execution.is_error else "") + (execution.result or "-")),
    ]
    if execution.verdict:
        fields.append(("verdict", execution.verdict.name.lower()))
    lines = [f"{name:<10} {value}" for name, value in fields]
    lines.append("")
    for change in execution.transitions:
        why = f": {change.reason}" if change.reason else ""
        lines.append(f"{time(change.at)}  {change.status.name.lower()} by {change.actor}{why}")
    return "\n".join(lines)
