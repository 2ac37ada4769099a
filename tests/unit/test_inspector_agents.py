"""The inspector's agents pages without a server: versions side by side (which cells changed),
the runs form's agent filter, a run's agent after a handoff, and the pages rendered from a
stand-in for `Operations` (escaped, linked, another tenant's agent a 404)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from starlette.requests import Request

from behest.api.auth import Authenticator
from behest.config import AuthSettings, TlsSettings
from behest.domain import events as ev
from behest.domain.agents import Agent, AgentDefinition, AgentRef, AgentVersion
from behest.domain.callers import Caller
from behest.domain.runs import Run, RunAgent, RunFilter, RunStatus
from behest.domain.waits import WaitOptions
from behest.errors import InvalidArgument, NotFound
from behest.web import agent_views, views
from behest.web.agent_pages import AgentPages
from behest.web.auth import COOKIE, Gate
from behest.web.listing import RunsForm
from behest.web.pages import Pages
from behest.web.rendering import Renderer

T0 = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
PLANT = "<script>window.__pwned = 1</script>"


def version(number: int, **fields: Any) -> AgentVersion:
    base = AgentDefinition(
        description="answers support questions",
        instructions="Be brief.",
        provider="local",
        model="script",
        tools=("calculator",),
    )
    return AgentVersion(
        name="support",
        version=number,
        definition=replace(base, **fields),
        created_at=T0 + timedelta(minutes=number),
        created_by="alice",
    )


V1 = version(1)
V2 = version(2, instructions=f"Be kind. {PLANT}")
V3 = version(3, instructions=f"Be kind. {PLANT}", model="echo", handoffs=("billing",))


def cells(table: agent_views.Comparison, field: str) -> list[tuple[str, bool]]:
    row = next(r for r in table.rows if r.field == field)
    return [(c.text, c.changed) for c in row.cells]


def test_versions_side_by_side_mark_what_changed_from_the_version_before() -> None:
    table = agent_views.compare([V3, V2, V1])
    assert [v.version for v in table.versions] == [3, 2, 1]
    assert cells(table, "instructions") == [
        (f"Be kind. {PLANT}", False),
        (f"Be kind. {PLANT}", True),
        ("Be brief.", False),  # the first version: nothing before it
    ]
    assert cells(table, "model") == [("echo", True), ("script", False), ("script", False)]
    assert cells(table, "tools") == [("calculator", False)] * 3
    handoffs = next(r for r in table.rows if r.field == "handoffs")
    assert handoffs.changed and handoffs.cells[0].agents == ("billing",)
    assert not next(r for r in table.rows if r.field == "provider").changed
    assert [r.field for r in table.rows] == [field for field, _ in agent_views.FIELDS]


def test_the_oldest_version_shown_is_compared_with_the_one_before_it() -> None:
    assert cells(agent_views.compare([V3, V2], before=V1), "instructions")[1][1] is True
    assert cells(agent_views.compare([V2]), "instructions") == [(f"Be kind. {PLANT}", False)]


def test_every_field_of_a_definition_is_a_row_in_plain_text() -> None:
    waits = WaitOptions(approval_required_tools=("calculator",), approve_side_effects=True)
    full = version(4, waits=waits, max_iterations=7, metadata='{"team":"a"}', sub_agents=("x",))
    texts = dict(cells(agent_views.compare([full, V3]), f)[0] for f in ("max iterations",))
    assert texts == {"7": True}
    table = agent_views.compare([full])
    assert cells(table, "approval required") == [("calculator", False)]
    assert cells(table, "approve side effects") == [("yes", False)]
    assert cells(table, "metadata") == [('{\n  "team": "a"\n}', False)]
    assert cells(table, "response format") == [("—", False)]
    long = agent_views.compare([version(5, instructions="x" * 10_000)])
    assert cells(long, "instructions")[0][0].endswith("(6000 more characters)")


def test_aliases_by_version() -> None:
    assert agent_views.aliases_of({"prod": 1, "canary": 3, "beta": 1}) == {
        1: ["beta", "prod"],
        3: ["canary"],
    }


def run(**fields: Any) -> Run:
    values: dict[str, Any] = {
        "id": "0" * 8 + "-0000-4000-8000-" + "0" * 12,
        "session_id": "1" * 8 + "-0000-4000-8000-" + "0" * 12,
        "status": RunStatus.COMPLETED,
        "provider": "local",
        "model": "script",
        "input": "hi",
        "metadata": "",
        "tool_choice": "auto",
        "created_at": T0,
        "updated_at": T0,
    }
    return Run(**{**values, **fields})


def test_the_agent_a_run_is_under_after_a_handoff() -> None:
    pins = (("billing", 1), ("support", 2))
    assert agent_views.handed_to(run()) is None
    assert agent_views.handed_to(run(agent=RunAgent("support", 2, pins))) is None
    handed = run(agent=RunAgent("support", 2, pins), current_agent="billing")
    assert agent_views.handed_to(handed) == ("billing", 1)
    assert agent_views.handed_to(replace(handed, current_agent="support")) is None


def event(sequence: int, payload: ev.Payload) -> ev.Event:
    return ev.Event(run_id="r-1", sequence=sequence, payload=payload, timestamp=T0)


def test_a_handoff_and_the_agent_of_a_model_call_in_the_timeline() -> None:
    handoff = ev.Handoff("call_1_1", "support", 2, "billing", 1, reason=f"money {PLANT}")
    started = ev.ModelStarted("local", "script", 2, agent_name="billing", agent_version=1)
    events = [event(7, handoff), event(8, started)]
    moved, call = views.timeline(events, views.Context())
    assert (moved.kind, moved.name, moved.title) == ("handoff", "handoff", "handoff")
    assert moved.summary.startswith("⇄ handed off from support@2 to billing@1")
    assert moved.sections == [
        ("from", "support@2"),
        ("to", "billing@1"),
        ("call", "call_1_1"),
        ("reason", f"money {PLANT}"),
    ]
    assert call.sections == [("agent", "billing@1")] and "(billing@1)" in call.summary
    plain = views.item(event(9, ev.ModelStarted("local", "script", 3)), views.Context())
    assert plain.sections == []
    started = ev.RunStarted("s-1", "local", "script", agent_name="support", agent_version=2)
    assert views.item(event(1, started), views.Context()).sections == [("agent", "support@2")]


def test_the_runs_form_filters_by_agent_and_version() -> None:
    form = RunsForm.parse({"agent": " support@3 "})
    assert (form.agent, form.agent_version, form.agent_text) == ("support", 3, "support@3")
    assert form.query() == {"agent": "support@3"}
    assert form.page(limit=5, offset=0) == RunFilter(limit=5, agent="support", agent_version=3)
    assert RunsForm.parse({"agent": "support"}).page(limit=5, offset=0).agent_version == 0
    assert RunsForm.parse({}).page(limit=5, offset=0).agent == ""
    for bad in ("support@production", "sup port", "support@0", "a" * 60):
        with pytest.raises(InvalidArgument, match="agent"):
            RunsForm.parse({"agent": bad})


# --- the pages, from a stand-in for Operations ----------------------------------------------


AGENT = Agent(
    name="support",
    tenant="default",
    latest_version=3,
    created_at=T0,
    updated_at=T0 + timedelta(minutes=3),
    aliases={"production": 1, "canary": 3},
    description=f"helps {PLANT}",
)
RUN_OF = {
    1: run(id="aaaaaaaa-0000-4000-8000-000000000001", agent=RunAgent("support", 1)),
    3: run(
        id="cccccccc-0000-4000-8000-000000000003",
        status=RunStatus.CALLING_MODEL,
        agent=RunAgent("support", 3, (("billing", 2), ("support", 3))),
        current_agent="billing",
    ),
}


class Catalog:
    def __init__(self) -> None:
        self.versions_asked: list[tuple[int, int]] = []

    async def list(
        self, caller: Caller, *, limit: int, offset: int, include_archived: bool = False
    ) -> list[Agent]:
        archived = replace(AGENT, name="retired", archived=True, aliases={})
        return [AGENT, archived] if include_archived else [AGENT]

    async def get(self, caller: Caller, ref: AgentRef) -> tuple[Agent, AgentVersion]:
        if ref.name != "support":
            raise NotFound(f"no agent {ref.name!r}")
        return AGENT, V3

    async def versions(
        self, caller: Caller, name: str, *, limit: int, offset: int
    ) -> list[AgentVersion]:
        self.versions_asked.append((limit, offset))
        return [V3, V2, V1][offset : offset + limit]


class Runs:
    def __init__(self) -> None:
        self.agents = Catalog()
        self.filters: list[RunFilter] = []

    async def list_runs(self, caller: Caller, wanted: RunFilter) -> list[Run]:
        self.filters.append(wanted)
        if not wanted.agent:
            return list(RUN_OF.values())
        found = RUN_OF.get(wanted.agent_version)
        return [found] if found is not None else []


def gate() -> Gate:
    return Gate(Authenticator(AuthSettings(), TlsSettings()))


def request(path: str, query: str = "", **path_params: str) -> Request:
    cookie = f"{COOKIE}=nonce.".encode()
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": query.encode(),
        "headers": [(b"cookie", cookie)],
        "path_params": path_params,
    }
    return Request(scope)


def body(response: Any) -> str:
    assert response.status_code == 200
    return bytes(response.body).decode()


async def test_the_agent_page_shows_its_versions_side_by_side_and_the_runs_of_each() -> None:
    runs = Runs()
    the_gate = gate()
    pages = AgentPages(runs, the_gate, Renderer(the_gate))  # type: ignore[arg-type]
    page = body(await pages.agent(request("/agents/support", name="support")))
    assert page.index('data-version="3"') < page.index('data-version="2"')
    assert page.index('data-version="2"') < page.index('data-version="1"')
    assert page.count('class="changed"') == 3  # instructions (2), model and handoffs (3)
    assert '<a href="/agents/billing">billing</a>' in page
    assert '<span class="alias" data-alias="canary">canary → 3</span>' in page
    assert 'href="/runs/aaaaaaaa-0000-4000-8000-000000000001"' in page
    assert 'href="/runs?agent=support%403"' in page
    assert PLANT not in page and "&lt;script&gt;" in page  # escaped, everywhere
    wanted = [(f.agent, f.agent_version) for f in runs.filters]
    assert wanted == [("support", 3), ("support", 2), ("support", 1)]
    assert runs.agents.versions_asked == [(5, 0)]


async def test_the_agent_page_pages_its_versions() -> None:
    runs = Runs()
    the_gate = gate()
    pages = AgentPages(runs, the_gate, Renderer(the_gate))  # type: ignore[arg-type]
    page = body(await pages.agent(request("/agents/support", "start=2", name="support")))
    assert 'data-version="1"' in page and 'data-version="3"' not in page
    assert 'id="newer-versions" href="?start=0"' in page
    assert runs.agents.versions_asked == [(5, 2)]


async def test_an_unknown_or_misnamed_agent_is_not_found() -> None:
    the_gate = gate()
    pages = AgentPages(Runs(), the_gate, Renderer(the_gate))  # type: ignore[arg-type]
    for name in ("other", "a b", "<x>", "a" * 60):
        with pytest.raises(NotFound):
            await pages.agent(request(f"/agents/{name}", name=name))


async def test_the_agents_list_and_its_archived_ones() -> None:
    the_gate = gate()
    pages = AgentPages(Runs(), the_gate, Renderer(the_gate))  # type: ignore[arg-type]
    listed = body(await pages.agents(request("/agents")))
    assert 'data-agent="support"' in listed and "retired" not in listed
    assert "canary → 3" in listed and "production → 1" in listed
    assert PLANT not in listed
    everything = body(await pages.agents(request("/agents", "archived=1")))
    assert 'class="agent-row archived" data-agent="retired"' in everything


async def test_the_runs_list_shows_each_run_s_agent_and_the_one_it_handed_off_to() -> None:
    runs = Runs()
    the_gate = gate()
    pages = Pages(runs, the_gate, Renderer(the_gate), None, lambda tenant: 0)  # type: ignore[arg-type]
    page = body(await pages.runs(request("/runs", "agent=support%403")))
    assert runs.filters[-1].agent == "support" and runs.filters[-1].agent_version == 3
    assert 'value="support@3"' in page
    assert "aaaaaaaa" not in page
    assert '<a href="/agents/billing" class="handed-to">billing</a>@2' in page
    every = body(await pages.runs(request("/runs")))
    assert '<a href="/agents/support">support</a>@1</span>' in every
    assert '<a href="/agents/support">support</a>@3 → <a href="/agents/billing"' in every
