"""The inspector's agents pages against a real server (issue 27): agents made over gRPC
(AgentService), runs of them by name, version and alias; the agents list, an agent's versions
side by side with the runs of each, the runs list filtered by agent, a run's agent — over
plain HTTP and in headless Chromium. Another tenant's agent is a 404."""

from __future__ import annotations

import re
import urllib.parse
import uuid
from pathlib import Path

import pytest

from behest._proto.agent.v1 import agent_pb2 as apb
from behest._proto.agent.v1 import agent_pb2_grpc as agent_rpc
from behest._proto.agent.v1 import run_pb2 as pb
from tests.support import CI, NO_POSTGRES, POSTGRES_URL, collect, kind, script
from tests.web_support import (
    ALICE,
    BOB,
    Inspector,
    bearer,
    chromium,
    expect,
    fetch,
    inspector,
    screenshot,
    session_cookie,
    signed_in,
)

PLANT = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param(
            "postgresql",
            marks=pytest.mark.skipif(not POSTGRES_URL and not CI, reason=NO_POSTGRES),
        ),
    ]
)
def database(request: pytest.FixtureRequest) -> dict[str, str]:
    """Settings of the store: SQLite, or PostgreSQL (BEHEST_TEST_POSTGRES_URL)."""
    if request.param == "sqlite":
        return {}
    return {"database_url": request.getfixturevalue("postgres_url")}


