"""Agents in the store (store/sql/agents.py through runs/agents.py), on both backends:
versions counted from 1, a definition equal to the latest makes none, every field read back
as written, aliases moved in one step, archive, concurrent changes each a version of their
own, and a run's pins resolved through sub-agents and handoffs."""

from __future__ import annotations

import asyncio
import uuid
from decimal import Decimal

import pytest

from behest.domain.agents import AgentDefinition, AgentRef
from behest.domain.callers import Caller
from behest.domain.output import ResponseFormat
from behest.domain.runs import Reasoning
from behest.domain.spend import RunBudget
from behest.domain.waits import ClientTool, WaitOptions
from behest.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from behest.runs.agents import AgentCatalog
from behest.store.sql.store import SqlStore
from tests.store.conftest import OpenStore


def caller() -> Caller:
    """A tenant of its own: PostgreSQL's test database is shared."""
    return Caller(principal="alice", tenant=f"t-{uuid.uuid4().hex[:8]}")


def catalog(store: SqlStore) -> AgentCatalog:
    return AgentCatalog(store, tool_names=lambda tenant: ["calculator"])


FULL = AgentDefinition(
    description="answers ✓",
    instructions="be kind\nand brief",
    provider="local",
    model="script",
    tools=("calculator",),
    tool_choice="required",
    waits=WaitOptions(
        client_tools=(
            ClientTool(
                name="ask",
                description="ask the user",
                parameters_schema={"type": "object", "properties": {"q": {"type": "string"}}},
            ),
        ),
        approval_required_tools=("calculator",),
        approve_side_effects=True,
        approval_timeout_s=60,
        client_tool_timeout_s=30,
    ),
    budget=RunBudget(max_tokens=1000, max_cost=Decimal("0.50")),
    response_format=ResponseFormat("answer", {"type": "object"}),
    reasoning=Reasoning("low", 0),
    max_iterations=5,
    metadata='{"team":"support"}',
    allow_sub_agents=True,
)


async def test_every_field_is_read_back_and_an_equal_definition_makes_no_version(
    store: SqlStore,
) -> None:
    agents, who = catalog(store), caller()
    agent, first = await agents.create(who, "support", FULL)
    assert (agent.latest_version, first.version, first.created_by) == (1, 1, "alice")
    _, read = await agents.get(who, AgentRef("support"))
    assert read.definition == FULL
    _, same, changed = await agents.update(who, "support", FULL, allow_missing=False)
    assert (same.version, changed) == (1, False)
    other = AgentDefinition(provider="local", model="script", instructions="v2")
    agent, second, changed = await agents.update(who, "support", other, allow_missing=False)
    assert (agent.latest_version, second.version, changed) == (2, 2, True)
    versions = await agents.versions(who, "support", limit=10, offset=0)
    assert [v.definition for v in versions] == [other, FULL]


async def test_create_update_and_upsert_say_what_exists(store: SqlStore) -> None:
    agents, who = catalog(store), caller()
    plain = AgentDefinition(provider="local", model="script")
    with pytest.raises(NotFound):
        await agents.update(who, "nobody", plain, allow_missing=False)
    _, made, changed = await agents.update(who, "nobody", plain, allow_missing=True)
    assert (made.version, changed) == (1, True)
    with pytest.raises(AlreadyExists):
        await agents.create(who, "nobody", plain)
    await agents.archive(who, "nobody")
    with pytest.raises(FailedPrecondition):
        await agents.update(who, "nobody", FULL, allow_missing=True)
    with pytest.raises(FailedPrecondition):
        await agents.resolve(who, AgentRef("nobody"))


async def test_an_alias_moves_in_one_step_and_other_tenants_see_nothing(
    store: SqlStore,
) -> None:
    agents, who = catalog(store), caller()
    plain = AgentDefinition(provider="local", model="script")
    await agents.create(who, "a", plain)
    await agents.update(who, "a", FULL, allow_missing=False)
    assert (await agents.set_alias(who, "a", "prod", 2)).aliases == {"prod": 2}
    assert (await agents.set_alias(who, "a", "prod", 1)).aliases == {"prod": 1}
    _, version = await agents.get(who, AgentRef("a", alias="prod"))
    assert version.definition == plain
    with pytest.raises(NotFound):
        await agents.set_alias(who, "a", "prod", 3)
    assert (await agents.set_alias(who, "a", "prod", 0)).aliases == {}
    with pytest.raises(NotFound):
        await agents.get(who, AgentRef("a", alias="prod"))
    with pytest.raises(NotFound):
        await agents.get(caller(), AgentRef("a"))
    assert await agents.list(caller(), limit=10, offset=0) == []


async def test_concurrent_changes_each_make_a_version(open_store: OpenStore) -> None:
    first, second = await open_store(), await open_store()
    who = caller()
    await catalog(first).create(who, "busy", AgentDefinition(provider="local", model="script"))
    changes = [
        catalog(store).update(
            who,
            "busy",
            AgentDefinition(provider="local", model="script", instructions=str(i)),
            allow_missing=False,
        )
        for i, store in enumerate([first, second] * 4)
    ]
    made = await asyncio.gather(*changes)
    assert sorted(version.version for _, version, _ in made) == list(range(2, 10))


async def test_a_runs_pins_reach_through_sub_agents_and_handoffs(store: SqlStore) -> None:
    agents, who = catalog(store), caller()
    plain = AgentDefinition(provider="local", model="script")
    await agents.create(who, "leaf", plain)
    await agents.update(who, "leaf", FULL, allow_missing=False)
    await agents.create(
        who, "mid", AgentDefinition(provider="local", model="script", handoffs=("leaf",))
    )
    top = AgentDefinition(provider="local", model="script", sub_agents=("mid",))
    await agents.create(who, "top", top)
    version, pins = await agents.resolve(who, AgentRef("top"))
    assert version.version == 1
    assert pins.pins == (("leaf", 2), ("mid", 1), ("top", 1))
    with pytest.raises(
        InvalidArgument, match=r"sub_agents\[0\]: 'calculator' is the name of a tool"
    ):
        await agents.create(who, "bad", AgentDefinition(sub_agents=("calculator",)))
    with pytest.raises(InvalidArgument, match="cannot hand off to itself"):
        await agents.create(who, "self", AgentDefinition(handoffs=("self",)))
