"""A session's page follows the session live (issue 28): its SSE stream over a real server and
a real HTTP client (httpx2) — every event of every run, the runs started after it opened
included, with ids RUN_ID:SEQUENCE; a reconnect with Last-Event-ID resumes right after; bad
cursors and another tenant's session refused — and in headless Chromium: a run created over
gRPC on the session of an open page, a message steered into its run, a run queued behind it,
each shown as chat turns without a reload."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx2

from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import session_pb2 as spb
from behest._proto.agent.v1 import session_pb2_grpc as session_rpc
from tests.sse_support import TIMEOUT, Stream, read_stream
from tests.support import collect, create_request, kind, script
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

CALC = {"name": "calculator", "arguments": {"expression": "6*7"}}
PLANT = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


async def cookie_header(base: str, token: str = ALICE) -> dict[str, str]:
    cookies = await session_cookie(base, token)
    return {"Cookie": f"behest_session={cookies['behest_session']}"}


async def finished_run(web: Inspector, text: str, token: str = ALICE, **fields: Any) -> list[str]:
    """A script run that answers `text`, to its end; its events' SSE ids."""
    request = create_request(script({"text": text}), model="script", **fields)
    events = await collect(web.server.runs.CreateRunStream(request, metadata=bearer(token)))
    assert kind(events[-1]) == "run_completed"
    return [f"{e.run_id}:{e.sequence}" for e in events]


async def session_of(web: Inspector, run_id: str, token: str = ALICE) -> str:
    got = await web.server.runs.GetRun(pb.GetRunRequest(run_id=run_id), metadata=bearer(token))
    return got.run.session_id


def ending_at(last_id: str) -> Any:
    return lambda stream: bool(stream.events) and stream.events[-1].id == last_id


async def open_streams_drop_to(web: Inspector, count: int) -> None:
    """The server ends a stream whose client went away."""
    assert web.server.app.web is not None
    async with asyncio.timeout(10):
        while web.server.app.web.live.open != count:  # noqa: ASYNC110 (a count, no event)
            await asyncio.sleep(0.02)


async def test_the_session_stream_carries_every_run_and_resumes_after_last_event_id(
    tmp_path: Path,
) -> None:
    async with inspector(tmp_path) as web:
        first = await finished_run(web, "one two three")
        session_id = await session_of(web, first[0].split(":")[0])
        headers = await cookie_header(web.base)
        url = f"{web.base}/sessions/{session_id}/live"
        seen_first = asyncio.Event()
        second: list[str] = []

        def until(stream: Stream) -> bool:
            if stream.events and stream.events[-1].id == first[-1]:
                seen_first.set()
            return bool(second) and ending_at(second[-1])(stream)

        async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
            reading = asyncio.create_task(
                read_stream(client, "GET", url, headers=headers, until=until)
            )
            await asyncio.wait_for(seen_first.wait(), 20)  # the stream is open, idle
            second.extend(await finished_run(web, "four five six", session_id=session_id))
            stream = await asyncio.wait_for(reading, 20)
            assert stream.status == 200, stream.body
            assert stream.headers["content-type"].startswith("text/event-stream")
            assert stream.retry == ["1000"]
            assert [e.id for e in stream.events] == first + second
            items = [e.json() for e in stream.events]
            assert {e.event for e in stream.events} == {"item"}
            started = [i for i in items if i["shows"] == "run"]
            assert [i["message"]["text"] for i in started] == [
                script({"text": "one two three"}),
                script({"text": "four five six"}),
            ]
            answers = [
                i["message"]["text"] for i in items if i["name"] == "assistant_message_committed"
            ]
            assert answers == ["one two three", "four five six"]
            assert [i["status"] for i in items if i["shows"] == "end"] == ["COMPLETED"] * 2
            await open_streams_drop_to(web, 0)  # the client went away: the stream ended

            everything = first + second
            for after, last_event_id, rest in (
                (f"?after={first[1]}", "", everything[2:]),
                (f"?after={first[1]}", first[-1], second),  # a reconnect: the header wins
                ("", second[1], second[2:]),
            ):
                sent = {**headers, "Last-Event-ID": last_event_id} if last_event_id else headers
                resumed = await read_stream(
                    client, "GET", url + after, headers=sent, until=ending_at(second[-1])
                )
                assert [e.id for e in resumed.events] == rest
            await open_streams_drop_to(web, 0)


