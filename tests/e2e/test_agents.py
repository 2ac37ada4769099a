"""Agents as versioned resources (issue 27), through a real server on SQLite and PostgreSQL:
created, run by name, changed into version 2, aliased back to 1 — each run uses the version
it resolved at its start; a run's own fields override the agent's; unknown references are
NOT_FOUND, bad definitions INVALID_ARGUMENT naming the field and writing nothing."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import agent_pb2 as apb
from behest._proto.agent.v1 import agent_pb2_grpc as agent_rpc
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest.errors import InvalidArgument
from tests.support import (
    Server,
    collect,
    fast_settings,
    kind,
    script,
    server_process,
    start_server,
    stop_server,
)
from tests.web_support import ALICE, BOB, bearer, inspector_settings


def unique(prefix: str) -> str:
    """A name no other test uses (PostgreSQL's test database is shared)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def definition(instructions: str, **fields: object) -> apb.AgentDefinition:
    values: dict[str, object] = {"provider": "local", "model": "script", **fields}
    return apb.AgentDefinition(
        description=f"says {instructions}",
        instructions=instructions,
        **values,  # type: ignore[arg-type]
    )


def of_agent(agent: str, *steps: dict[str, object], **fields: object) -> pb.CreateRunRequest:
    """A run of `agent` whose script model plays `steps`."""
    return pb.CreateRunRequest(agent=agent, input=script(*steps), **fields)  # type: ignore[arg-type]


def text(events: list[pb.AgentEvent]) -> str:
    return "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")


def agents_of(server: Server) -> agent_rpc.AgentServiceStub:
    return agent_rpc.AgentServiceStub(server.channel)


SAY_INSTRUCTIONS = {"say": "instructions"}


async def test_each_run_uses_the_version_it_resolved_at_its_start(served: Server) -> None:
    agents, name = agents_of(served), unique("support")
    created = await agents.CreateAgent(
        apb.CreateAgentRequest(name=name, definition=definition("v1"))
    )
    assert (created.agent.latest_version, created.version.version) == (1, 1)
    first = await collect(served.runs.CreateRunStream(of_agent(name, SAY_INSTRUCTIONS)))
    assert text(first) == "v1"
    assert (first[0].run_started.agent_name, first[0].run_started.agent_version) == (name, 1)
    model_started = next(e.model_started for e in first if kind(e) == "model_started")
    assert (model_started.agent_name, model_started.agent_version) == (name, 1)

    changed = await agents.UpdateAgent(
        apb.UpdateAgentRequest(name=name, definition=definition("v2"))
    )
    assert changed.changed and changed.version.version == 2
    again = await agents.UpdateAgent(apb.UpdateAgentRequest(name=name, definition=definition("v2")))
    assert not again.changed and again.version.version == 2 and again.agent.latest_version == 2
    second = await collect(served.runs.CreateRunStream(of_agent(name, SAY_INSTRUCTIONS)))
    assert text(second) == "v2"

    await agents.SetAgentAlias(apb.SetAgentAliasRequest(name=name, alias="production", version=2))
    moved = await agents.SetAgentAlias(
        apb.SetAgentAliasRequest(name=name, alias="production", version=1)
    )
    assert dict(moved.agent.aliases) == {"production": 1}
    third = await collect(
        served.runs.CreateRunStream(of_agent(f"{name}@production", SAY_INSTRUCTIONS))
    )
    pinned = await collect(served.runs.CreateRunStream(of_agent(f"{name}@2", SAY_INSTRUCTIONS)))
    assert (text(third), text(pinned)) == ("v1", "v2")

    records = [
        (await served.runs.GetRun(pb.GetRunRequest(run_id=events[0].run_id))).run
        for events in (first, second, third)
    ]
    assert [(r.agent_name, r.agent_version) for r in records] == [(name, 1), (name, 2), (name, 1)]
    assert [r.instructions for r in records] == ["v1", "v2", "v1"]
    listed = await served.runs.ListRuns(pb.ListRunsRequest(agent=name, agent_version=1))
    assert {r.id for r in listed.runs} == {first[0].run_id, third[0].run_id}
    versions = await agents.ListAgentVersions(apb.ListAgentVersionsRequest(name=name))
    assert [v.version for v in versions.versions] == [2, 1]
    assert [v.definition.instructions for v in versions.versions] == ["v2", "v1"]
    got = await agents.GetAgent(apb.GetAgentRequest(agent=f"{name}@production"))
    assert got.version.version == 1 and got.version.definition == definition(
        "v1", tool_choice="auto"
    )


