"""MCP server settings: the `[mcp]` table and its `[mcp.servers.NAME]` tables (cheap to
import: no SDK here).

    [mcp.servers.files]                  # a command run over stdio
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"]
    env = { LOG_LEVEL = "debug" }        # and cwd
    timeout_s = 30                       # per tool call
    requires_approval = false            # every call waits for an approval
    sampling = true                      # answer its sampling requests with the run's model
    log_level = "info"                   # its log messages from this level on go to the log
    [mcp.servers.search]                 # or a streamable HTTP url
    url = "http://127.0.0.1:8931/mcp"
    headers = { Authorization = "Bearer ..." }

Each table is a strict pydantic model that Settings holds and checks with every other
setting; McpSettings.configs gives the frozen McpServerConfig each server is run with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    model_validator,
)

from behest.tools.base import DEFAULT_TIMEOUT_S

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]+$")
# MCP's log levels (RFC 5424's severities), the least severe first.
LogLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]


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
    # Whether behest advertises sampling to it and answers its requests with the calling
    # run's model (tools/mcp_sampling.py).
    sampling: bool = True
    # The least severe of its log messages behest asks for and logs (tools/mcp_logs.py).
    log_level: LogLevel = "info"

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


def _name(value: str) -> str:
    if not NAME_PATTERN.match(value):
        raise ValueError("a server's name may use only letters, digits, '_' and '-'")
    return value


def _strings(value: object) -> object:
    if not isinstance(value, list | tuple) or not all(isinstance(a, str) for a in value):
        raise ValueError("must be a list of strings")
    return value


_STRICT = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class McpServerTable(BaseModel):
    """One `[mcp.servers.NAME]` table: exactly one of `command` (stdio) or `url` (HTTP)."""

    model_config = _STRICT

    command: str = ""
    args: Annotated[tuple[str, ...], BeforeValidator(_strings)] = ()
    env: dict[str, str] | None = None
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] | None = None
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, strict=True)
    requires_approval: StrictBool = False
    sampling: StrictBool = True
    log_level: LogLevel = "info"

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerTable:
        if bool(self.command) == bool(self.url):
            raise ValueError("set exactly one of 'command' (stdio) or 'url' (HTTP)")
        given = self.model_fields_set
        if self.url:
            if not self.url.startswith(("http://", "https://")):
                raise ValueError("url must start with http:// or https://")
            stdio_only = [key for key in ("args", "env", "cwd") if key in given]
            if stdio_only:
                raise ValueError(f"{', '.join(stdio_only)} only apply to a 'command'")
        elif "headers" in given:
            raise ValueError("headers only apply to a 'url'")
        return self

    def config(self, name: str) -> McpServerConfig:
        return McpServerConfig(
            name=name,
            command=self.command,
            args=self.args,
            env=None if self.env is None else dict(self.env),
            cwd=self.cwd,
            url=self.url,
            headers=None if self.headers is None else dict(self.headers),
            timeout_s=self.timeout_s,
            requires_approval=self.requires_approval,
            sampling=self.sampling,
            log_level=self.log_level,
        )


class McpSettings(BaseModel):
    """The `[mcp]` table: `[mcp.servers.NAME]` tables, nothing else."""

    model_config = _STRICT

    servers: dict[Annotated[str, AfterValidator(_name)], McpServerTable] = Field(
        default_factory=dict
    )
    _configs: tuple[McpServerConfig, ...] = PrivateAttr(default=())
    _unsampled: tuple[McpServerConfig, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _made_once(self) -> McpSettings:
        self._configs = tuple(table.config(name) for name, table in self.servers.items())
        self._unsampled = tuple(replace(c, sampling=False) for c in self._configs)
        return self

    @property
    def configs(self) -> tuple[McpServerConfig, ...]:
        """The servers as they are run, in the order of the settings."""
        return self._configs

    @property
    def unsampled(self) -> tuple[McpServerConfig, ...]:
        """The servers as they are run when no server's sampling is answered (the setting
        mcp_sampling = false)."""
        return self._unsampled
