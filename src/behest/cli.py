"""The `behest` command: serve, run and watch agent runs, list and inspect them.

Exit codes: 0 the run completed (or the command succeeded), 1 the run failed or was
cancelled, 2 an RPC or usage error, 130 interrupted (the run itself goes on in the server).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import UTC
from typing import TextIO

import grpc.aio
from google.protobuf.timestamp_pb2 import Timestamp

from behest._proto.agent.v1 import common_pb2, run_pb2
from behest.client import BehestClient
from behest.config import DEFAULT_LISTEN, Settings

# Long tool arguments would drown the answer's text; the full call is in the event log.
MAX_ARGUMENTS_SHOWN = 200

# Exit codes of the `behest` command.
EXIT_OK = 0  # the command did what it says; for `run`/`watch`: the run completed
EXIT_RUN_NOT_COMPLETED = 1  # the run failed or was cancelled
EXIT_ERROR = 2  # an RPC or usage error
EXIT_INTERRUPTED = 130  # Ctrl-C: the client stops; the run itself goes on in the server


class EventPrinter:
    """Renders a run's events for a terminal: text inline, tools and outcome on their lines."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out = out
        self.err = err
        self.run_id = ""
        self.last_sequence = 0
        self.exit_code: int | None = None  # set by the terminal event
        self._iterations: set[int] = set()
        self._at_line_start = True

    def render(self, event: run_pb2.AgentEvent) -> None:
        """Print one event."""
        self.run_id = event.run_id or self.run_id
        self.last_sequence = max(self.last_sequence, event.sequence)
        match event.WhichOneof("event"):
            case "run_started":
                started = event.run_started
                print(f"run {event.run_id}  session {started.session_id}", file=self.err)
                self.err.flush()
            case "model_started":
                iteration = event.model_started.iteration
                if iteration in self._iterations:
                    # The model call is repeated (retry or resume): its partial text is void.
                    self._line("[retrying model call]")
                self._iterations.add(iteration)
            case "text_delta":
                self._write(event.text_delta.delta)
            case "tool_call_completed":
                call = event.tool_call_completed.call
                self._line(f"→ tool {call.name}({_shorten(call.arguments)})")
            case "tool_execution_finished":
                done = event.tool_execution_finished
                self._line(f"← {done.tool_name} finished in {done.duration_ms} ms")
            case "doom_loop_detected":
                self._line(f"! doom loop detected: {event.doom_loop_detected.description}")
            case "compaction_circuit_opened":
                failures = event.compaction_circuit_opened.consecutive_failures
                self._line(f"! compaction circuit opened after {failures} failures")
            case "run_completed":
                completed = event.run_completed
                reason = _reason(completed.finish_reason)
                self._line(f"✓ completed ({reason}, {_plural(completed.iterations, 'iteration')})")
                self.exit_code = EXIT_OK
            case "run_failed":
                self._line(f"✗ failed: {event.run_failed.error}")
                self.exit_code = EXIT_RUN_NOT_COMPLETED
            case "run_cancelled":
                self._line("✗ cancelled")
                self.exit_code = EXIT_RUN_NOT_COMPLETED
            case _:
                # Bookkeeping events, and kinds newer than this CLI: nothing to show.
                pass

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()
            self._at_line_start = text.endswith("\n")

    def _line(self, text: str) -> None:
        self._write(("" if self._at_line_start else "\n") + text + "\n")


def format_runs(runs: Sequence[run_pb2.RunRecord]) -> str:
    """A table of runs, one line each."""
    rows = [("RUN", "STATUS", "MODEL", "CREATED", "SESSION")]
    rows += [
        (
            r.id,
            _status(r.status),
            f"{r.provider.value}/{r.model.value}",
            _time(r.created_at),
            r.session_id,
        )
        for r in runs
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    )