async def test_a_runs_own_fields_override_the_agents_and_are_recorded(served: Server) -> None:
    agents, name = agents_of(served), unique("override")
    await agents.CreateAgent(
        apb.CreateAgentRequest(name=name, definition=definition("mine", tools=["calculator"]))
    )
    events = await collect(
        served.runs.CreateRunStream(
            of_agent(name, {"say": "tools"}, instructions="the run's own", tools=["current_time"])
        )
    )
    assert text(events).startswith("tools: current_time ")
    record = (await served.runs.GetRun(pb.GetRunRequest(run_id=events[0].run_id))).run
    assert (record.instructions, list(record.tools)) == ("the run's own", ["current_time"])
    assert (record.agent_name, record.agent_version, record.model.value) == (name, 1, "script")


async def test_unknown_references_are_not_found_and_bad_definitions_write_nothing(
    served: Server,
) -> None:
    agents, name = agents_of(served), unique("strict")
    await agents.CreateAgent(apb.CreateAgentRequest(name=name, definition=definition("x")))
    for ref in (unique("nobody"), f"{name}@7", f"{name}@staging"):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await served.runs.CreateRun(of_agent(ref, SAY_INSTRUCTIONS))
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND, ref
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await agents.GetAgent(apb.GetAgentRequest(agent=ref))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    bad_name = unique("bad")
    cases = {
        "definition.model": definition("x", model="no-such-model"),
        "definition.tools": definition("x", tools=["no_such_tool"]),
        "definition.handoffs[0]": definition("x", handoffs=[unique("ghost")]),
        "definition.sub_agents[0]": definition("x", sub_agents=["calculator"]),
        "definition.budget.max_cost": definition("x", budget=pb.RunBudget(max_cost="lots")),
    }
    for field, bad in cases.items():
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await agents.CreateAgent(apb.CreateAgentRequest(name=bad_name, definition=bad))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in (refused.value.details() or ""), refused.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as nothing:
        await agents.GetAgent(apb.GetAgentRequest(agent=bad_name))
    assert nothing.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as taken:
        await agents.CreateAgent(apb.CreateAgentRequest(name=name, definition=definition("y")))
    assert taken.value.code() == grpc.StatusCode.ALREADY_EXISTS
    still = await agents.GetAgent(apb.GetAgentRequest(agent=name))
    assert still.agent.latest_version == 1


async def test_an_archived_agent_starts_no_run_and_keeps_its_versions(served: Server) -> None:
    agents, name = agents_of(served), unique("old")
    await agents.CreateAgent(apb.CreateAgentRequest(name=name, definition=definition("x")))
    archived = await agents.ArchiveAgent(apb.ArchiveAgentRequest(name=name))
    assert archived.agent.archived
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await served.runs.CreateRun(of_agent(name, SAY_INSTRUCTIONS))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "archived" in (refused.value.details() or "")
    got = await agents.GetAgent(apb.GetAgentRequest(agent=f"{name}@1"))
    assert got.version.definition.instructions == "x"
    listed = await agents.ListAgents(apb.ListAgentsRequest())
    assert name not in {a.name for a in listed.agents}
    everything = await agents.ListAgents(apb.ListAgentsRequest(include_archived=True))
    assert name in {a.name for a in everything.agents}


async def test_another_tenants_agent_is_not_found(tmp_path: Path) -> None:
    server = await start_server(inspector_settings(tmp_path))
    try:
        agents = agents_of(server)
        await agents.CreateAgent(
            apb.CreateAgentRequest(name="acme-only", definition=definition("x")),
            metadata=bearer(ALICE),
        )
        with pytest.raises(grpc.aio.AioRpcError) as hidden:
            await agents.GetAgent(apb.GetAgentRequest(agent="acme-only"), metadata=bearer(BOB))
        assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await server.runs.CreateRun(
                of_agent("acme-only", SAY_INSTRUCTIONS), metadata=bearer(BOB)
            )
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        # Bob's tenant may have its own agent of that name.
        await agents.CreateAgent(
            apb.CreateAgentRequest(name="acme-only", definition=definition("globex's")),
            metadata=bearer(BOB),
        )
        mine = await agents.GetAgent(apb.GetAgentRequest(agent="acme-only"), metadata=bearer(ALICE))
        assert mine.version.definition.instructions == "x"
    finally:
        await stop_server(server)


