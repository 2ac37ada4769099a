"""`behest worker run MODULE:ATTRIBUTE`: import a module (the current directory first on the
path, as `python -m` does), take the behest.worker.Worker it names, and run it until SIGTERM
or SIGINT (the tasks in hand finish first; a second signal stops at once).

Where the worker connects: an option given here wins; else what the Worker was built with;
else, for the token and the TLS files, $BEHEST_TOKEN and $BEHEST_TLS_CA/_CERT/_KEY. Logs go
to stderr (`--log-level`); the token is never part of them.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from behest.cli.formats import EXIT_OK
from behest.cli.waits import UsageError
from behest.worker import Worker, WorkerError

# Warns when a token would travel without TLS to another machine: (address, token, TLS).
PlaintextCheck = Callable[[str, bool, bool], None]
EXIT_REFUSED = 2  # the server refused the worker, or no stream could be opened


def add_commands(commands: Any, check: PlaintextCheck) -> None:
    worker = commands.add_parser("worker", help="serve tools to behest's runs from here")
    actions = worker.add_subparsers(dest="worker_command", required=True)
    run = actions.add_parser(
        "run",
        help="run the Worker a module defines (MODULE:ATTRIBUTE) until SIGTERM",
        description="Import MODULE, take its Worker ATTRIBUTE and run it; SIGTERM or SIGINT "
        "finish the tasks in hand, then stop.",
    )
    run.add_argument("target", metavar="MODULE:ATTRIBUTE", help="e.g. tools:worker")
    run.add_argument(
        "--address",
        "--server",
        dest="address",
        default=None,
        help="server address (default: the one the Worker was built with)",
    )
    run.add_argument(
        "--token",
        default=None,
        help="bearer token (default: the Worker's own, else $BEHEST_TOKEN; prefer those: "
        "command lines show in `ps`)",
    )
    for flag, what in (("--tls-ca", "root certificates"), ("--tls-cert", "client certificate"),
                       ("--tls-key", "client certificate's key")):  # fmt: skip
        env = "BEHEST_" + flag.removeprefix("--").replace("-", "_").upper()
        default = f"default: the Worker's, else ${env}"
        run.add_argument(flag, metavar="FILE", default=None, help=f"PEM {what} ({default})")
    run.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="what the worker logs to stderr (default %(default)s)",
    )
    run.set_defaults(func=lambda args, printer: _run(args, check))


def _run(args: argparse.Namespace, check: PlaintextCheck) -> int:
    worker = load(args.target)
    if not worker.tools:
        raise UsageError(f"{args.target} has no tools: declare some with @worker.tool")
    _configure(worker, args)
    check(worker.address, worker.sends_token, worker.uses_tls)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    tools = ", ".join(worker.tools) or "none"
    print(f"worker {worker.name}: serving {tools} to {worker.address}", file=sys.stderr)
    try:
        worker.run()
    except WorkerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return EXIT_OK


def _configure(worker: Worker, args: argparse.Namespace) -> None:
    """The options given, else the Worker's own settings, else the environment's."""
    token = args.token
    if token is None and not worker.sends_token:
        token = os.environ.get("BEHEST_TOKEN") or None
    tls: list[str | None] = [args.tls_ca, args.tls_cert, args.tls_key]
    if all(path is None for path in tls) and not worker.uses_tls:
        tls = [os.environ.get(f"BEHEST_TLS_{n}") or None for n in ("CA", "CERT", "KEY")]
    ca, cert, key = tls
    try:
        worker.configure(address=args.address, token=token, tls_ca=ca, tls_cert=cert, tls_key=key)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def load(target: str) -> Worker:
    """The Worker `MODULE:ATTRIBUTE` names (ATTRIBUTE may be dotted)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"{target!r}: give the worker as MODULE:ATTRIBUTE, e.g. tools:worker")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name}: {exc}") from None
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise UsageError(f"{module_name} has no {attribute}") from None
    if not isinstance(value, Worker):
        raise UsageError(f"{target} is a {type(value).__name__}, not a behest.worker.Worker")
    return value
