"""The `behest` commands that need no server connection: `serve` (the gRPC server) and
`token new` (a bearer token and its settings table)."""

from __future__ import annotations

import argparse
import hashlib
import re
import secrets
import sys
from typing import Any

from behest.cli.formats import EXIT_OK
from behest.cli.render import EventPrinter
from behest.config import DEFAULT_LISTEN, Settings

EXIT_ERROR = 2


def add_commands(commands: Any) -> None:
    """`behest serve` and `behest token new`."""
    serve = commands.add_parser("serve", help="run the gRPC server")
    serve.add_argument("--listen", help=f"HOST:PORT (default {DEFAULT_LISTEN})")
    serve.add_argument("--data-dir", help="where the SQLite database lives")
    serve.add_argument("--config", help="a TOML settings file (default $BEHEST_CONFIG)")
    serve.add_argument(
        "--http-listen", help="HOST:PORT of the run inspector in the browser (default: off)"
    )
    serve.set_defaults(func=_serve)


def add_token_commands(commands: Any) -> None:
    """`behest token new`."""
    token = commands.add_parser("token", help="make bearer tokens for the settings file")
    token_actions = token.add_subparsers(dest="action", required=True)
    new = token_actions.add_parser(
        "new",
        help="print a new random token, once, and the [auth.tokens.*] table with its SHA-256",
    )
    new.add_argument("--tenant", required=True, help="the tenant the token's caller acts in")
    new.add_argument("--principal", required=True, help="who the token's caller is")
    new.set_defaults(func=_token_new)


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