async def test_a_named_sub_agent_is_a_tool_whose_call_is_a_child_run(served: Server) -> None:
    agents = agents_of(served)
    researcher, lead = unique("researcher"), unique("lead")
    await agents.CreateAgent(
        apb.CreateAgentRequest(name=researcher, definition=definition("I research"))
    )
    await agents.CreateAgent(
        apb.CreateAgentRequest(name=lead, definition=definition("I lead", sub_agents=[researcher]))
    )
    call = {"name": researcher, "arguments": {"input": script(SAY_INSTRUCTIONS)}}
    events = await collect(
        served.runs.CreateRunStream(
            of_agent(lead, {"say": "tools"}),
        )
    )
    assert f", {researcher} (choice: auto)" in text(events)
    events = await collect(
        served.runs.CreateRunStream(of_agent(lead, {"tool_calls": [call]}, {"say": "tool_results"}))
    )
    assert kind(events[-1]) == "run_completed"
    assert text(events) == f"{researcher}: I research"
    started = next(e.sub_run_started for e in events if kind(e) == "sub_run_started")
    child = (await served.runs.GetRun(pb.GetRunRequest(run_id=started.child_run_id))).run
    assert (child.agent_name, child.agent_version, child.parent_run_id) == (
        researcher,
        1,
        events[0].run_id,
    )
    assert child.instructions == "I research"


async def test_a_handoff_moves_the_run_to_the_target_agent(served: Server) -> None:
    agents = agents_of(served)
    billing, triage = unique("billing"), unique("triage")
    await agents.CreateAgent(
        apb.CreateAgentRequest(
            name=billing, definition=definition("billing here", tools=["calculator"])
        )
    )
    await agents.CreateAgent(
        apb.CreateAgentRequest(
            name=triage,
            definition=definition("triage here", tools=["current_time"], handoffs=[billing]),
        )
    )
    transfer = {"name": f"transfer_to_{billing}", "arguments": {"reason": "a refund"}}
    events = await collect(
        served.runs.CreateRunStream(of_agent(triage, {"tool_calls": [transfer]}, SAY_INSTRUCTIONS))
    )
    assert kind(events[-1]) == "run_completed"
    assert text(events) == "billing here"
    handoff = next(e.handoff for e in events if kind(e) == "handoff")
    assert (handoff.from_agent, handoff.to_agent, handoff.reason) == (triage, billing, "a refund")
    callers = [e.model_started.agent_name for e in events if kind(e) == "model_started"]
    assert callers == [triage, billing]
    record = (await served.runs.GetRun(pb.GetRunRequest(run_id=events[0].run_id))).run
    assert (record.agent_name, record.current_agent, record.current_agent_version) == (
        triage,
        billing,
        1,
    )
    # The target's tools from the next model call on, in the same session.
    tools = await collect(
        served.runs.CreateRunStream(of_agent(triage, {"tool_calls": [transfer]}, {"say": "tools"}))
    )
    assert text(tools).startswith("tools: calculator ")
    assert tools[0].run_started.session_id != events[0].run_started.session_id


async def test_a_transfer_to_an_agent_not_in_the_definition_is_a_tool_error(
    served: Server,
) -> None:
    agents, name = agents_of(served), unique("closed")
    await agents.CreateAgent(apb.CreateAgentRequest(name=name, definition=definition("alone")))
    transfer = {"name": "transfer_to_anyone", "arguments": {}}
    events = await collect(
        served.runs.CreateRunStream(
            of_agent(name, {"tool_calls": [transfer]}, {"say": "tool_results"})
        )
    )
    assert kind(events[-1]) == "run_completed"
    assert "transfer_to_anyone: error:" in text(events)
    assert not [e for e in events if kind(e) == "handoff"]


