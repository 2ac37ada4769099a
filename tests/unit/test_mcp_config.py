"""The `[mcp]` settings table: its `[mcp.servers.NAME]` tables checked with every other
setting, as MCP server configs."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from behest.config import Settings
from behest.tools.mcp import McpServerConfig

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


def servers(section: Any) -> tuple[McpServerConfig, ...]:
    """The servers of an `[mcp.servers]` section, checked as at start-up."""
    return Settings().with_tables({"mcp": {"servers": section}}, source="tests").mcp_servers


def test_a_toml_section_gives_one_config_per_server() -> None:
    settings = Settings().with_tables(tomllib.loads(SETTINGS), source="tests")
    assert settings.mcp_servers == (
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
    )
    # Made once, at the check; a copy of the settings keeps them.
    assert settings.mcp_servers is settings.mcp_servers
    assert settings.with_values({}, source="tests").mcp_servers == settings.mcp_servers


def test_defaults_apply_to_a_bare_command() -> None:
    (config,) = servers({"echo": {"command": "echo-server"}})
    assert config == McpServerConfig(name="echo", command="echo-server")
    assert config.args == ()
    assert config.env is None
    assert config.timeout_s == 30.0


def test_sampling_and_the_log_level_per_server_and_sampling_off_for_all() -> None:
    section = {"a": {"command": "a"}, "b": {"command": "b", "sampling": False}}
    section["c"] = {"command": "c", "log_level": "warning"}
    assert [(c.name, c.sampling, c.log_level) for c in servers(section)] == [
        ("a", True, "info"),
        ("b", False, "info"),
        ("c", True, "warning"),
    ]
    off = Settings().with_values({"mcp": {"servers": section}, "mcp_sampling": False}, source="t")
    assert [c.sampling for c in off.mcp_servers] == [False, False, False]
    assert off.mcp_servers is off.mcp_servers


def test_an_empty_section_gives_no_servers() -> None:
    assert servers({}) == ()
    assert Settings().mcp_servers == ()


@pytest.mark.parametrize(
    ("entry", "key", "problem"),
    [
        ({"command": "x", "comand": "y"}, "comand", "Extra inputs are not permitted (allowed: "),
        ({"command": "x", "url": "http://127.0.0.1:9/mcp"}, "", "exactly one of 'command'"),
        ({}, "", "exactly one of 'command'"),
        ({"command": ""}, "", "exactly one of 'command'"),
        ({"command": 3}, "command", "Input should be a valid string"),
        ({"command": "x", "args": "-v"}, "args", "must be a list of strings"),
        ({"command": "x", "args": [1]}, "args", "must be a list of strings"),
        ({"command": "x", "env": {"A": 1}}, "env.A", "Input should be a valid string"),
        ({"command": "x", "headers": {"A": "b"}}, "", "headers only apply to a 'url'"),
        ({"url": "http://127.0.0.1:9/mcp", "args": []}, "", "args only apply to a 'command'"),
        ({"url": "127.0.0.1:9/mcp"}, "", "url must start with http:// or https://"),
        ({"command": "x", "timeout_s": 0}, "timeout_s", "Input should be greater than 0"),
        ({"command": "x", "timeout_s": "10"}, "timeout_s", "Input should be a valid number"),
        ({"command": "x", "timeout_s": True}, "timeout_s", "Input should be a valid number"),
        ({"command": "x", "requires_approval": "yes"}, "requires_approval", "valid boolean"),
        ({"command": "x", "sampling": "no"}, "sampling", "valid boolean"),
        ({"command": "x", "log_level": "verbose"}, "log_level", "Input should be 'debug', "),
        ("npx", "", "must be a table"),
    ],
)
def test_a_bad_entry_is_rejected_naming_the_server_and_key(
    entry: Any, key: str, problem: str
) -> None:
    where = ".".join(("mcp.servers.srv", key) if key else ("mcp.servers.srv",))
    with pytest.raises(ValueError, match=f"^tests: setting '{where}': ") as caught:
        servers({"srv": entry})
    assert problem in str(caught.value)


def test_header_and_env_values_are_never_shown() -> None:
    with pytest.raises(ValueError) as caught:
        servers(
            {
                "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": ["tok-1"]}},
                "cmd": {"command": "x", "env": "TOKEN=tok-2", "args": ["--key", 3, "tok-3"]},
            }
        )
    message = str(caught.value)
    assert "'mcp.servers.web.headers.Authorization'" in message
    assert "'mcp.servers.cmd.env'" in message and "'mcp.servers.cmd.args'" in message
    assert "tok-" not in message


@pytest.mark.parametrize("name", ["has space", "dots.no", "", "slash/no", "ünï"])
def test_a_bad_server_name_is_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="letters, digits") as caught:
        servers({name: {"command": "x"}})
    assert f"(got {name!r})" in str(caught.value)


def test_every_bad_entry_is_reported_even_after_good_ones() -> None:
    with pytest.raises(ValueError, match=r"'mcp\.servers\.second\.cmd'") as caught:
        servers({"first": {"command": "x"}, "second": {"cmd": "y"}, "third": {}})
    assert "'mcp.servers.third'" in str(caught.value)
    assert "first" not in str(caught.value)


def test_the_mcp_table_holds_only_servers() -> None:
    with pytest.raises(ValueError, match=r"setting 'mcp\.other': .*\(allowed: servers\)"):
        Settings().with_tables({"mcp": {"other": 1}}, source="tests")


def test_a_config_built_directly_is_checked_too() -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        McpServerConfig(name="both", command="x", url="http://127.0.0.1:9/mcp")
    with pytest.raises(ValueError, match="invalid"):
        McpServerConfig(name="bad name", command="x")
