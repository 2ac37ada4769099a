"""The `behest` command: serve, run and watch agent runs, list and inspect them, answer the
calls they wait for (cli_waits.py); sessions, a run's stored events, pruning, tools and
providers (cli_catalog.py); make tokens.

Exit codes: 0 the run completed (or the command succeeded), 1 the run failed or was
cancelled, 2 an RPC or usage error, 130 interrupted (the run itself goes on in the server).

The client commands take `--token` (default $BEHEST_TOKEN), sent as `authorization: Bearer`,
and `--tls-ca`, `--tls-cert`, `--tls-key` for TLS and mTLS. A token is never printed, not even
in an error message; only `behest token new` prints the one it makes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import hashlib
import os
import re
import secrets
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any, NoReturn

import grpc.aio

from behest import cli_catalog, cli_inputs, cli_waits
from behest._proto.agent.v1 import common_pb2, run_pb2
from behest.client import BehestClient
from behest.config import DEFAULT_LISTEN, Settings, is_loopback
from behest.render import (
    EXIT_OK,
    EXIT_RUN_NOT_COMPLETED,
    STATUSES,
    EventPrinter,
    format_output,
    format_run,
    format_runs,
    status_name,
)

# Exit codes of the `behest` command.
# EXIT_OK (0): the command did what it says; for `run`/`watch`: the run completed.
# EXIT_RUN_NOT_COMPLETED (1): the run failed or was cancelled. Both in render.py.
EXIT_ERROR = 2  # an RPC or usage error
EXIT_INTERRUPTED = 130  # Ctrl-C: the client stops; the run itself goes on in the server


class ClientSetupError(Exception):
    """The client options cannot make a client: an unreadable file, a token gRPC cannot send."""


# Values on the command line that argparse's error messages must not show (tokens).
_HIDDEN: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("hidden", default=())


class _Parser(argparse.ArgumentParser):
    """An argument parser whose error messages never show a token given on the command line."""

    def error(self, message: str) -> NoReturn:
        for value in _HIDDEN.get():
            message = message.replace(value, "<token>")
        super().error(message)


def _token_arguments(argv: Sequence[str]) -> tuple[str, ...]:
    """The values given to --token (or an abbreviation of it) in `argv`."""
    values = []
    for i, arg in enumerate(argv):
        name, equals, value = arg.partition("=")
        if len(name) > 2 and "--token".startswith(name):
            if equals:
                values.append(value)
            elif i + 1 < len(argv):
                values.append(argv[i + 1])
    return tuple(v for v in values if v)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(prog="behest", description="Durable LLM agent runs.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gRPC server")
    serve.add_argument("--listen", help=f"HOST:PORT (default {DEFAULT_LISTEN})")
    serve.add_argument("--data-dir", help="where the SQLite database lives")
    serve.add_argument("--config", help="a TOML settings file (default $BEHEST_CONFIG)")
    serve.add_argument(
        "--http-listen", help="HOST:PORT of the run inspector in the browser (default: off)"
    )
    serve.set_defaults(func=_serve)

    server = _connection_options()

    run = commands.add_parser("run", parents=[server], help="start a run and stream it")
    run.add_argument("input", help="the user's message")
    run.add_argument("--session", default="", help="continue this session")
    run.add_argument("--provider", default="local")
    run.add_argument("--model", default="echo")
    run.add_argument("--metadata", default="", help="a JSON object stored with the run")
    run.add_argument("--tool-choice", default="", help="auto, none or required")
    cli_waits.add_run_options(run)
    cli_inputs.add_run_options(run)
    run.set_defaults(func=_run)

    watch = commands.add_parser("watch", parents=[server], help="follow a run's events")
    watch.add_argument("run_id")
    watch.add_argument("--after", type=int, default=0, help="last sequence already seen")
    watch.set_defaults(func=_watch)

    runs = commands.add_parser("runs", help="list, inspect, cancel and prune runs")
    actions = runs.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[server], help="list runs, newest first")
    listing.add_argument("--session", default="")
    listing.add_argument("--status", choices=STATUSES, help="only runs in this status")
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
    cli_catalog.add_run_actions(actions, server, _client)

    cli_waits.add_commands(commands, server, _client)
    cli_catalog.add_commands(commands, server, _client)
    _token_commands(commands)
    return parser


def _connection_options() -> _Parser:
    """--server, --token and the TLS options every client command takes."""
    server = _Parser(add_help=False)
    server.add_argument(
        "--server",
        default=os.environ.get("BEHEST_SERVER", DEFAULT_LISTEN),
        help="server address (default $BEHEST_SERVER or %(default)s)",
    )
    server.add_argument(
        "--token",
        default=os.environ.get("BEHEST_TOKEN", ""),
        help="bearer token, sent as 'authorization: Bearer <token>' (default $BEHEST_TOKEN; "
        "prefer it: command lines show in `ps`)",
    )
    server.add_argument(
        "--tls-ca",
        metavar="FILE",
        default=os.environ.get("BEHEST_TLS_CA", ""),
        help="PEM root certificates of the server's certificate; given, the client speaks TLS "
        "(default $BEHEST_TLS_CA)",
    )
    server.add_argument(
        "--tls-cert",
        metavar="FILE",
        default=os.environ.get("BEHEST_TLS_CERT", ""),
        help="PEM client certificate for mTLS, with --tls-key (default $BEHEST_TLS_CERT)",
    )
    server.add_argument(
        "--tls-key",
        metavar="FILE",
        default=os.environ.get("BEHEST_TLS_KEY", ""),
        help="PEM key of the client certificate (default $BEHEST_TLS_KEY)",
    )
    return server


def _token_commands(commands: Any) -> None:
    token = commands.add_parser("token", help="make bearer tokens for the settings file")
    token_actions = token.add_subparsers(dest="action", required=True)
    new = token_actions.add_parser(
        "new",
        help="print a new random token, once, and the [auth.tokens.*] table with its SHA-256",
    )
    new.add_argument("--tenant", required=True, help="the tenant the token's caller acts in")
    new.add_argument("--principal", required=True, help="who the token's caller is")
    new.set_defaults(func=_token_new)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `behest` command; returns the exit code."""
    for stream in (sys.stdout, sys.stderr):
        # A non-UTF-8 terminal must not crash a run's rendering on ✓ or a model's emoji.
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
    argv = sys.argv[1:] if argv is None else list(argv)
    hidden = _HIDDEN.set(_token_arguments(argv))
    try:
        args = build_parser().parse_args(argv)
    finally:
        _HIDDEN.reset(hidden)
    printer = EventPrinter(sys.stdout, sys.stderr)
    try:
        code: int = args.func(args, printer)
        return code
    except grpc.aio.AioRpcError as exc:
        print(f"error: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return EXIT_ERROR
    except (ConnectionError, ClientSetupError, cli_waits.UsageError) as exc:
        # A stream that broke for good; an unreadable TLS file, a token gRPC cannot send (the
        # client's messages never contain the token); an option's value that cannot be used.
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
            config_file=args.config,
            listen=args.listen,
            data_dir=args.data_dir,
            http_listen=args.http_listen,
        )
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    from behest.app import serve  # lazily: the client commands must not need the server

    refused = serve(settings)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def _token_new(args: argparse.Namespace, printer: EventPrinter) -> int:
    principal, tenant = args.principal.strip(), args.tenant.strip()
    if not principal or not tenant:
        print("error: --principal and --tenant must not be empty", file=sys.stderr)
        return EXIT_ERROR
    token = secrets.token_urlsafe(32)
    while token.startswith("-"):  # so `--token TOKEN` never reads it as an option
        token = secrets.token_urlsafe(32)
    print(new_token_text(token, principal=principal, tenant=tenant), end="")
    return EXIT_OK


