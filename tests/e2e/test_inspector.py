"""The run inspector in a browser (issue 18): headless Chromium (Debian's, through Playwright)
drives the real pages of a real server with bearer tokens of two tenants. Each test saves a
screenshot of every page it checks under test-output/inspector/."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from tests.support import CI, NO_POSTGRES, POSTGRES_URL, collect, create_request, kind, script
from tests.web_support import (
    ALICE,
    BOB,
    SCREENSHOTS,
    bearer,
    chromium,
    expect,
    inspector,
    screenshot,
    signed_in,
)

CALC = {"name": "calculator", "arguments": {"expression": "6*7"}}
BAD_CALC = {"name": "calculator", "arguments": {"expression": "1/0"}}
PLANT = '<script>window.__pwned = 1; alert(1)</script><img src=x onerror="window.__pwned = 2">'


async def until(stream: AsyncIterator[pb.AgentEvent], wanted: str) -> list[pb.AgentEvent]:
    events = []
    async for event in stream:
        events.append(event)
        if kind(event) == wanted:
            return events
    raise AssertionError(f"the stream ended without {wanted}: {[kind(e) for e in events]}")


async def ranges(page: Any) -> list[tuple[int, int]]:
    """The (first, last) sequence numbers of the timeline's items, in page order."""
    found = await page.eval_on_selector_all(
        "#timeline li.item", "items => items.map(i => [+i.dataset.first, +i.dataset.last])"
    )
    return [(first, last) for first, last in found]