async def test_bad_cursors_are_400_and_another_tenants_session_404(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web:
        mine = await finished_run(web, "mine")
        run_id = mine[0].split(":")[0]
        session_id = await session_of(web, run_id)
        other = await finished_run(web, "another session of mine")
        theirs = await finished_run(web, "bob's", token=BOB)
        bobs_session = await session_of(web, theirs[0].split(":")[0], token=BOB)
        headers = await cookie_header(web.base)
        url = f"{web.base}/sessions/{session_id}/live"

        async def status(url: str, **sent: str) -> tuple[int, str]:
            async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
                reply = await read_stream(
                    client, "GET", url, headers={**headers, **sent}, until=lambda s: True
                )
            return reply.status, reply.body

        for cursor in (
            "nonsense",
            f"{run_id}:x",
            f"{run_id}:0",
            f"{run_id}:{'9' * 40}",
            run_id,
            f"{run_id[:-1]}:1",
            f"{uuid.uuid4()}:1",  # no such run
            other[0],  # a run of another session
            theirs[0],  # another tenant's run
            f"{run_id}:{len(mine) + 1}",  # past the end of the run
        ):
            code, body = await status(url, **{"Last-Event-ID": cursor})
            assert code == 400, (cursor, body)
            assert (await status(f"{url}?after={cursor}"))[0] == 400, cursor
        assert (await status(f"{url}?after={run_id}:²"))[0] == 400
        assert (await status(url, **{"Last-Event-ID": mine[-1]}))[0] == 200
        code, body = await status(f"{web.base}/sessions/{bobs_session}/live")
        assert code == 404 and "bob" not in body
        assert (await status(f"{web.base}/sessions/{uuid.uuid4()}/live"))[0] == 404
        # Another tenant's session is not found whatever the cursor says.
        assert (await status(f"{web.base}/sessions/{bobs_session}/live?after=x"))[0] == 404
        async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
            signed_out = await client.get(url)
        assert signed_out.status_code == 401
        await open_streams_drop_to(web, 0)


async def test_a_fork_shows_its_shared_history_and_follows_only_its_own_runs(
    tmp_path: Path,
) -> None:
    async with inspector(tmp_path) as web:
        first = await finished_run(web, "the parent's answer")
        parent = await session_of(web, first[0].split(":")[0])
        sessions = session_rpc.SessionServiceStub(web.server.channel)
        forked = await sessions.ForkSession(
            spb.ForkSessionRequest(session_id=parent, through_position=1), metadata=bearer(ALICE)
        )
        fork = forked.session.id
        cookies = await session_cookie(web.base, ALICE)
        page = await fetch(f"{web.base}/sessions/{fork}", cookies=cookies)
        assert page.status == 200
        assert f'A fork of session <a href="/sessions/{parent}">' in page.body
        assert "shared from session" in page.body and "the parent&#39;s answer" in page.body
        assert 'data-after=""' in page.body  # none of the history is its own: from its start
        listed = await fetch(f"{web.base}/sessions/{parent}", cookies=cookies)
        assert f'href="/sessions/{fork}"' in listed.body  # the parent lists its forks

        own = await finished_run(web, "the fork's answer", session_id=fork)
        async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
            stream = await read_stream(
                client,
                "GET",
                f"{web.base}/sessions/{fork}/live",
                headers={"Cookie": f"behest_session={cookies['behest_session']}"},
                until=ending_at(own[-1]),
            )
        assert [e.id for e in stream.events] == own  # the fork's runs only
        again = await fetch(f"{web.base}/sessions/{fork}", cookies=cookies)
        assert f'data-after="{own[-1]}"' in again.body


async def test_an_open_session_page_shows_new_runs_steers_and_queues_live(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web, chromium() as browser:
        runs, md = web.server.runs, bearer(ALICE)
        first = await finished_run(web, "the first answer")
        session_id = await session_of(web, first[0].split(":")[0])
        page = await signed_in(browser, web.base, ALICE)
        await page.goto(f"{web.base}/sessions/{session_id}")
        await expect(page.locator("#live-state")).to_have_text("live")
        await page.evaluate("window.__same_page = 1")
        turns = page.locator("#turns section.turn")
        await expect(turns).to_have_count(1)

        # A run that waits for an approval, created over gRPC: its turn appears.
        waits = create_request(
            script({"tool_calls": [CALC]}, {"text": "the second answer"}),
            model="script",
            session_id=session_id,
        )
        waits.approval_required_tools.append("calculator")
        second = await runs.CreateRun(waits, metadata=md)
        turn = page.locator(f"section.turn[data-run='{second.run_id}']")
        await expect(turn.locator(".turn-head .status")).to_have_text("WAITING_FOR_INPUT")
        await expect(turn.locator("p.line")).to_contain_text("calculator")
        await expect(page.locator(f"#session-runs li[data-run='{second.run_id}']")).to_have_count(1)
        assert web.server.app.web is not None
        web.server.app.web.live.close_all()  # the server drops the stream: the page reconnects
        await expect(page.locator("#transcript")).to_have_attribute("data-reconnects", "1")

        # A message steered into it, and a run queued behind it; then the approval.
        steer = create_request(
            "and in French, please", session_id=session_id, on_busy=pb.BUSY_POLICY_STEER
        )
        steered = await runs.CreateRun(steer, metadata=md)
        assert (steered.run_id, steered.steered) == (second.run_id, True)
        queued = create_request(
            script({"text": f"the third answer {PLANT}"}),
            model="script",
            session_id=session_id,
            on_busy=pb.BUSY_POLICY_ENQUEUE,
        )
        third = await runs.CreateRun(queued, metadata=md)
        call = pb.ApprovalAnswer(call_id="call_1_1", decision=pb.APPROVAL_DECISION_ALLOW)
        await runs.SubmitApprovals(
            pb.SubmitApprovalsRequest(run_id=second.run_id, approvals=[call]), metadata=md
        )

        last = page.locator(f"section.turn[data-run='{third.run_id}']")
        await expect(last.locator(".msg.role-assistant")).to_contain_text(
            f"the third answer {PLANT}", timeout=20_000
        )
        await _check_the_chat(page, second.run_id, third.run_id)
        assert await page.evaluate("window.__same_page") == 1  # no reload
        await screenshot(page, "session-live")

        await page.reload()  # the same chat, rendered by the server
        await _check_the_chat(page, second.run_id, third.run_id)
        await screenshot(page, "session-live-rendered")

        await page.goto(f"{web.base}/runs/{second.run_id}")  # the runs' timelines say it too
        added = page.locator("li.item[data-name=user_message_added]")
        await expect(added).to_contain_text("+ user: and in French, please")
        await page.goto(f"{web.base}/runs/{third.run_id}")
        began = page.locator("li.item[data-name=run_started]")
        await expect(began.locator(".title")).to_have_text("run started (waited for a run)")
        await expect(began.locator(f"a[href='/runs/{second.run_id}']")).to_have_count(1)


async def _check_the_chat(page: Any, second: str, third: str) -> None:
    turns = page.locator("#turns section.turn")
    await expect(turns).to_have_count(3)
    await expect(turns.nth(0)).to_contain_text("the first answer")
    turn = page.locator(f"section.turn[data-run='{second}']")
    steered = turn.locator(".msg.steered")
    await expect(steered).to_have_count(1)
    await expect(steered).to_contain_text("and in French, please")
    await expect(steered).to_contain_text("steered into the running run")
    await expect(turn.locator(".msg.role-assistant").last).to_contain_text("the second answer")
    await expect(turn.locator(".turn-head .status")).to_have_text("COMPLETED")
    last = page.locator(f"section.turn[data-run='{third}']")
    await expect(last.locator(".note-waited_for")).to_have_text(f"waited for run {second[:8]}")
    await expect(last.locator(".note-waited_for a")).to_have_attribute("href", f"/runs/{second}")
    await expect(last.locator(".turn-head .status")).to_have_text("COMPLETED")
    await expect(page.locator("#session-runs li")).to_have_count(3)
    ids = await page.eval_on_selector_all(
        "#turns article[data-message]", "items => items.map(i => i.dataset.message)"
    )
    assert len(ids) == len(set(ids)) == 9, ids  # each message once: 2 + 5 (call, result) + 2
    assert await page.locator("article.streaming").count() == 0
    await expect(last.locator(".msg.role-assistant")).to_contain_text(f"the third answer {PLANT}")
    assert await page.evaluate("window.__pwned") is None  # shown as text, never run
    assert await page.locator("#turns script, #turns img").count() == 0


async def test_a_run_that_rolls_back_the_streaming_one_says_so_live(tmp_path: Path) -> None:
    async with inspector(tmp_path, coalesce_text_deltas=False) as web, chromium() as browser:
        runs, md = web.server.runs, bearer(ALICE)
        first = await finished_run(web, "the first answer")
        session_id = await session_of(web, first[0].split(":")[0])
        page = await signed_in(browser, web.base, ALICE)
        await page.goto(f"{web.base}/sessions/{session_id}")
        await expect(page.locator("#live-state")).to_have_text("live")
        slow = create_request(
            script({"deltas": 500, "delay_ms": 20}), model="script", session_id=session_id
        )
        busy = await runs.CreateRun(slow, metadata=md)
        turn = page.locator(f"section.turn[data-run='{busy.run_id}']")
        await expect(turn.locator("article.streaming pre.delta")).to_contain_text("w3 ")

        again = create_request(
            script({"text": "a new answer"}),
            model="script",
            session_id=session_id,
            on_busy=pb.BUSY_POLICY_ROLLBACK,
        )
        new = await runs.CreateRun(again, metadata=md)
        last = page.locator(f"section.turn[data-run='{new.run_id}']")
        await expect(last.locator(".msg.role-assistant")).to_contain_text("a new answer")
        note = last.locator(".note-rolled_back")
        await expect(note).to_contain_text(f"cancelled and rolled back run {busy.run_id[:8]}")
        await expect(turn).to_have_class("turn rolled-back")
        await expect(turn.locator(".turn-head .status")).to_have_text("CANCELLED")
        await expect(turn.locator("article.unfinished")).to_contain_text("unfinished")  # cut off
        await screenshot(page, "session-rolled-back")
        await page.reload()  # its messages left the history: the page shows no turn of it
        await expect(page.locator("#turns section.turn")).to_have_count(2)
        await expect(page.locator(".note-rolled_back")).to_have_count(1)
