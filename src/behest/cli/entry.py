"""The `behest` command's entry: its parser, the client the commands share, and how errors
end it. Its commands: serve.py (`serve`, `token new`), runs.py (`run`, `watch`, `runs …`),
waits.py (`approve`, `answer`, `reply`, `pending`), catalog.py (sessions, tools, providers,
usage, a run's stored events, pruning), agents.py (`agents …`: stored agents and agent files),
worker.py (`worker run`: a module's behest.worker.Worker); render.py, formats.py and
questions.py (a tool's question) write what they show.

Exit codes: 0 the run completed (or the command succeeded), 1 the run failed or was
cancelled, 2 an RPC or usage error, 130 interrupted (the run itself goes on in the server).

The client commands take `--token` (default $BEHEST_TOKEN), sent as `authorization: Bearer`,
and `--tls-ca`, `--tls-cert`, `--tls-key` for TLS and mTLS. A token is never printed, not even
in an error message; only `behest token new` prints the one it makes.
"""

from __future__ import annotations

import argparse
import contextvars
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from behest.cli import agents, catalog, executions, runs, serve, waits, worker
from behest.cli.render import EventPrinter
from behest.client import BehestClient, BehestError
from behest.config import DEFAULT_LISTEN, is_loopback

# Exit codes of the `behest` command.
# EXIT_OK (0): the command did what it says; for `run`/`watch`: the run completed.
# EXIT_RUN_NOT_COMPLETED (1): the run failed or was cancelled. Both in formats.py.
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

    serve.add_commands(commands)
    server = _connection_options()
    actions = runs.add_commands(commands, server, _client)
    catalog.add_run_actions(actions, server, _client)
    waits.add_commands(commands, server, _client)
    executions.add_commands(commands, server, _client)
    catalog.add_commands(commands, server, _client)
    agents.add_commands(commands, server, _client)
    worker.add_commands(commands, _warn_if_plaintext)
    serve.add_token_commands(commands)
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
    except BehestError as exc:
        print(f"error: {exc.code.name}: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    except (ClientSetupError, waits.UsageError) as exc:
        # An unreadable TLS file, a token gRPC cannot send (the client's messages never
        # contain the token); an option's value that cannot be used.
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
    _warn_if_plaintext(args.server, bool(client.call_metadata), client.uses_tls)
    return client


def _warn_if_plaintext(address: str, sends_token: bool, uses_tls: bool) -> None:
    """A warning on stderr when a token would go to another machine without TLS."""
    if sends_token and not uses_tls and not _is_loopback(address):
        print(
            f"warning: the token goes to {address} without TLS, readable on the way "
            "(give --tls-ca)",
            file=sys.stderr,
        )


def _is_loopback(address: str) -> bool:
    """Whether a gRPC target (host:port, [v6]:port, dns:///…, unix:…) is this machine."""
    if address.startswith(("unix:", "unix-abstract:")):
        return True
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        address = address.removeprefix(scheme)
    host = address.rpartition(":")[0] if address.count(":") == 1 or "]" in address else address
    return is_loopback(host)
