"""The `behest` commands over stored things and what the server offers: `sessions list | get |
messages | delete`, `tools list`, `providers list`, `usage`, `runs events` (a run's stored
events, every page) and `runs prune` (on the database itself, like `behest token new` needs no
server).

`--json` prints one JSON object per line (the message as protobuf's JSON mapping, with the
proto field names), for scripts: `behest runs events RUN_ID --json | jq …`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

from google.protobuf import json_format

from behest.cli.formats import (
    EXIT_OK,
    format_event,
    format_message,
    format_providers,
    format_session,
    format_sessions,
    format_tools,
    format_usage,
)
from behest.cli.render import EventPrinter
from behest.cli.waits import UsageError
from behest.client import BehestClient, Session
from behest.config import Settings

ClientFactory = Callable[[argparse.Namespace], BehestClient]
EXIT_ERROR = 2


def add_commands(commands: Any, server: argparse.ArgumentParser, client: ClientFactory) -> None:
    """`behest sessions …`, `behest tools list` and `behest providers list`."""
    sessions = commands.add_parser("sessions", help="list, inspect and delete sessions")
    actions = sessions.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[server], help="list sessions, newest first")
    listing.add_argument("--limit", type=int, default=20, help="at most this many (≤ 100)")
    listing.add_argument("--offset", type=int, default=0, help="skip this many newest")
    listing.set_defaults(func=lambda args, printer: _sessions_list(args, client))
    get = actions.add_parser("get", parents=[server], help="show one session")
    get.add_argument("session_id")
    get.set_defaults(func=lambda args, printer: _sessions_get(args, client))
    messages = actions.add_parser("messages", parents=[server], help="print a transcript")
    messages.add_argument("session_id")
    messages.add_argument("--from", dest="start", type=int, default=0, metavar="POSITION")
    messages.add_argument("--json", action="store_true", help="one JSON object per line")
    messages.set_defaults(func=lambda args, printer: _sessions_messages(args, client))
    watch = actions.add_parser(
        "watch", parents=[server], help="follow every run of a session, later ones included"
    )
    watch.add_argument("session_id")
    watch.add_argument(
        "--after", default="", metavar="RUN_ID:SEQUENCE", help="go on after this event"
    )
    watch.add_argument("--runs", type=int, default=0, help="stop once this many runs ended")
    watch.set_defaults(func=lambda args, printer: _sessions_watch(args, printer, client))
    fork = actions.add_parser(
        "fork", parents=[server], help="a new session sharing the start of one's history"
    )
    fork.add_argument("session_id")
    point = fork.add_mutually_exclusive_group(required=True)
    point.add_argument("--through", type=int, metavar="POSITION", help="the last message kept")
    point.add_argument("--after-run", default="", metavar="RUN_ID", help="keep up to its end")
    fork.set_defaults(func=lambda args, printer: _sessions_fork(args, client))
    delete = actions.add_parser(
        "delete", parents=[server], help="erase a session with its runs and their events"
    )
    delete.add_argument("session_id")
    delete.set_defaults(func=lambda args, printer: _sessions_delete(args, client))

    usage = commands.add_parser(
        "usage", parents=[server], help="tokens and cost of your tenant per day (UTC)"
    )
    usage.add_argument("--session", default="", help="one session's runs only")
    usage.add_argument("--from", dest="from_day", default="", metavar="YYYY-MM-DD")
    usage.add_argument("--to", dest="to_day", default="", metavar="YYYY-MM-DD")
    usage.add_argument("--json", action="store_true", help="the response as one JSON object")
    usage.set_defaults(func=lambda args, printer: _usage(args, client))

    for name, func, text in [
        ("tools", _tools_list, "the tools runs may use"),
        ("providers", _providers_list, "the providers and models runs may name"),
    ]:
        parser = commands.add_parser(name, help=text)
        what = parser.add_subparsers(dest="action", required=True)
        action = what.add_parser("list", parents=[server], help=f"list {text}")
        action.set_defaults(func=lambda args, printer, _func=func: _func(args, client))


def add_run_actions(actions: Any, server: argparse.ArgumentParser, client: ClientFactory) -> None:
    """`behest runs events` and `behest runs prune`."""
    events = actions.add_parser(
        "events", parents=[server], help="print a run's stored events (all of them; not live)"
    )
    events.add_argument("run_id")
    events.add_argument("--after", type=int, default=0, help="last sequence already seen")
    events.add_argument("--json", action="store_true", help="one JSON object per line")
    events.set_defaults(func=lambda args, printer: _runs_events(args, client))

    prune = actions.add_parser(
        "prune", help="delete finished runs older than DAYS from the database (no server needed)"
    )
    prune.add_argument("--older-than", type=float, required=True, metavar="DAYS")
    prune.add_argument("--dry-run", action="store_true", help="count them, delete nothing")
    prune.add_argument("--config", help="a TOML settings file (default $BEHEST_CONFIG)")
    prune.add_argument("--data-dir", help="where the SQLite database lives")
    prune.set_defaults(func=lambda args, printer: _runs_prune(args))


def _sessions_fork(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> Session:
        async with client(args) as behest:
            return await behest.fork_session(
                args.session_id, through_position=args.through, after_run_id=args.after_run
            )

    forked = asyncio.run(go())
    print(
        f"session {forked.id}  forked from {forked.parent_session_id} through message "
        f"{forked.forked_through_position} ({forked.message_count} messages)"
    )
    return EXIT_OK


def _sessions_watch(args: argparse.Namespace, printer: EventPrinter, client: ClientFactory) -> int:
    run_id, _, sequence = args.after.partition(":")
    if args.after and not sequence.isdigit():
        raise UsageError(f"--after: RUN_ID:SEQUENCE, e.g. the last line's; not {args.after!r}")

    async def go() -> int:
        ended = 0
        shown = printer
        async with client(args) as behest:
            events = behest.watch_session(
                args.session_id, after_run_id=run_id, after_sequence=int(sequence or 0)
            )
            async for event in events:
                if event.run_id != shown.run_id and shown.run_id:  # each run as `watch` shows it
                    shown = EventPrinter(printer.out, printer.err)
                shown.render(event)
                ended += event.terminal
                if args.runs and ended >= args.runs:
                    return EXIT_OK
        return EXIT_OK

    return asyncio.run(go())


def _sessions_list(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> list[Any]:
        async with client(args) as behest:
            return await behest.list_sessions(limit=args.limit, offset=args.offset)

    found = asyncio.run(go())
    print(format_sessions(found) if found else "no sessions")
    return EXIT_OK


def _sessions_get(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> Any:
        async with client(args) as behest:
            return await behest.get_session(args.session_id)

    print(format_session(asyncio.run(go())))
    return EXIT_OK


def _sessions_messages(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> None:
        async with client(args) as behest:
            messages = behest.session_messages(args.session_id, args.start)
            await _print_all(messages, args.json, format_message, separator="\n")

    asyncio.run(go())
    return EXIT_OK


def _sessions_delete(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> int:
        async with client(args) as behest:
            return await behest.delete_session(args.session_id)

    deleted = asyncio.run(go())
    print(f"deleted session {args.session_id} and its {_runs(deleted)}")
    return EXIT_OK


def _tools_list(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> list[Any]:
        async with client(args) as behest:
            return await behest.list_tools()

    print(format_tools(asyncio.run(go())))
    return EXIT_OK


def _providers_list(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> list[Any]:
        async with client(args) as behest:
            return await behest.list_providers()

    print(format_providers(asyncio.run(go())))
    return EXIT_OK


def _usage(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> Any:
        async with client(args) as behest:
            return await behest.usage(
                session_id=args.session, from_day=args.from_day, to_day=args.to_day
            )

    found = asyncio.run(go())
    print(as_json_line(found) if args.json else format_usage(found))
    return EXIT_OK


def _runs_events(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> None:
        async with client(args) as behest:
            await _print_all(behest.run_events(args.run_id, args.after), args.json, format_event)

    asyncio.run(go())
    return EXIT_OK


def _runs_prune(args: argparse.Namespace) -> int:
    from behest.runs.retention import prune_from_cli  # lazily: it needs the store, not a server

    try:
        settings = Settings.load(config_file=args.config, data_dir=args.data_dir)
        count = asyncio.run(prune_from_cli(settings, args.older_than, args.dry_run))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.dry_run:
        print(f"{_runs(count)} would be pruned (dry run: nothing was deleted)")
    else:
        print(f"pruned {_runs(count)}")
    return EXIT_OK


async def _print_all(
    items: AsyncIterator[Any],
    as_json: bool,
    formatter: Callable[[Any], str],
    separator: str = "",
) -> None:
    """Print each item as it comes: a JSON line, or the formatter's text."""
    first = True
    async for item in items:
        if as_json:
            print(as_json_line(item))
        else:
            print(("" if first else separator) + formatter(item))
        first = False


def as_json_line(item: Any) -> str:
    """A result as one line of JSON: its wire message (`.raw`) in protobuf's JSON mapping,
    with the proto field names, the format scripts read."""
    body = json_format.MessageToDict(item.raw, preserving_proto_field_name=True)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def _runs(count: int) -> str:
    return f"{count} run" + ("" if count == 1 else "s")