def unique(prefix: str) -> str:
    """A name no other test uses (PostgreSQL's test database is shared)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def definition(instructions: str, **fields: object) -> apb.AgentDefinition:
    return apb.AgentDefinition(
        description="answers support questions",
        instructions=instructions,
        provider="local",
        model="script",
        **fields,  # type: ignore[arg-type]
    )


async def two_versions(web: Inspector) -> str:
    """Alice's new agent (its name): version 1, then version 2 (other instructions);
    `production` points at version 1."""
    agents = agent_rpc.AgentServiceStub(web.server.channel)
    name = unique("support")
    first = definition("Be brief.")
    await agents.CreateAgent(
        apb.CreateAgentRequest(name=name, definition=first), metadata=bearer(ALICE)
    )
    second = definition(f"Be kind. {PLANT}")
    updated = await agents.UpdateAgent(
        apb.UpdateAgentRequest(name=name, definition=second), metadata=bearer(ALICE)
    )
    assert updated.version.version == 2 and updated.changed
    await agents.SetAgentAlias(
        apb.SetAgentAliasRequest(name=name, alias="production", version=1),
        metadata=bearer(ALICE),
    )
    return name


async def run_of(web: Inspector, agent: str, text: str) -> str:
    """A completed run of `agent` ("support", "support@1", …) that says `text`: its id."""
    request = pb.CreateRunRequest(agent=agent, input=script({"text": text}))
    events = await collect(web.server.runs.CreateRunStream(request, metadata=bearer(ALICE)))
    assert kind(events[-1]) == "run_completed", [kind(e) for e in events]
    return events[0].run_id


def run_ids(page: str) -> set[str]:
    return set(re.findall(r'href="/runs/([0-9a-f-]{36})"', page))


def column(page: str, version: int) -> str:
    """The runs cell of one version's column on an agent's page."""
    found = re.search(rf'<td data-version="{version}">(.*?)</td>', page, re.S)
    assert found, f"no runs cell of version {version}"
    return found.group(1)


async def test_the_agents_pages_show_versions_side_by_side_and_which_runs_used_which(
    tmp_path: Path, database: dict[str, str]
) -> None:
    async with inspector(tmp_path, **database) as web:
        name = await two_versions(web)
        first = await run_of(web, f"{name}@1", "one")
        second = await run_of(web, name, "two")
        aliased = await run_of(web, f"{name}@production", "three")
        cookies = await session_cookie(web.base, ALICE)

        listed = await fetch(f"{web.base}/agents", cookies=cookies)
        assert listed.status == 200
        row = re.search(rf'data-agent="{name}">.*?</tr>', listed.body, re.S)
        assert row and "production → 1" in row.group(0)

        agent = await fetch(f"{web.base}/agents/{name}", cookies=cookies)
        assert agent.status == 200
        assert agent.body.index('data-version="2"') < agent.body.index('data-version="1"')
        assert agent.body.count('class="changed"') == 1  # the instructions of version 2
        assert PLANT not in agent.body and "Be kind. &lt;script&gt;" in agent.body
        assert run_ids(column(agent.body, 2)) == {second}
        assert run_ids(column(agent.body, 1)) == {first, aliased}

        query = urllib.parse.urlencode({"agent": f"{name}@1"})
        of_one = await fetch(f"{web.base}/runs?{query}", cookies=cookies)
        assert run_ids(of_one.body) == {first, aliased}
        every = await fetch(f"{web.base}/runs?agent={name}", cookies=cookies)
        assert run_ids(every.body) == {first, second, aliased}
        refused = await fetch(f"{web.base}/runs?agent={name}%40production", cookies=cookies)
        assert refused.status == 400, refused.body

        shown = await fetch(f"{web.base}/runs/{aliased}", cookies=cookies)
        assert re.search(rf'id="run-agent">.*?>{name}</a>@1', shown.body, re.S), shown.body


async def test_a_run_that_handed_off_shows_both_agents_and_the_handoff(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web:
        agents = agent_rpc.AgentServiceStub(web.server.channel)
        for name, handoffs in (("billing", []), ("support", ["billing"])):
            request = apb.CreateAgentRequest(
                name=name, definition=definition(f"{name} here", handoffs=handoffs)
            )
            await agents.CreateAgent(request, metadata=bearer(ALICE))
        transfer = {"name": "transfer_to_billing", "arguments": {"reason": f"a refund {PLANT}"}}
        request = pb.CreateRunRequest(
            agent="support", input=script({"tool_calls": [transfer]}, {"text": "done"})
        )
        events = await collect(web.server.runs.CreateRunStream(request, metadata=bearer(ALICE)))
        assert "handoff" in [kind(e) for e in events]
        run_id = events[0].run_id
        cookies = await session_cookie(web.base, ALICE)

        shown = (await fetch(f"{web.base}/runs/{run_id}", cookies=cookies)).body
        handed = '<a href="/agents/billing" class="handed-to">billing</a>@1'
        assert re.search(rf'id="run-agent">.*?>support</a>@1 → {handed}', shown, re.S)
        item = re.search(r'<li class="item kind-handoff" data-name="handoff".*?</li>', shown, re.S)
        assert item, shown
        assert "⇄ handed off from support@1 to billing@1: a refund" in item.group(0)
        assert PLANT not in shown and "a refund &lt;script&gt;" in item.group(0)
        calls = re.findall(r'data-name="model_started".*?</li>', shown, re.S)
        assert ["(support@1)" in c for c in calls] == [True, False]
        assert "(billing@1)" in calls[1]

        listed = (await fetch(f"{web.base}/runs?agent=support", cookies=cookies)).body
        assert handed in listed
        support = (await fetch(f"{web.base}/agents/support", cookies=cookies)).body
        assert '<a href="/agents/billing">billing</a>' in support
        assert run_ids(column(support, 1)) == {run_id}


async def test_another_tenant_s_agent_is_not_found(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web:
        name = await two_versions(web)
        await run_of(web, name, "alice's")
        cookies = await session_cookie(web.base, BOB)
        assert (await fetch(f"{web.base}/agents/{name}", cookies=cookies)).status == 404
        assert (await fetch(f"{web.base}/agents/nobody", cookies=cookies)).status == 404
        listed = await fetch(f"{web.base}/agents", cookies=cookies)
        assert listed.status == 200 and f'data-agent="{name}"' not in listed.body
        theirs = await fetch(f"{web.base}/runs?agent={name}", cookies=cookies)
        assert not run_ids(theirs.body)
        signed_out = await fetch(f"{web.base}/agents")
        assert signed_out.status == 303 and signed_out.headers["location"] == "/signin"


async def test_an_agent_s_versions_and_runs_in_a_browser(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web, chromium() as browser:
        name = await two_versions(web)
        first = await run_of(web, f"{name}@1", "one")
        second = await run_of(web, f"{name}@2", "two")
        page = await signed_in(browser, web.base, ALICE)
        page.on("dialog", lambda dialog: dialog.dismiss())
        await page.click("header nav a[href='/agents']")
        await page.wait_for_url(f"{web.base}/agents")
        row = page.locator("#agents tr.agent-row")
        await expect(row).to_have_count(1)
        await expect(row).to_contain_text("production → 1")
        await screenshot(page, "agents")

        await row.locator(f"a[href='/agents/{name}']").click()
        await page.wait_for_url(f"{web.base}/agents/{name}")
        versions = page.locator("#versions thead th.version")
        await expect(versions).to_have_count(2)
        await expect(versions.nth(0)).to_contain_text("version 2")
        await expect(versions.nth(1)).to_contain_text("version 1")
        await expect(versions.nth(1)).to_contain_text("production")
        instructions = page.locator("#versions tr[data-field=instructions] td")
        await expect(instructions.nth(0)).to_have_class("changed")
        await expect(instructions.nth(0)).to_contain_text(PLANT)  # as text
        await expect(instructions.nth(1)).to_have_text("Be brief.")
        runs = page.locator("#versions tr.version-runs td")
        await expect(runs.nth(0).locator(f"a[href='/runs/{second}']")).to_have_count(1)
        await expect(runs.nth(1).locator(f"a[href='/runs/{first}']")).to_have_count(1)
        await expect(runs.nth(0).locator(f"a[href='/runs/{first}']")).to_have_count(0)
        assert await page.evaluate("window.__pwned") is None
        await screenshot(page, "agent")

        await runs.nth(1).locator(f"a[href='/runs/{first}']").click()
        await page.wait_for_url(f"{web.base}/runs/{first}")
        await expect(page.locator("#run-agent")).to_contain_text(f"{name}@1")
        await screenshot(page, "run-of-agent")

        await page.goto(f"{web.base}/agents/{name}")
        await page.locator("#versions tr.version-runs td").nth(0).locator("a.all-runs").click()
        await page.wait_for_url(f"{web.base}/runs?agent={name}%402")
        await expect(page.locator("#runs tr.run-row")).to_have_count(1)
        await expect(page.locator("#runs tr.run-row")).to_contain_text(f"{name}@2")