def new_token_text(token: str, *, principal: str, tenant: str) -> str:
    """What `behest token new` prints: the token, then the settings table with its SHA-256."""
    digest = hashlib.sha256(token.encode()).hexdigest()
    return (
        f"{token}\n"
        "\n"
        "This token is shown once and stored nowhere: give it to its caller (they send it as\n"
        "'authorization: Bearer <token>', e.g. with --token or $BEHEST_TOKEN). Only its SHA-256\n"
        'goes in the server\'s settings file, in this table (with [auth] mode = "bearer"):\n'
        "\n"
        f"[auth.tokens.{_toml_key(principal)}]\n"
        f"sha256 = {_toml_string(digest)}\n"
        f"principal = {_toml_string(principal)}\n"
        f"tenant = {_toml_string(tenant)}\n"
    )


def _toml_key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else _toml_string(name)


def _toml_string(value: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    escaped = []
    for char in value:
        if char in '"\\':
            escaped.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def _client(args: argparse.Namespace) -> BehestClient:
    """A client of `--server`, with the token and TLS files the arguments give."""
    try:
        client = BehestClient(
            args.server,
            token=args.token,
            tls_ca=args.tls_ca or None,
            tls_cert=args.tls_cert or None,
            tls_key=args.tls_key or None,
        )
    except (OSError, ValueError) as exc:
        raise ClientSetupError(str(exc)) from None
    if client.call_metadata and not client.uses_tls and not _is_loopback(args.server):
        print(
            f"warning: the token goes to {args.server} without TLS, readable on the way "
            "(give --tls-ca)",
            file=sys.stderr,
        )
    return client


def _is_loopback(address: str) -> bool:
    """Whether a gRPC target (host:port, [v6]:port, dns:///…, unix:…) is this machine."""
    if address.startswith(("unix:", "unix-abstract:")):
        return True
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        address = address.removeprefix(scheme)
    host = address.rpartition(":")[0] if address.count(":") == 1 or "]" in address else address
    return is_loopback(host)


def _run(args: argparse.Namespace, printer: EventPrinter) -> int:
    options = cli_inputs.run_options(args, cli_waits.wait_options(args))
    # In a terminal approvals are asked for; otherwise shown with how to answer them.
    interactive = cli_waits.is_terminal(sys.stdin)
    printer.approval_hints = not interactive
    approve = cli_waits.terminal_approver(sys.stdin, sys.stderr) if interactive else None

    async def go() -> int:
        async with _client(args) as client:
            events = client.stream_run(
                args.input,
                session_id=args.session,
                provider=args.provider,
                model=args.model,
                metadata=args.metadata,
                tool_choice=args.tool_choice,
                approve=approve,
                **options,
            )
            return await _render_all(events, printer)

    return asyncio.run(go())


def _watch(args: argparse.Namespace, printer: EventPrinter) -> int:
    async def go() -> int:
        async with _client(args) as client:
            code = await _render_all(client.watch(args.run_id, args.after), printer)
            if printer.exit_code is None:
                # The run had ended before the cursor: nothing was left to show but its status.
                status = (await client.get_run(args.run_id)).status
                print(f"run {args.run_id} {status_name(status)}", file=printer.err)
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
        async with _client(args) as client:
            return await client.list_runs(session_id=args.session, status=status, limit=args.limit)

    runs = asyncio.run(go())
    print(format_runs(runs) if runs else "no runs")
    return EXIT_OK


def _runs_get(args: argparse.Namespace, printer: EventPrinter) -> int:
    async def go() -> run_pb2.RunRecord:
        async with _client(args) as client:
            return await client.get_run(args.run_id)

    print(format_run(asyncio.run(go())))
    return EXIT_OK


def _runs_output(args: argparse.Namespace, printer: EventPrinter) -> int:
    async def go() -> run_pb2.RunOutput:
        async with _client(args) as client:
            return await client.get_output(args.run_id)

    print(format_output(asyncio.run(go())))
    return EXIT_OK


def _runs_cancel(args: argparse.Namespace, printer: EventPrinter) -> int:
    async def go() -> None:
        async with _client(args) as client:
            await client.cancel(args.run_id)

    asyncio.run(go())
    print(f"cancelled run {args.run_id}")
    return EXIT_OK
