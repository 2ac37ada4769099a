"""Agents as TOML files (cli/agent_files.py) and a definition as a dict (AgentDefinition's
to_dict and from_dict): what export writes reads back as the same definition."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

from behest._proto.agent.v1 import agent_pb2
from behest.cli.agent_files import (
    AgentFile,
    AgentFileError,
    agents_toml,
    apply_order,
    read_agent_files,
)
from behest.client import AgentDefinition, Budget, Reasoning, ResponseFormat, ToolSpec

SCHEMA = json.dumps(
    {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    indent=2,
)
FULL = AgentDefinition(
    description="Answers customers' questions",
    instructions='You are "support".\nBe brief; use the calculator for sums.\n\n\tThanks!\n',
    provider="local",
    model="script",
    tools=("calculator", "lookup"),
    client_tools=(
        ToolSpec("confirm", "Asks the user", '{"type": "object"}'),
        ToolSpec("open_page", parameters_schema=SCHEMA),
    ),
    tool_choice="auto",
    approval_required_tools=("lookup",),
    approve_side_effects=True,
    approval_timeout_s=600,
    client_tool_timeout_s=30,
    budget=Budget(max_tokens=20_000, max_tool_calls=8, max_wall_seconds=120, max_cost="0.50"),
    response_format=ResponseFormat(SCHEMA, name="answer"),
    reasoning=Reasoning("low", 2048),
    max_iterations=6,
    metadata='{"team": "care", "tier": 2}',
    allow_sub_agents=True,
    sub_agents=("billing",),
    handoffs=("billing", "sales"),
)


def round_trip(*agents: tuple[str, AgentDefinition], tmp_path: Path) -> list[AgentDefinition]:
    path = tmp_path / "agents.toml"
    path.write_text(agents_toml((name, d, "") for name, d in agents))
    read = read_agent_files([path])
    assert [a.name for a in read] == [name for name, _ in agents]
    return [a.definition for a in read]


def test_a_full_definition_reads_back_equal(tmp_path: Path) -> None:
    assert round_trip(("support", FULL), tmp_path=tmp_path) == [FULL]


def test_an_empty_definition_is_an_empty_table(tmp_path: Path) -> None:
    text = agents_toml([("blank", AgentDefinition(), "")])
    assert text == "[agents.blank]\n"
    assert round_trip(("blank", AgentDefinition()), tmp_path=tmp_path) == [AgentDefinition()]


def test_the_file_is_agents_tables_with_the_fields_in_them() -> None:
    text = agents_toml([("support", FULL, "version 3"), ("billing", AgentDefinition(), "")])
    document = tomllib.loads(text)
    assert list(document) == ["agents"]
    assert list(document["agents"]) == ["support", "billing"]
    support = document["agents"]["support"]
    assert support["budget"] == {
        "max_tokens": 20_000,
        "max_tool_calls": 8,
        "max_wall_seconds": 120,
        "max_cost": "0.50",
    }
    assert support["client_tools"][1] == {"name": "open_page", "parameters_schema": SCHEMA}
    assert "[agents.support] # version 3\n" in text
    # Text over lines is shown as it is, JSON without escapes.
    assert "instructions = '''You are \"support\".\nBe brief;" in text
    assert 'metadata = \'{"team": "care", "tier": 2}\'' in text


def test_defaults_are_left_out() -> None:
    definition = AgentDefinition(model="echo", budget=Budget(), reasoning=Reasoning())
    assert definition.to_dict() == {"model": "echo"}
    assert agents_toml([("a", definition, "")]) == '[agents.a]\nmodel = "echo"\n'


def test_the_dict_is_protobufs_json_mapping_with_the_proto_names() -> None:
    message = json_format.ParseDict(FULL.to_dict(), agent_pb2.AgentDefinition())
    mapped = json_format.MessageToDict(message, preserving_proto_field_name=True)
    mapped["budget"]["max_tokens"] = int(mapped["budget"]["max_tokens"])  # uint64: a string
    assert mapped == FULL.to_dict()
    assert AgentDefinition.from_dict(mapped) == FULL


def test_64_bit_integers_read_as_numbers_or_strings() -> None:
    read = AgentDefinition.from_dict({"budget": {"max_tokens": "1000"}})
    assert read.budget == Budget(max_tokens=1000)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_text_reads_back_as_it_was(text: str) -> None:
    definition = AgentDefinition(instructions=text, description=text, metadata=text)
    document = tomllib.loads(agents_toml([("a", definition, "")]))
    assert AgentDefinition.from_dict(document["agents"].get("a", {})) == definition


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ("toolz = []", "agents.a: unknown field 'toolz'"),
        ("tools = 'calculator'", "agents.a.tools: expected a list, got 'calculator'"),
        ("max_iterations = -1", "agents.a.max_iterations: expected an integer ≥ 0, got -1"),
        ("approve_side_effects = 1", "agents.a.approve_side_effects: expected true or false"),
        ("budget = 5", "agents.a.budget: expected a table, got 5"),
        ("[[agents.a.client_tools]]\ndescription = 'x'", "agents.a.client_tools[0].name is"),
        ("[agents.a.response_format]\nname = 'x'", "agents.a.response_format.json_schema is"),
    ],
)
def test_a_bad_field_is_named_with_its_file(table: str, error: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f"[agents.a]\n{table}\n")
    with pytest.raises(AgentFileError) as info:
        read_agent_files([path])
    assert str(info.value).startswith(f"{path}: {error}")


def test_a_file_without_agents_or_not_toml_is_refused(tmp_path: Path) -> None:
    empty, broken = tmp_path / "empty.toml", tmp_path / "broken.toml"
    empty.write_text('listen = "127.0.0.1:50051"\n')
    broken.write_text("[agents.a\n")
    with pytest.raises(AgentFileError, match=r"empty\.toml: no \[agents\.NAME\] table"):
        read_agent_files([empty])
    with pytest.raises(AgentFileError, match=r"broken\.toml: not valid TOML"):
        read_agent_files([broken])
    with pytest.raises(AgentFileError, match=r"missing\.toml: "):
        read_agent_files([tmp_path / "missing.toml"])


def test_an_agent_in_two_files_is_refused(tmp_path: Path) -> None:
    first, second = tmp_path / "one.toml", tmp_path / "two.toml"
    first.write_text("[agents.a]\nmodel = 'echo'\n[agents.b]\n")
    second.write_text("[agents.a]\nmodel = 'script'\n")
    with pytest.raises(AgentFileError) as info:
        read_agent_files([first, second])
    assert str(info.value) == f"{second}: agent 'a' is also defined in {first}"


def test_a_settings_file_gives_its_agents_and_the_rest_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "behest.toml"
    path.write_text(
        'listen = "127.0.0.1:50051"\n[providers.local]\ntype = "local"\n'
        '[agents.support]\nmodel = "echo"\nprovider = "local"\n'
    )
    [agent] = read_agent_files([path])
    assert (agent.name, agent.source) == ("support", str(path))
    assert agent.definition == AgentDefinition(provider="local", model="echo")


def test_agents_are_applied_after_the_agents_they_name() -> None:
    def agent(name: str, *handoffs: str, sub_agents: tuple[str, ...] = ()) -> AgentFile:
        return AgentFile(name, AgentDefinition(handoffs=handoffs, sub_agents=sub_agents), "f")

    files = [
        agent("triage", "billing", "sales"),
        agent("billing", "triage"),  # a circle: triage ↔ billing
        agent("sales", sub_agents=("lookup", "elsewhere")),
        agent("lookup"),
    ]
    order = [(a.name, sorted(ahead)) for a, ahead in apply_order(files)]
    assert order == [
        ("billing", ["triage"]),
        ("lookup", []),
        ("sales", []),
        ("triage", []),
    ]


def test_a_settings_tables_tenant_is_refused_by_apply(tmp_path: Path) -> None:
    path = tmp_path / "behest.toml"
    path.write_text('[agents.support]\ntenant = "acme"\nmodel = "echo"\n')
    with pytest.raises(AgentFileError, match=r"agents\.support\.tenant is for the server's"):
        read_agent_files([path])
