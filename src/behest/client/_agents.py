"""The client's types of agents (AgentService): a definition, an agent with its aliases, one
immutable version, and an agent with the version a call resolved to or made.

A definition turns into a plain dict and back (`to_dict`, `from_dict`) in protobuf's JSON
mapping with the proto's field names, what agent files hold (`behest agents export`): fields
left at their defaults are left out, integers are numbers (also 64-bit ones, which that
mapping would write as strings; both read back), and JSON-valued fields (`metadata`, a response
format's `json_schema`, a client tool's `parameters_schema`) stay JSON text.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from behest.client._types import Budget, Reasoning, ResponseFormat, ToolSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentDefinition:
    """What one version of an agent says: the fields of a run (CreateRunRequest's, with its
    defaults; a run of the agent takes each one it leaves unset), and the agents its runs may
    call as sub-agents or hand off to. Empty `tools` means all the server's tools."""

    description: str = ""
    instructions: str = ""
    provider: str = ""
    model: str = ""
    tools: tuple[str, ...] = ()
    client_tools: tuple[ToolSpec, ...] = ()
    tool_choice: str = ""
    approval_required_tools: tuple[str, ...] = ()
    approve_side_effects: bool = False
    approval_timeout_s: int = 0
    client_tool_timeout_s: int = 0
    budget: Budget | None = None
    response_format: ResponseFormat | None = None
    reasoning: Reasoning | None = None
    max_iterations: int = 0
    metadata: str = ""  # a JSON object stored with each run
    allow_sub_agents: bool = False
    sub_agents: tuple[str, ...] = ()
    handoffs: tuple[str, ...] = ()
    raw: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The definition in protobuf's JSON mapping with the proto field names, without the
        fields at their defaults (nor messages whose fields all are)."""
        return _plain(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], where: str = "definition") -> AgentDefinition:
        """A definition of such a dict; ValueError naming the field (`where`.field) that is
        unknown or of the wrong type."""
        return _typed(cls, values, where)


@dataclass(frozen=True, slots=True)
class Agent:
    """An agent of the caller's tenant: its latest version, aliases (name → version), and
    whether it is archived (its runs go on; no new run starts)."""

    name: str
    latest_version: int = 0
    aliases: dict[str, int] = field(default_factory=dict)
    archived: bool = False
    created_at: datetime | None = None
    updated_at: datetime | None = None
    description: str = ""  # the latest version's
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class AgentVersion:
    """One immutable version of an agent; `created_by` is the principal that made it
    ("settings": loaded from the server's settings)."""

    name: str
    version: int
    definition: AgentDefinition
    created_at: datetime | None = None
    created_by: str = ""
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class VersionedAgent:
    """An agent and one of its versions: the one a reference resolved to (get_agent), or
    the latest after create_agent or update_agent (`changed` False: update_agent found the
    definition equal to the latest version's and made none)."""

    agent: Agent
    version: AgentVersion
    changed: bool = True
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)


# --- dicts ---------------------------------------------------------------------------------


def _plain(value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        item = getattr(value, f.name)
        if f.name == "raw" or item is None:
            continue
        if dataclasses.is_dataclass(item):
            item = _plain(item)
        elif isinstance(item, tuple | list):
            item = [_plain(v) if dataclasses.is_dataclass(v) else v for v in item]
        if item not in ("", 0, False, [], {}):
            out[f.name] = item
    return out


def _typed(cls: type[Any], values: Mapping[str, Any], where: str) -> Any:
    if not isinstance(values, Mapping):
        raise ValueError(f"{where}: expected a table, got {_what(values)}")
    hints = typing.get_type_hints(cls)
    given: dict[str, Any] = {}
    for key, value in values.items():
        if key not in hints or key == "raw":
            raise ValueError(f"{where}: unknown field {key!r}")
        given[key] = _field(hints[key], value, f"{where}.{key}")
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in given:
            raise ValueError(f"{where}.{f.name} is required")
    return cls(**given)


def _field(hint: Any, value: Any, where: str) -> Any:
    """`value` as the type `hint` says (str, int, bool, a tuple of them, a client type)."""
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType):  # Budget | None
        return _typed(args[0], value, where)
    if typing.get_origin(hint) is tuple:
        if not isinstance(value, list | tuple):
            raise ValueError(f"{where}: expected a list, got {_what(value)}")
        return tuple(_field(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(hint):
        return _typed(hint, value, where)  # type: ignore[arg-type]
    if hint is int and isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)  # 64-bit integers are strings in protobuf's JSON mapping
    if type(value) is not hint or (hint is int and value < 0):
        wanted = {str: "a string", int: "an integer ≥ 0", bool: "true or false"}[hint]
        raise ValueError(f"{where}: expected {wanted}, got {_what(value)}")
    return value


def _what(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a table"
    return "a list" if isinstance(value, list) else repr(value)[:40]
