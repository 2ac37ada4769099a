"""MCP server settings: the `[mcp.servers.NAME]` tables (cheap to import: no SDK here)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from behest.tools.base import DEFAULT_TIMEOUT_S

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]+$")
_KEYS = frozenset(
    {"command", "args", "env", "cwd", "url", "headers", "timeout_s", "requires_approval"}
)


@dataclass(frozen=True)
class McpServerConfig:
    """One MCP server: a command run over stdio, or a streamable HTTP `url`."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    # Every call of the server's tools waits for an approval (SubmitApprovals).
    requires_approval: bool = False

    def __post_init__(self) -> None:
        if not NAME_PATTERN.match(self.name):
            raise ValueError(
                f"MCP server name {self.name!r} is invalid: use letters, digits, '_' and '-'"
            )
        if bool(self.command) == bool(self.url):
            raise ValueError(f"MCP server {self.name!r} needs exactly one of 'command' or 'url'")
        if not self.timeout_s > 0:
            raise ValueError(f"MCP server {self.name!r}: timeout_s must be positive")

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "streamable HTTP"


def parse_mcp_servers(section: Mapping[str, Any]) -> list[McpServerConfig]:
    """The servers of a `[mcp.servers.NAME]` settings section; ValueError names a bad entry."""
    if not isinstance(section, Mapping):
        raise ValueError("[mcp.servers] must be a table of servers")
    return [_parse_server(name, entry) for name, entry in section.items()]


def _parse_server(name: str, entry: Any) -> McpServerConfig:
    where = f"MCP server {name!r}"
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ValueError(f"{where}: the name must use only letters, digits, '_' and '-'")
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: expected a table like [mcp.servers.{name}]")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(_KEYS))})"
        )
    command = _string(entry, "command", where)
    url = _string(entry, "url", where)
    if bool(command) == bool(url):
        raise ValueError(f"{where}: set exactly one of 'command' (stdio) or 'url' (HTTP)")
    if url:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{where}: url must start with http:// or https://")
        stdio_only = sorted(k for k in ("args", "env", "cwd") if k in entry)
        if stdio_only:
            raise ValueError(f"{where}: {', '.join(stdio_only)} only apply to a 'command'")
    elif "headers" in entry:
        raise ValueError(f"{where}: headers only apply to a 'url'")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"{where}: args must be a list of strings")
    timeout_s = entry.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
        raise ValueError(f"{where}: timeout_s must be a positive number of seconds")
    requires_approval = entry.get("requires_approval", False)
    if not isinstance(requires_approval, bool):
        raise ValueError(f"{where}: requires_approval must be true or false")
    return McpServerConfig(
        name=name,
        command=command,
        args=tuple(args),
        env=_string_table(entry, "env", where),
        cwd=_string(entry, "cwd", where),
        url=url,
        headers=_string_table(entry, "headers", where),
        timeout_s=float(timeout_s),
        requires_approval=requires_approval,
    )


def _string(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key, "")
    if not isinstance(value, str):
        raise ValueError(f"{where}: {key} must be a string")
    return value


def _string_table(entry: Mapping[str, Any], key: str, where: str) -> dict[str, str] | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"{where}: {key} must be a table of strings")
    return dict(value)