def gapless(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    expected = start
    for first, last in spans:
        if first != expected or last < first:
            return False
        expected = last + 1
    return expected == end + 1


async def test_sign_in_list_filter_and_sign_out(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web, chromium() as browser:
        runs = web.server.runs
        await collect(runs.CreateRunStream(create_request("hello there"), metadata=bearer(ALICE)))
        failing = create_request(script({"error": "bad_request"}), model="script")
        failed = await collect(runs.CreateRunStream(failing, metadata=bearer(ALICE)))
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        page = await context.new_page()
        await page.goto(f"{web.base}/runs")
        assert page.url == f"{web.base}/signin"
        await page.fill("#token", "not-a-token-of-this-server")
        await page.click("button[type=submit]")
        await expect(page.locator("#signin-error")).to_contain_text("invalid token")
        await screenshot(page, "signin")

        await page.fill("#token", ALICE)
        await page.click("button[type=submit]")
        await page.wait_for_url(f"{web.base}/runs")
        cookie = next(c for c in await context.cookies() if c["name"] == "behest_session")
        assert (cookie["httpOnly"], cookie["secure"], cookie["sameSite"]) == (True, True, "Strict")
        assert ALICE not in await page.content()
        rows = page.locator("#runs tr.run-row")
        await expect(rows).to_have_count(2)
        await expect(rows.first).to_contain_text(failed[0].run_id[:8])  # newest first
        await expect(rows.first).to_contain_text("PROVIDER_ERROR")
        await screenshot(page, "runs")

        await page.select_option("select[name=status]", "COMPLETED")
        await page.click(".filters button[type=submit]")
        await expect(rows).to_have_count(1)
        await expect(rows.first).to_contain_text("local/echo")
        await page.goto(f"{web.base}/runs?model=script")
        await expect(rows).to_have_count(1)
        await expect(rows.first).to_contain_text("FAILED")

        await page.click("header form.who button")
        await page.wait_for_url(f"{web.base}/signin")
        assert "behest_session" not in [c["name"] for c in await context.cookies()]
        await page.goto(f"{web.base}/runs")
        assert page.url == f"{web.base}/signin"


async def test_a_failed_run_shows_its_code_and_the_failing_tool_call(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web, chromium() as browser:
        steps = [{"error": "unavailable"}, *[{"tool_calls": [BAD_CALC]}] * 3]  # a retry first
        request = create_request(script(*steps), model="script")
        events = await collect(web.server.runs.CreateRunStream(request, metadata=bearer(ALICE)))
        assert kind(events[-1]) == "run_failed"
        run_id = events[0].run_id
        page = await signed_in(browser, web.base, ALICE)
        await page.click(f"a[href='/runs/{run_id}']")
        await page.wait_for_url(f"{web.base}/runs/{run_id}")
        await expect(page.locator("#run-status")).to_have_text("FAILED")
        await expect(page.locator("#failure-code")).to_have_text("DOOM_LOOP")
        failing = page.locator("li.item.error[data-name=tool_execution_finished]")
        await expect(failing).to_have_count(2)  # the third call is never run: a doom loop
        await expect(failing.first).to_contain_text("tool failed")
        await expect(failing.first).to_contain_text("← calculator failed in")  # the CLI's words
        await expect(failing.first).to_contain_text("call_2_1")  # call 2: a retry
        result = page.locator("li.item.error[data-name=tool_message_committed]").first
        await expect(result).to_contain_text("error")
        call = page.locator("li.item[data-name=tool_call_completed]").first
        await expect(call).to_contain_text('"expression": "1/0"')
        calls = page.locator("li.item[data-name=model_started] .title")
        await expect(calls.nth(0)).to_have_text("model call")
        await expect(calls.nth(1)).to_have_text("model call (retry)")
        end = page.locator("li.item[data-name=run_failed]")
        await expect(end).to_contain_text("✗ failed [doom_loop]: doom loop detected")
        await expect(page.locator("li.item .seq").first).to_have_text("#1")
        await screenshot(page, "run-failed")


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


async def test_a_running_run_is_followed_live_across_a_reconnect(
    tmp_path: Path, database: dict[str, str]
) -> None:
    async with (
        inspector(tmp_path, coalesce_text_deltas=False, **database) as web,
        chromium() as browser,
    ):
        request = create_request(script({"deltas": 100, "delay_ms": 40}), model="script")
        created = await web.server.runs.CreateRun(request, metadata=bearer(ALICE))
        page = await signed_in(browser, web.base, ALICE)
        await page.goto(f"{web.base}/runs/{created.run_id}")
        timeline = page.locator("#timeline")
        await expect(page.locator("#timeline pre.delta")).to_contain_text("w8 ")
        assert web.server.app.web is not None
        # The server drops the stream mid-run: at once, while most of the run is still to come
        # (a screenshot first could outlast the run on a slow machine).
        web.server.app.web.live.close_all()
        suffix = "-postgresql" if database else ""
        await screenshot(page, f"run-live{suffix}")
        await expect(timeline).to_have_attribute("data-ended", "1", timeout=20_000)
        await expect(timeline).to_have_attribute("data-reconnects", "1")
        await expect(page.locator("#run-status")).to_have_text("COMPLETED")
        listed = await web.server.runs.ListRunEvents(
            pb.ListRunEventsRequest(run_id=created.run_id, limit=1000), metadata=bearer(ALICE)
        )
        last = listed.events[-1].sequence
        assert gapless(await ranges(page), 1, last), await ranges(page)
        text = await page.locator("#timeline pre.delta").inner_text()
        assert text == "".join(f"w{i} " for i in range(1, 101))
        await screenshot(page, f"run-live-ended{suffix}")


async def test_approving_a_waiting_call_lets_the_run_complete(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web, chromium() as browser:
        request = create_request(
            script({"tool_calls": [CALC]}, {"text": "the answer is 42"}), model="script"
        )
        request.approval_required_tools.append("calculator")
        stream = web.server.runs.CreateRunStream(request, metadata=bearer(ALICE))
        run_id = (await until(stream, "approval_requested"))[0].run_id
        page = await signed_in(browser, web.base, ALICE)
        await page.click("a[href='/approvals']")
        pending = page.locator(".pending")
        await expect(pending).to_have_count(1)
        await expect(pending).to_contain_text("calculator")
        await expect(pending).to_contain_text('"expression"')
        await screenshot(page, "approvals")
        await pending.locator("input[name=reason]").fill("looks fine")
        await pending.locator("button[value=allow]").click()
        await page.wait_for_url(f"{web.base}/runs/{run_id}")
        await expect(page.locator("#run-status")).to_have_text("COMPLETED", timeout=10_000)
        resolved = page.locator("li.item[data-name=approval_resolved]")
        await expect(resolved).to_contain_text("✓ calculator allowed by alice")
        await expect(resolved).to_contain_text("looks fine")
        await expect(page.locator("#timeline")).to_contain_text("the answer is 42")
        await screenshot(page, "run-approved")
        rest = [kind(e) async for e in stream]
        assert rest[-1] == "run_completed"


async def test_planted_markup_in_model_text_and_tool_output_never_runs(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "evil.html").write_text(f"tool says {PLANT}")
    async with (
        inspector(tmp_path / "data", read_file_root=str(files)) as web,
        chromium() as browser,
    ):
        read = {"name": "read_file", "arguments": {"path": "evil.html"}}
        request = create_request(
            script({"text": f"model says {PLANT}", "tool_calls": [read]}, {"text": PLANT}),
            model="script",
        )
        request.approval_required_tools.append("read_file")
        stream = web.server.runs.CreateRunStream(request, metadata=bearer(ALICE))
        before = await until(stream, "approval_requested")
        run_id, call_id = before[0].run_id, before[-1].approval_requested.call.id
        page = await signed_in(browser, web.base, ALICE)
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: dialogs.append(dialog.message))
        await page.goto(f"{web.base}/runs/{run_id}")
        await expect(page.locator("#live-state")).to_have_text("live")
        approve = pb.SubmitApprovalsRequest(
            run_id=run_id,
            approvals=[pb.ApprovalAnswer(call_id=call_id, decision=pb.APPROVAL_DECISION_ALLOW)],
        )
        await web.server.runs.SubmitApprovals(approve, metadata=bearer(ALICE))
        await expect(page.locator("#timeline")).to_have_attribute("data-ended", "1")
        await screenshot(page, "planted-live")  # the tool output and last answer came live
        await expect(page.locator("section.waiting, form.cancel")).to_have_count(0)
        await _nothing_ran(page, dialogs)
        await page.reload()  # the same run, all rendered by the server
        await _nothing_ran(page, dialogs)
        await screenshot(page, "planted-rendered")
        await page.click("#run-header a[href^='/sessions/']")
        await expect(page.locator("#transcript")).to_contain_text(f"tool says {PLANT}")
        await _nothing_ran(page, dialogs, where="#transcript")
        await screenshot(page, "session")
        assert [kind(e) async for e in stream][-1] == "run_completed"


async def _nothing_ran(page: Any, dialogs: list[str], where: str = "#timeline") -> None:
    area = page.locator(where)
    await expect(area).to_contain_text(f"model says {PLANT}")
    await expect(area).to_contain_text(f"tool says {PLANT}")
    assert await page.evaluate("window.__pwned") is None
    assert dialogs == []
    assert await area.locator("script, img").count() == 0
    assert await page.locator("script").count() == 1  # inspector.js, and nothing else


async def test_another_tenants_run_and_session_are_not_found(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web, chromium() as browser:
        theirs = await web.server.runs.CreateRun(
            create_request("bob's own business"), metadata=bearer(BOB)
        )
        page = await signed_in(browser, web.base, ALICE)
        await expect(page.locator("#runs tr.run-row")).to_have_count(0)
        shown = await page.goto(f"{web.base}/runs/{theirs.run_id}")
        assert shown is not None and shown.status == 404
        theirs_page = await page.locator("main").inner_text()
        assert "bob's own business" not in await page.content()
        await screenshot(page, "not-found")
        missing = await page.goto(f"{web.base}/runs/{uuid.uuid4()}")
        assert missing is not None and missing.status == 404
        assert await page.locator("main").inner_text() == theirs_page
        session = await page.goto(f"{web.base}/sessions/{theirs.session_id}")
        assert session is not None and session.status == 404
        assert await page.locator("main").inner_text() == theirs_page
        live = await page.request.get(f"{web.base}/runs/{theirs.run_id}/live")
        assert live.status == 404
        bobs = await signed_in(browser, web.base, BOB)
        shown = await bobs.goto(f"{web.base}/runs/{theirs.run_id}")
        assert shown is not None and shown.status == 200


async def test_a_long_running_run_can_be_cancelled(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web, chromium() as browser:
        request = create_request(script({"deltas": 500, "delay_ms": 50}), model="script")
        created = await web.server.runs.CreateRun(request, metadata=bearer(ALICE))
        page = await signed_in(browser, web.base, ALICE)
        await page.goto(f"{web.base}/runs/{created.run_id}")
        await expect(page.locator("#timeline pre.delta")).to_contain_text("w2 ")
        await page.fill("form.cancel input[name=reason]", "enough of that")
        await page.click("form.cancel button")
        await page.wait_for_url(f"{web.base}/runs/{created.run_id}")
        await expect(page.locator("#run-status")).to_have_text("CANCELLED")
        cancelled = page.locator("li.item[data-name=run_cancelled]")
        await expect(cancelled).to_contain_text("by alice: enough of that")
        await screenshot(page, "run-cancelled")


async def test_the_dashboard_and_a_session_show_what_ran(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web, chromium() as browser:
        runs, md = web.server.runs, bearer(ALICE)
        first = await collect(runs.CreateRunStream(create_request("one two three"), metadata=md))
        session_id = first[0].run_started.session_id
        again = create_request("four five", session_id=session_id)
        await collect(runs.CreateRunStream(again, metadata=md))
        failing = create_request(script({"error": "bad_request"}), model="script")
        await collect(runs.CreateRunStream(failing, metadata=md))
        # A running run, followed over gRPC: an active run and an open stream.
        slow = script({"text": "slow " * 100, "delay_ms": 100})
        running = await runs.CreateRun(create_request(slow, model="script"), metadata=md)
        watch = runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=running.run_id), metadata=md)
        await anext(aiter(watch))
        page = await signed_in(browser, web.base, ALICE)
        await page.click("a[href='/dashboard']")
        await expect(page.locator(".card.out-completed b")).to_have_text("2")
        await expect(page.locator(".card.out-failed b")).to_have_text("1")
        await expect(page.locator("#active-count")).to_have_text("1")
        await expect(page.locator("#stream-count")).to_have_text("1")
        by_model = page.locator("#by-model")
        await expect(by_model).to_contain_text("local/echo")
        await expect(by_model).to_contain_text("local/script")
        assert await page.locator("svg.chart rect").count() >= 1
        await screenshot(page, "dashboard")
        watch.cancel()
        await runs.CancelRun(pb.CancelRunRequest(run_id=running.run_id), metadata=md)
        await page.click("a[href='/sessions']")
        await page.click(f"a[href='/sessions/{session_id}']")
        chat = page.locator("#transcript .msg")
        await expect(chat).to_have_count(4)
        await expect(chat.nth(0)).to_contain_text("one two three")
        await expect(chat.nth(3)).to_contain_text("four five")
        await expect(page.locator(".session-runs li")).to_have_count(2)
        await screenshot(page, "session-chat")


async def test_a_run_of_10000_events_is_paginated_and_paints_fast(tmp_path: Path) -> None:
    async with inspector(tmp_path, coalesce_text_deltas=False) as web, chromium() as browser:
        request = create_request(script({"deltas": 10_000}), model="script")
        events = await collect(web.server.runs.CreateRunStream(request, metadata=bearer(ALICE)))
        run_id, last = events[0].run_id, events[-1].sequence
        assert last > 10_000
        page = await signed_in(browser, web.base, ALICE)
        figures: dict[str, Any] = {"events": last}
        for name, query in (("last_page", ""), ("first_page", "?after=0")):
            await page.goto(f"{web.base}/runs/{run_id}{query}")
            figures[name] = await _paint_figures(page)
            spans = await ranges(page)
            shown = sum(b - a + 1 for a, b in spans)
            assert 0 < shown <= 200, shown
            figures[name]["events_shown"] = shown
            await screenshot(page, f"run-10000-{name}")
        assert (await ranges(page))[0][0] == 1
        await expect(page.locator("#event-pages a", has_text="last")).to_be_visible()
        await expect(page.locator("h2 small")).to_contain_text("page 1 of 51")
        (SCREENSHOTS / "figures.json").write_text(json.dumps(figures, indent=2))
        print("10,000-event run page:", json.dumps(figures))
        assert figures["last_page"]["first_contentful_paint_ms"] < 3000


async def _paint_figures(page: Any) -> dict[str, Any]:
    """The page's first contentful paint and the navigation's timings (milliseconds)."""
    return dict(
        await page.evaluate(
            """() => new Promise(resolve => new PerformanceObserver((list, observer) => {
              const fcp = list.getEntriesByName('first-contentful-paint')[0];
              if (!fcp) return;
              observer.disconnect();
              const nav = performance.getEntriesByType('navigation')[0];
              resolve({
                first_contentful_paint_ms: Math.round(fcp.startTime),
                response_end_ms: Math.round(nav.responseEnd),
                dom_content_loaded_ms: Math.round(nav.domContentLoadedEventEnd),
                html_bytes: nav.transferSize,
                dom_nodes: document.getElementsByTagName('*').length,
              });
            }).observe({type: 'paint', buffered: true}))"""
        )
    )


async def test_a_parent_run_links_its_children_and_back(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web, chromium() as browser:
        child_steps = script({"text": "the child's own answer"})
        spawn = {"name": "spawn_agent", "arguments": {"input": child_steps}}
        steps = script({"tool_calls": [spawn]}, {"text": "thanks"})
        request = create_request(steps, model="script")
        request.allow_sub_agents = True
        events = await collect(web.server.runs.CreateRunStream(request, metadata=bearer(ALICE)))
        child_id = next(
            e for e in events if kind(e) == "sub_run_started"
        ).sub_run_started.child_run_id
        page = await signed_in(browser, web.base, ALICE)
        await page.goto(f"{web.base}/runs/{events[0].run_id}")
        children = page.locator("ul.children li")
        await expect(children).to_have_count(1)
        await expect(children).to_contain_text("COMPLETED")
        await expect(page.locator("#run-header")).to_contain_text("Trace id")
        await screenshot(page, "run-parent")
        started = page.locator("li.item[data-name=sub_run_started]")
        await started.locator("a", has_text="open the run").click()
        await page.wait_for_url(f"{web.base}/runs/{child_id}")
        await expect(page.locator("#timeline")).to_contain_text("the child's own answer")
        parent = page.locator(f"#run-header a[href='/runs/{events[0].run_id}']")
        await expect(parent).to_be_visible()
        await screenshot(page, "run-child")
