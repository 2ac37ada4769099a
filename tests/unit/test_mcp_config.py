"""Parsing `[mcp.servers.NAME]` settings into MCP server configs."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from behest.tools.mcp import McpServerConfig, parse_mcp_servers

SETTINGS = """
[mcp.servers.files]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"]
env = { LOG_LEVEL = "debug" }
cwd = "/srv"
timeout_s = 10

[mcp.servers.search-web]
url = "http://127.0.0.1:9/mcp"
headers = { Authorization = "Bearer t" }
"""


def test_a_toml_section_gives_one_config_per_server() -> None:
    section = tomllib.loads(SETTINGS)["mcp"]["servers"]
    assert parse_mcp_servers(section) == [
        McpServerConfig(
            name="files",
            command="npx",
            args=("-y", "@modelcontextprotocol/server-filesystem", "/srv/data"),
            env={"LOG_LEVEL": "debug"},
            cwd="/srv",
            timeout_s=10.0,
        ),
        McpServerConfig(
            name="search-web",
            url="http://127.0.0.1:9/mcp",
            headers={"Authorization": "Bearer t"},
        ),
    ]


def test_defaults_apply_to_a_bare_command() -> None:
    (config,) = parse_mcp_servers({"echo": {"command": "echo-server"}})
    assert config == McpServerConfig(name="echo", command="echo-server")
    assert config.args == ()
    assert config.env is None
    assert config.timeout_s == 30.0


def test_an_empty_section_gives_no_servers() -> None:
    assert parse_mcp_servers({}) == []


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"command": "x", "comand": "y"}, "unknown key(s) comand"),
        ({"command": "x", "url": "http://127.0.0.1:9/mcp"}, "exactly one of 'command'"),
        ({}, "exactly one of 'command'"),
        ({"command": ""}, "exactly one of 'command'"),
        ({"command": 3}, "command must be a string"),
        ({"command": "x", "args": "-v"}, "args must be a list of strings"),
        ({"command": "x", "args": [1]}, "args must be a list of strings"),
        ({"command": "x", "env": {"A": 1}}, "env must be a table of strings"),
        ({"command": "x", "headers": {"A": "b"}}, "headers only apply to a 'url'"),
        ({"url": "http://127.0.0.1:9/mcp", "args": []}, "args only apply to a 'command'"),
        ({"url": "127.0.0.1:9/mcp"}, "url must start with http:// or https://"),
        ({"command": "x", "timeout_s": 0}, "timeout_s must be a positive number"),
        ({"command": "x", "timeout_s": "10"}, "timeout_s must be a positive number"),
        ({"command": "x", "timeout_s": True}, "timeout_s must be a positive number"),
        ({"command": "x", "requires_approval": "yes"}, "requires_approval must be true or false"),
        ("npx", "expected a table"),
    ],
)
def test_a_bad_entry_is_rejected_naming_the_server(entry: Any, problem: str) -> None:
    with pytest.raises(ValueError, match="MCP server 'srv'") as caught:
        parse_mcp_servers({"srv": entry})
    assert problem in str(caught.value)


@pytest.mark.parametrize("name", ["has space", "dots.no", "", "slash/no", "ünï"])
def test_a_bad_server_name_is_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="letters, digits") as caught:
        parse_mcp_servers({name: {"command": "x"}})
    assert repr(name) in str(caught.value)


def test_the_first_bad_entry_is_reported_even_after_good_ones() -> None:
    with pytest.raises(ValueError, match="MCP server 'second'"):
        parse_mcp_servers({"first": {"command": "x"}, "second": {"cmd": "y"}})


def test_a_config_built_directly_is_checked_too() -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        McpServerConfig(name="both", command="x", url="http://127.0.0.1:9/mcp")
    with pytest.raises(ValueError, match="invalid"):
        McpServerConfig(name="bad name", command="x")
