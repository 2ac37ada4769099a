"""The `behest agents` commands and `behest run --agent`, run as child processes (`python -m
behest`) against a real server: apply twice makes one version, export → apply into a fresh
server reproduces every definition exactly, a run of an agent by name (with a handoff), and
what versions, alias, archive and get print."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from behest._proto.agent.v1 import agent_pb2 as apb
from behest._proto.agent.v1 import agent_pb2_grpc as agent_rpc
from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from tests.support import Server, behest, fast_settings, script, start_server, stop_server

# A local provider with prices, so that a definition may hold a cost budget.
PRICES = {"input_price": "1.25", "output_price": "10"}
PRICED = {"providers": {"priced": {"type": "local", "models": {"script": PRICES}}}}
AGENTS = """\
[agents.support]
description = "Answers customers"
instructions = '''You are support.
Be brief.'''
provider = "local"
model = "script"
handoffs = ["billing"]

[agents.billing]
description = "Billing questions"
instructions = "You are billing."
provider = "local"
model = "script"
"""
SCHEMA = json.dumps(
    {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    indent=2,
)


@pytest.fixture
async def priced(tmp_path: Path) -> AsyncIterator[Server]:
    settings = fast_settings(tmp_path / "priced").with_tables(PRICED, source="test")
    server = await start_server(settings)
    try:
        yield server
    finally:
        await stop_server(server)


def agents_of(server: Server) -> agent_rpc.AgentServiceStub:
    return agent_rpc.AgentServiceStub(server.channel)


async def cli(server: Server, *args: str) -> str:
    """`behest ARGS --server …`'s stdout; it must succeed."""
    done = await behest(*args, "--server", server.address)
    assert done.code == 0, done.err
    return done.out