def format_run(run: run_pb2.RunRecord) -> str:
    """One run, a field per line."""
    fields = [
        ("run", run.id),
        ("session", run.session_id),
        ("status", _status(run.status)),
        ("model", f"{run.provider.value}/{run.model.value}"),
        ("metadata", run.metadata or "-"),
        ("created", _time(run.created_at)),
        ("updated", _time(run.updated_at)),
    ]
    return "\n".join(f"{name:<9} {value}" for name, value in fields)


def format_output(output: run_pb2.RunOutput) -> str:
    """A finished run's summary, then the text of the messages it committed."""
    reason = _reason(output.finish_reason)
    usage = output.total_usage
    lines = [
        f"run {output.run_id}  session {output.session_id}",
        f"{reason}, {_plural(output.iterations, 'iteration')}, "
        f"{usage.input_tokens} in + {usage.output_tokens} out tokens",
    ]
    for message in output.messages:
        text = "".join(part.text.text for part in message.content if part.HasField("text"))
        calls = [f"→ tool {c.name}({_shorten(c.arguments)})" for c in message.tool_calls]
        lines += ["", f"[{message.role}]", *([text] if text else []), *calls]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="behest", description="Durable LLM agent runs.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gRPC server")
    serve.add_argument("--listen", help=f"HOST:PORT (default {DEFAULT_LISTEN})")
    serve.add_argument("--data-dir", help="where the SQLite database lives")
    serve.add_argument("--config", help="a TOML settings file (default $BEHEST_CONFIG)")
    serve.set_defaults(func=_serve)

    server = argparse.ArgumentParser(add_help=False)
    server.add_argument(
        "--server",
        default=os.environ.get("BEHEST_SERVER", DEFAULT_LISTEN),
        help="server address (default $BEHEST_SERVER or %(default)s)",
    )

    run = commands.add_parser("run", parents=[server], help="start a run and stream it")
    run.add_argument("input", help="the user's message")
    run.add_argument("--session", default="", help="continue this session")
    run.add_argument("--provider", default="local")
    run.add_argument("--model", default="echo")
    run.add_argument("--metadata", default="", help="a JSON object stored with the run")
    run.add_argument("--tool-choice", default="", help="auto, none or required")
    run.set_defaults(func=_run)

    watch = commands.add_parser("watch", parents=[server], help="follow a run's events")
    watch.add_argument("run_id")
    watch.add_argument("--after", type=int, default=0, help="last sequence already seen")
    watch.set_defaults(func=_watch)

    runs = commands.add_parser("runs", help="list, inspect and cancel runs")
    actions = runs.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[server], help="list runs, newest first")
    listing.add_argument("--session", default="")
    listing.add_argument("--status", choices=_STATUSES, help="only runs in this status")
    listing.add_argument("--limit", type=int, default=20)
    listing.set_defaults(func=_runs_list)
    for name, func, text in [
        ("get", _runs_get, "show one run"),
        ("output", _runs_output, "show what a finished run produced"),
        ("cancel", _runs_cancel, "cancel an active run"),
    ]:
        action = actions.add_parser(name, parents=[server], help=text)
        action.add_argument("run_id")
        action.set_defaults(func=func)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `behest` command; returns the exit code."""
    for stream in (sys.stdout, sys.stderr):
        # A non-UTF-8 terminal must not crash a run's rendering on ✓ or a model's emoji.
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
    args = build_parser().parse_args(argv)
    printer = EventPrinter(sys.stdout, sys.stderr)
    try:
        code: int = args.func(args, printer)
        return code
    except grpc.aio.AioRpcError as exc:
        print(f"error: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return EXIT_ERROR
    except ConnectionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        if printer.run_id:
            print(
                f"\ninterrupted; the run goes on: behest watch {printer.run_id} "
                f"--after {printer.last_sequence}",
                file=sys.stderr,
            )
        return EXIT_INTERRUPTED


def _serve(args: argparse.Namespace, printer: EventPrinter) -> int:
    try:
        settings = Settings.load(
            config_file=args.config, listen=args.listen, data_dir=args.data_dir
        )
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    from behest.app import serve  # lazily: the client commands must not need the server

    serve(settings)
    return EXIT_OK


def _run(args: argparse.Namespace, printer: EventPrinter) -> int:
    async def go() -> int:
        async with BehestClient(args.server) as client:
            events = client.stream_run(
                args.input,
                session_id=args.session,
                provider=args.provider,
                model=args.model,
                metadata=args.metadata,
                tool_choice=args.tool_choice,
            )
            return await _render_all(events, printer)

    return asyncio.run(go())


def _watch(args: argparse.Namespace, printer: EventPrinter) -> int:
    async def go() -> int:
        async with BehestClient(args.server) as client:
            code = await _render_all(client.watch(args.run_id, args.after), printer)
            if printer.exit_code is None:
                # The run had ended before the cursor: nothing was left to show but its status.
                status = (await client.get_run(args.run_id)).status
                print(f"run {args.run_id} {_status(status)}", file=printer.err)
                return (
                    EXIT_OK if status == common_pb2.RUN_STATUS_COMPLETED else EXIT_RUN_NOT_COMPLETED
                )
            return code

    return asyncio.run(go())


async def _render_all(events: AsyncIterator[run_pb2.AgentEvent], printer: EventPrinter) -> int:
    async for event in events:
        printer.render(event)
    # The client only ends a stream at the terminal event; without one, nothing is known.
    return EXIT_RUN_NOT_COMPLETED if printer.exit_code is None else printer.exit_code


def _runs_list(args: argparse.Namespace, printer: EventPrinter) -> int:
    status = (
        common_pb2.RunStatus.Value(f"RUN_STATUS_{args.status.upper()}")
        if args.status
        else common_pb2.RUN_STATUS_UNSPECIFIED
    )

    async def go() -> list[run_pb2.RunRecord]:
        async with BehestClient(args.server) as client:
            return await client.list_runs(session_id=args.session, status=status, limit=args.limit)

    runs = asyncio.run(go())
    print(format_runs(runs) if runs else "no runs")
    return EXIT_OK


def _runs_get(args: argparse.Namespace, printer: EventPrinter) -> int:
    async def go() -> run_pb2.RunRecord:
        async with BehestClient(args.server) as client:
            return await client.get_run(args.run_id)

    print(format_run(asyncio.run(go())))
    return EXIT_OK


def _runs_output(args: argparse.Namespace, printer: EventPrinter) -> int:
    async def go() -> run_pb2.RunOutput:
        async with BehestClient(args.server) as client:
            return await client.get_output(args.run_id)

    print(format_output(asyncio.run(go())))
    return EXIT_OK


def _runs_cancel(args: argparse.Namespace, printer: EventPrinter) -> int:
    async def go() -> None:
        async with BehestClient(args.server) as client:
            await client.cancel(args.run_id)

    asyncio.run(go())
    print(f"cancelled run {args.run_id}")
    return EXIT_OK


_STATUSES = [
    name.removeprefix("RUN_STATUS_").lower()
    for name in common_pb2.RunStatus.keys()
    if name != "RUN_STATUS_UNSPECIFIED"
]


def _status(value: common_pb2.RunStatus.ValueType) -> str:
    try:
        return common_pb2.RunStatus.Name(value).removeprefix("RUN_STATUS_").lower()
    except ValueError:
        return str(value)  # a value newer than this CLI


def _reason(value: common_pb2.FinishReason.ValueType) -> str:
    try:
        return common_pb2.FinishReason.Name(value).removeprefix("FINISH_REASON_").lower()
    except ValueError:
        return str(value)


def _time(ts: Timestamp) -> str:
    if not ts.seconds and not ts.nanos:
        return "-"
    return ts.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _shorten(text: str) -> str:
    if len(text) <= MAX_ARGUMENTS_SHOWN:
        return text
    return text[: MAX_ARGUMENTS_SHOWN - 1] + "…"
