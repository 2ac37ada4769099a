"""Agents as TOML files: what `behest agents export` writes and `behest agents apply` reads.

One file holds any number of agents, each a table `[agents.NAME]` with its definition's fields
directly in it (the proto's field names, AgentDefinition.to_dict: fields at their defaults
left out), the same tables the server's settings file may hold:

    [agents.support]
    description = "Answers customers"
    instructions = '''You are support.
    Be brief.'''
    provider = "local"
    model = "script"
    tools = ["calculator"]

    [agents.support.budget]
    max_cost = "0.50"

Text with line breaks, quotes or backslashes (instructions, JSON) is written as a literal
string, '…' or '''…''' over lines, where TOML can hold it so, else as a basic string with
escapes; either reads back as it was. Reading takes the `agents` table of each file and
ignores the rest (a settings file's other tables).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import InvalidStringError
from tomlkit.items import Item, Table

from behest.client import AgentDefinition


class AgentFileError(ValueError):
    """A file that cannot be read as agents, or that defines one agent twice."""


@dataclass(frozen=True, slots=True)
class AgentFile:
    """One agent as a file gives it."""

    name: str
    definition: AgentDefinition
    source: str  # the file's path


def agents_toml(agents: Iterable[tuple[str, AgentDefinition, str]]) -> str:
    """A TOML document of (name, definition, comment) triples, one `[agents.NAME]` table each,
    the comment above it."""
    document = tomlkit.document()
    tables = tomlkit.table(is_super_table=True)
    for name, definition, comment in agents:
        table = _table(definition.to_dict())
        if comment:
            table.comment(comment)
        tables.add(name, table)
    document.add("agents", tables)
    return tomlkit.dumps(document)


def _table(values: Mapping[str, Any]) -> Table:
    table = tomlkit.table()
    for key, value in values.items():
        table.add(key, _item(value))
    return table


def _item(value: Any) -> Item:
    if isinstance(value, Mapping):
        return _table(value)
    if isinstance(value, list) and value and isinstance(value[0], Mapping):
        tables = tomlkit.aot()
        for entry in value:
            tables.append(_table(entry))
        return tables
    if isinstance(value, str):
        return _string(value)
    return tomlkit.item(value)


def _string(text: str) -> Item:
    """Text with line breaks, quotes or backslashes (instructions, JSON) as a literal string
    that shows it as it is, where TOML can hold it so; else a basic string with escapes."""
    multiline = "\n" in text
    # A CR would come back as a plain line break; a closing ' would run into the delimiter.
    if (multiline or '"' in text or "\\" in text) and "\r" not in text and text[-1:] != "'":
        try:
            return tomlkit.string(text, literal=True, multiline=multiline)
        except InvalidStringError:
            pass  # a ' (''' over lines) or a control character
    return tomlkit.string(text)


def read_agent_files(paths: Sequence[Path]) -> list[AgentFile]:
    """Every agent of the files, in order; AgentFileError names the file, the agent and the
    field of the first problem (unreadable, not TOML, no agents, a bad field, a name twice)."""
    found: list[AgentFile] = []
    seen: dict[str, str] = {}
    for path in paths:
        for agent in _read(path):
            if agent.name in seen:
                raise AgentFileError(
                    f"{path}: agent {agent.name!r} is also defined in {seen[agent.name]}"
                )
            seen[agent.name] = agent.source
            found.append(agent)
    return found


def apply_order(agents: Sequence[AgentFile]) -> list[tuple[AgentFile, frozenset[str]]]:
    """The order to apply agents in: the agents one names (sub-agents, handoffs) before it,
    else in the files' order; with each, the agents of the files it names that come only
    after it (a circle: triage hands off to billing, billing back to triage)."""
    by_name = {agent.name: agent for agent in agents}
    order: list[AgentFile] = []
    seen: set[str] = set()

    def visit(agent: AgentFile) -> None:
        if agent.name in seen:
            return
        seen.add(agent.name)
        for named in (*agent.definition.sub_agents, *agent.definition.handoffs):
            if named in by_name:
                visit(by_name[named])
        order.append(agent)

    for agent in agents:
        visit(agent)
    done: set[str] = set()
    result = []
    for agent in order:
        done.add(agent.name)
        named = {*agent.definition.sub_agents, *agent.definition.handoffs}
        result.append((agent, frozenset(n for n in named if n in by_name and n not in done)))
    return result


def _read(path: Path) -> list[AgentFile]:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise AgentFileError(f"{path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise AgentFileError(f"{path}: not valid TOML: {exc}") from None
    tables = document.get("agents")
    if not isinstance(tables, dict) or not tables:
        raise AgentFileError(f"{path}: no [agents.NAME] table")
    agents = []
    for name, values in tables.items():
        if isinstance(values, dict) and "tenant" in values:
            raise AgentFileError(
                f"{path}: agents.{name}.tenant is for the server's settings; apply makes "
                "agents in the tenant of your token: leave it out"
            )
        try:
            definition = AgentDefinition.from_dict(values, where=f"agents.{name}")
        except ValueError as exc:
            raise AgentFileError(f"{path}: {exc}") from None
        agents.append(AgentFile(name, definition, str(path)))
    return agents