async def test_a_run_resumed_after_kill_9_keeps_its_agents_versions(tmp_path: Path) -> None:
    """Handed off to billing@1, killed while billing answers; billing and the alias change
    before it resumes: it goes on under billing@1, as its handoff and pins said."""
    transfer = {"name": "transfer_to_billing", "arguments": {"reason": "money"}}
    steps = [{"tool_calls": [transfer]}, {"deltas": 300, "delay_ms": 10}, SAY_INSTRUCTIONS]
    async with server_process(tmp_path) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            agents = agent_rpc.AgentServiceStub(channel)
            await agents.CreateAgent(
                apb.CreateAgentRequest(name="billing", definition=definition("billing v1"))
            )
            await agents.CreateAgent(
                apb.CreateAgentRequest(
                    name="triage", definition=definition("triage v1", handoffs=["billing"])
                )
            )
            await agents.SetAgentAlias(
                apb.SetAgentAliasRequest(name="triage", alias="production", version=1)
            )
            stream = rpc.RunServiceStub(channel).CreateRunStream(
                of_agent("triage@production", *steps)
            )
            seen: list[pb.AgentEvent] = []
            async for event in stream:
                seen.append(event)
                if kind(event) == "text_delta":
                    break  # billing is answering
            process.send_signal(signal.SIGKILL)
            await process.wait()
    assert [kind(e) for e in seen].count("handoff") == 1
    run_id = seen[0].run_id
    async with server_process(tmp_path) as (_, address):
        async with grpc.aio.insecure_channel(address) as channel:
            agents = agent_rpc.AgentServiceStub(channel)
            for name in ("billing", "triage"):
                await agents.UpdateAgent(
                    apb.UpdateAgentRequest(name=name, definition=definition(f"{name} v2"))
                )
            await agents.SetAgentAlias(
                apb.SetAgentAliasRequest(name="triage", alias="production", version=2)
            )
            runs = rpc.RunServiceStub(channel)
            async with asyncio.timeout(30):
                log = await collect(runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))
            record = (await runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    kinds = [kind(e) for e in log]
    assert kinds[-1] == "run_completed" and kinds.count("handoff") == 1, kinds
    assert text(log).endswith("billing v1")
    calls = [
        (e.model_started.agent_name, e.model_started.agent_version)
        for e in log
        if kind(e) == "model_started"
    ]
    assert calls == [("triage", 1), ("billing", 1), ("billing", 1)]
    assert (record.agent_name, record.agent_version) == ("triage", 1)
    assert (record.current_agent, record.current_agent_version) == ("billing", 1)


SETTINGS_AGENTS = {
    "agents": {
        # Named before the agent it hands off to: applied in an order that works.
        "triage": {
            "instructions": "triage from settings",
            "provider": "local",
            "model": "script",
            "handoffs": ["billing"],
        },
        "billing": {
            "description": "money",
            "instructions": "billing from settings",
            "provider": "local",
            "model": "script",
            "handoffs": ["triage"],  # a circle: both are created, then given their names
            "budget": {"max_tokens": 5000},
        },
    }
}


async def test_the_settings_agents_are_applied_at_every_start(tmp_path: Path) -> None:
    settings = fast_settings(tmp_path).with_tables(SETTINGS_AGENTS, source="tests")
    for _ in range(2):  # the second start finds them unchanged: no new version
        server = await start_server(settings)
        try:
            agents = agents_of(server)
            got = await agents.GetAgent(apb.GetAgentRequest(agent="billing"))
            triage = await agents.GetAgent(apb.GetAgentRequest(agent="triage"))
            events = await collect(
                server.runs.CreateRunStream(of_agent("billing", SAY_INSTRUCTIONS))
            )
        finally:
            await stop_server(server)
        assert got.version.created_by == "settings"
        assert got.agent.latest_version + triage.agent.latest_version == 3  # one made twice
        assert got.version.definition.budget.max_tokens == 5000
        assert list(triage.version.definition.handoffs) == ["billing"]
        assert text(events) == "billing from settings"


async def test_a_bad_settings_agent_stops_the_start_naming_it(tmp_path: Path) -> None:
    bad = {"agents": {"broken": {"provider": "local", "model": "script", "tools": ["nope"]}}}
    settings = fast_settings(tmp_path).with_tables(bad, source="tests")
    with pytest.raises(InvalidArgument, match=r"setting 'agents.broken': definition.tools"):
        await start_server(settings)
