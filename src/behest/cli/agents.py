"""The `behest agents` commands: `list`, `get REF`, `versions NAME`, `alias NAME ALIAS
VERSION`, `archive NAME`, and agents as files, `export REF…` (TOML on stdout) and `apply
FILE…` (each agent created or updated, a new version only when its definition changed).

`apply` reads every file before it sends anything, then applies the agents another one names
(as a sub-agent or handoff target) before that one; new agents that name each other in a
circle are made first without the names not made yet, then updated to what the files say.

REF is "NAME" (the latest version), "NAME@VERSION" or "NAME@ALIAS". `--json` prints the
reply's messages as JSON lines, as the other listing commands do (catalog.py).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from behest.cli.agent_files import (
    AgentFile,
    AgentFileError,
    agents_toml,
    apply_order,
    read_agent_files,
)
from behest.cli.catalog import as_json_line
from behest.cli.formats import EXIT_OK, format_agent, format_agents, format_versions
from behest.client import AgentDefinition, BehestClient, BehestError, NotFound, VersionedAgent

ClientFactory = Callable[[argparse.Namespace], BehestClient]
EXIT_ERROR = 2


def add_commands(commands: Any, server: argparse.ArgumentParser, client: ClientFactory) -> None:
    """`behest agents …`."""
    agents = commands.add_parser("agents", help="stored, versioned agents and agent files")
    actions = agents.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[server], help="list agents by name")
    listing.add_argument("--archived", action="store_true", help="the archived ones too")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (≤ 100)")
    listing.add_argument("--offset", type=int, default=0, help="skip this many")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(func=lambda args, printer: _list(args, client))

    get = actions.add_parser("get", parents=[server], help="show an agent and one version")
    get.add_argument("ref", metavar="REF", help="NAME, NAME@VERSION or NAME@ALIAS")
    get.add_argument("--json", action="store_true", help="the reply as one JSON object")
    get.set_defaults(func=lambda args, printer: _get(args, client))

    versions = actions.add_parser("versions", parents=[server], help="an agent's versions")
    versions.add_argument("name")
    versions.add_argument("--limit", type=int, default=100, help="at most this many (≤ 100)")
    versions.add_argument("--offset", type=int, default=0, help="skip this many newest")
    versions.add_argument("--json", action="store_true", help="one JSON object per line")
    versions.set_defaults(func=lambda args, printer: _versions(args, client))

    alias = actions.add_parser(
        "alias", parents=[server], help="point an alias at a version (0 removes it)"
    )
    alias.add_argument("name")
    alias.add_argument("alias")
    alias.add_argument("version", type=int)
    alias.set_defaults(func=lambda args, printer: _alias(args, client))

    archive = actions.add_parser(
        "archive", parents=[server], help="archive an agent (its runs go on; no new one starts)"
    )
    archive.add_argument("name")
    archive.set_defaults(func=lambda args, printer: _archive(args, client))

    export = actions.add_parser(
        "export", parents=[server], help="print agents' definitions as TOML ([agents.NAME])"
    )
    export.add_argument("refs", nargs="*", metavar="REF", help="NAME, NAME@VERSION or NAME@ALIAS")
    export.add_argument("--all", action="store_true", help="the latest version of every agent")
    export.set_defaults(func=lambda args, printer: _export(args, client))

    apply = actions.add_parser(
        "apply", parents=[server], help="create or update the agents of TOML files"
    )
    apply.add_argument("files", nargs="+", type=Path, metavar="FILE")
    apply.set_defaults(func=lambda args, printer: _apply(args, client))


def _list(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> list[Any]:
        async with client(args) as behest:
            return await behest.list_agents(
                limit=args.limit, offset=args.offset, include_archived=args.archived
            )

    found = asyncio.run(go())
    if args.json:
        _print_lines(found)
    else:
        print(format_agents(found) if found else "no agents")
    return EXIT_OK


def _get(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> VersionedAgent:
        async with client(args) as behest:
            return await behest.get_agent(args.ref)

    found = asyncio.run(go())
    if args.json:
        print(as_json_line(found))
        return EXIT_OK
    definition = agents_toml([(found.agent.name, found.version.definition, "")])
    print(format_agent(found) + "\n\n" + definition.rstrip("\n"))
    return EXIT_OK


def _versions(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> tuple[Any, list[Any]]:
        async with client(args) as behest:
            agent = (await behest.get_agent(args.name)).agent
            return agent, await behest.agent_versions(
                args.name, limit=args.limit, offset=args.offset
            )

    agent, found = asyncio.run(go())
    if args.json:
        _print_lines(found)
    else:
        print(format_versions(agent, found))
    return EXIT_OK


def _alias(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> Any:
        async with client(args) as behest:
            return await behest.set_agent_alias(args.name, args.alias, args.version)

    agent = asyncio.run(go())
    if args.version:
        print(f"{agent.name}: {args.alias} → version {args.version}")
    else:
        print(f"{agent.name}: alias {args.alias} removed")
    return EXIT_OK


def _archive(args: argparse.Namespace, client: ClientFactory) -> int:
    async def go() -> Any:
        async with client(args) as behest:
            return await behest.archive_agent(args.name)

    agent = asyncio.run(go())
    print(f"archived {agent.name} (its runs go on; no new run of it starts)")
    return EXIT_OK


def _export(args: argparse.Namespace, client: ClientFactory) -> int:
    if bool(args.refs) == args.all:
        print("error: name the agents to export, or give --all", file=sys.stderr)
        return EXIT_ERROR

    async def go() -> list[VersionedAgent]:
        async with client(args) as behest:
            refs = args.refs or [a.name for a in await _every_agent(behest)]
            return [await behest.get_agent(ref) for ref in refs]

    found = asyncio.run(go())
    print(
        agents_toml(
            (a.agent.name, a.version.definition, f"version {a.version.version}") for a in found
        ),
        end="",
    )
    return EXIT_OK


async def _every_agent(behest: BehestClient) -> list[Any]:
    """Every agent that is not archived, page by page."""
    found: list[Any] = []
    while page := await behest.list_agents(limit=100, offset=len(found)):
        found += page
    return found


def _apply(args: argparse.Namespace, client: ClientFactory) -> int:
    try:
        agents = read_agent_files(args.files)
    except AgentFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR

    async def go() -> int:
        async with client(args) as behest:
            again: list[AgentFile] = []
            for agent, ahead in apply_order(agents):
                definition = agent.definition
                if missing := await _missing(behest, ahead):
                    # A circle of new agents: this one first without those not made yet.
                    definition = _without(definition, missing)
                    again.append(agent)
                if not await _apply_one(behest, agent, definition):
                    return EXIT_ERROR
            for agent in again:
                if not await _apply_one(behest, agent, agent.definition):
                    return EXIT_ERROR
        return EXIT_OK

    return asyncio.run(go())


async def _apply_one(behest: BehestClient, agent: AgentFile, definition: AgentDefinition) -> bool:
    """UpdateAgent with allow_missing, and what it did; False (the error shown) if refused."""
    try:
        done = await behest.update_agent(agent.name, definition, allow_missing=True)
    except BehestError as exc:
        print(f"error: {agent.name} ({agent.source}): {exc}", file=sys.stderr)
        return False
    print(_applied(done))
    return True


async def _missing(behest: BehestClient, names: Iterable[str]) -> set[str]:
    """The agents of `names` the server does not have."""
    missing = set()
    for name in names:
        try:
            await behest.get_agent(name)
        except NotFound:
            missing.add(name)
    return missing


def _without(definition: AgentDefinition, names: set[str]) -> AgentDefinition:
    return dataclasses.replace(
        definition,
        sub_agents=tuple(n for n in definition.sub_agents if n not in names),
        handoffs=tuple(n for n in definition.handoffs if n not in names),
    )


def _applied(done: VersionedAgent) -> str:
    """What apply did to one agent."""
    name, version = done.agent.name, done.version.version
    if not done.changed:
        return f"{name}: unchanged (version {version})"
    return f"created {name} (version 1)" if version == 1 else f"{name}: version {version}"


def _print_lines(items: list[Any]) -> None:
    for item in items:
        print(as_json_line(item))