async def test_apply_twice_makes_one_version(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(AGENTS)
    # billing first: support hands off to it, so it must exist before support.
    assert (await cli(server, "agents", "apply", str(path))).splitlines() == [
        "created billing (version 1)",
        "created support (version 1)",
    ]
    assert (await cli(server, "agents", "apply", str(path))).splitlines() == [
        "billing: unchanged (version 1)",
        "support: unchanged (version 1)",
    ]
    path.write_text(AGENTS.replace("Be brief.", "Be brief and kind."))
    assert (await cli(server, "agents", "apply", str(path))).splitlines() == [
        "billing: unchanged (version 1)",
        "support: version 2",
    ]
    rows = (await cli(server, "agents", "versions", "support")).splitlines()
    assert rows[0].split() == ["VERSION", "CREATED", "BY", "ALIASES", "DESCRIPTION"]
    assert [row.split()[0] for row in rows[1:]] == ["2", "1"]

    bad = tmp_path / "bad.toml"
    bad.write_text('[agents.other]\nprovider = "local"\nmodel = "no-such-model"\n')
    refused = await behest("agents", "apply", str(bad), "--server", server.address)
    assert refused.code == 2
    assert refused.error.startswith(f"error: other ({bad}): INVALID_ARGUMENT: definition.model")


def full_definition(**fields: object) -> apb.AgentDefinition:
    """A definition with every kind of field set."""
    return apb.AgentDefinition(
        description="Answers customers' questions",
        instructions='You are "support".\nBe brief; use the calculator for sums.\n\n\tThanks!\n',
        provider="priced",
        model="script",
        tools=["calculator", "current_time"],
        client_tools=[
            c.ToolSpec(name="confirm", description="Asks the user", parameters_schema=SCHEMA)
        ],
        tool_choice="required",
        approval_required_tools=["calculator"],
        approval_timeout_s=600,
        client_tool_timeout_s=30,
        budget=pb.RunBudget(
            max_tokens=20_000, max_tool_calls=8, max_wall_seconds=120, max_cost="0.50"
        ),
        response_format=pb.ResponseFormat(name="answer", json_schema=SCHEMA),
        max_iterations=6,
        metadata='{"team": "care", "tier": 2}',
        allow_sub_agents=True,
        **fields,  # type: ignore[arg-type]
    )


async def test_export_then_apply_into_a_fresh_server_reproduces_every_definition(
    priced: Server, tmp_path: Path
) -> None:
    stub = agents_of(priced)
    # triage and support hand off to each other (a circle), and support calls billing.
    await stub.CreateAgent(apb.CreateAgentRequest(name="billing", definition=full_definition()))
    triage = apb.AgentDefinition(provider="local", model="echo")
    await stub.CreateAgent(apb.CreateAgentRequest(name="triage", definition=triage))
    await stub.CreateAgent(
        apb.CreateAgentRequest(
            name="support",
            definition=full_definition(sub_agents=["billing"], handoffs=["triage"]),
        )
    )
    triage.handoffs.append("support")
    await stub.UpdateAgent(apb.UpdateAgentRequest(name="triage", definition=triage))

    exported = await cli(priced, "agents", "export", "--all")
    assert re.findall(r"^\[agents\.(\w+)\] # version (\d)$", exported, re.M) == [
        ("billing", "1"),
        ("support", "1"),
        ("triage", "2"),
    ]
    path = tmp_path / "exported.toml"
    path.write_text(exported)

    fresh = await start_server(fast_settings(tmp_path / "fresh").with_tables(PRICED, source="test"))
    try:
        applied = await cli(fresh, "agents", "apply", str(path))
        assert applied.splitlines() == [
            "created billing (version 1)",
            "created triage (version 1)",  # without its handoff to support, not made yet
            "created support (version 1)",
            "triage: version 2",
        ]
        for name in ("billing", "support", "triage"):
            request = apb.GetAgentRequest(agent=name)
            there = (await agents_of(fresh).GetAgent(request)).version.definition
            assert there == (await stub.GetAgent(request)).version.definition, name
        again = await cli(fresh, "agents", "apply", str(path))
        assert again.splitlines() == [
            "billing: unchanged (version 1)",
            "triage: unchanged (version 2)",
            "support: unchanged (version 1)",
        ]
    finally:
        await stop_server(fresh)
    # Into the server it came from: nothing changed.
    home = await cli(priced, "agents", "apply", str(path))
    assert home.splitlines() == [
        "billing: unchanged (version 1)",
        "triage: unchanged (version 2)",
        "support: unchanged (version 1)",
    ]


async def test_run_of_an_agent_by_name_with_a_handoff(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(AGENTS)
    await cli(server, "agents", "apply", str(path))

    said = await behest(
        "run", "--agent", "support", script({"say": "instructions"}), "--server", server.address
    )
    assert said.code == 0, said.err
    assert said.out.startswith("You are support.\nBe brief.")
    assert re.match(r"run \S+  session \S+  agent support@1\n", said.err), said.err

    transfer = {"name": "transfer_to_billing", "arguments": {"reason": "a refund"}}
    steps = script({"tool_calls": [transfer]}, {"say": "instructions"})
    moved = await behest("run", "--agent", "support@1", steps, "--server", server.address)
    assert moved.code == 0, moved.err
    assert "⇄ handed off from support@1 to billing@1: a refund\n" in moved.out
    assert "\nYou are billing." in moved.out
    run_id = re.match(r"run (\S+)", moved.err).group(1)  # type: ignore[union-attr]

    shown = await cli(server, "runs", "get", run_id)
    assert re.search(r"^agent +support@1 \(now billing@1\)$", shown, re.M), shown
    listed = (await cli(server, "runs", "list", "--agent", "support@1")).splitlines()
    assert listed[0].split() == ["RUN", "STATUS", "MODEL", "CREATED", "AGENT", "SESSION"]
    assert [row.split()[0] for row in listed[1:]] == [run_id, re.split(r"\s+", listed[2])[0]]
    assert (await cli(server, "runs", "list", "--agent", "billing")) == "no runs\n"

    overridden = await behest(
        "run", "--agent", "support", "--model", "echo", "hello there", "--server", server.address
    )
    assert overridden.code == 0, overridden.err
    assert overridden.out.startswith("hello there")  # the run's model, the agent's rest

    unknown = await behest("run", "--agent", "support@prod", "hi", "--server", server.address)
    assert unknown.code == 2
    assert unknown.error.startswith("error: NOT_FOUND: ")


async def test_versions_alias_archive_and_get_print_what_they_did(
    server: Server, tmp_path: Path
) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(AGENTS)
    await cli(server, "agents", "apply", str(path))
    path.write_text(AGENTS.replace("Be brief.", "Be brief and kind."))
    await cli(server, "agents", "apply", str(path))

    assert await cli(server, "agents", "alias", "support", "production", "1") == (
        "support: production → version 1\n"
    )
    got = await cli(server, "agents", "get", "support@production")
    head, definition = got.split("\n\n", 1)
    assert head.splitlines()[:3] == [
        "agent    support",
        "version  1 of 2",
        "aliases  production → 1",
    ]
    assert definition.startswith("[agents.support]\ndescription = ")
    assert "instructions = '''You are support.\nBe brief.'''" in definition
    assert (await cli(server, "agents", "get", "support")).splitlines()[1] == (
        "version  2 (the latest) of 2"
    )
    lines = (await cli(server, "agents", "get", "support", "--json")).splitlines()
    assert json.loads(lines[0])["version"]["version"] == 2

    rows = (await cli(server, "agents", "versions", "support")).splitlines()
    assert [row.split()[0] for row in rows[1:]] == ["2", "1"]
    assert "production" in rows[2] and "production" not in rows[1]

    listed = (await cli(server, "agents", "list")).splitlines()
    assert listed[0].split() == ["AGENT", "LATEST", "ALIASES", "UPDATED", "DESCRIPTION"]
    assert [row.split()[:2] for row in listed[1:]] == [["billing", "1"], ["support", "2"]]
    assert "production → 1" in listed[2]

    assert await cli(server, "agents", "alias", "support", "production", "0") == (
        "support: alias production removed\n"
    )
    archived = await cli(server, "agents", "archive", "support")
    assert archived == "archived support (its runs go on; no new run of it starts)\n"
    assert [r.split()[0] for r in (await cli(server, "agents", "list")).splitlines()[1:]] == [
        "billing"
    ]
    every = (await cli(server, "agents", "list", "--archived")).splitlines()
    assert every[2].startswith("support (archived)")
    refused = await behest("run", "--agent", "support", "hi", "--server", server.address)
    assert refused.code == 2
    assert refused.error.startswith("error: FAILED_PRECONDITION: ")
    missing = await behest("agents", "get", "nobody", "--server", server.address)
    assert missing.code == 2 and missing.error.startswith("error: NOT_FOUND: ")


async def test_an_exported_file_is_the_settings_agents_of_another_server(
    priced: Server, tmp_path: Path
) -> None:
    stub = agents_of(priced)
    await stub.CreateAgent(apb.CreateAgentRequest(name="billing", definition=full_definition()))
    support = full_definition(sub_agents=["billing"], handoffs=["billing"])
    await stub.CreateAgent(apb.CreateAgentRequest(name="support", definition=support))
    exported = tomllib.loads(await cli(priced, "agents", "export", "support", "billing"))

    tables = {**PRICED, "agents": exported["agents"]}
    configured = await start_server(fast_settings(tmp_path / "b").with_tables(tables, source="t"))
    try:
        for name in ("billing", "support"):
            request = apb.GetAgentRequest(agent=name)
            there = (await agents_of(configured).GetAgent(request)).version
            assert there.created_by == "settings"
            assert there.definition == (await stub.GetAgent(request)).version.definition, name
    finally:
        await stop_server(configured)
