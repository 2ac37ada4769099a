"""A running tool's question in the inspector (headless Chromium, a real server with the echo
MCP server, whose `book` tool asks "How many nights in {city}?"): the run's page shows it with
a form made from its schema; an answer the schema refuses shows the server's words and the
question stays open; an accepted one reaches the MCP server and the run completes; a question
that comes while the page is open says so; another tenant neither sees nor answers it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from tests.e2e.test_elicitation import BOOK, echo_servers
from tests.e2e.test_inspector import until
from tests.support import create_request, kind
from tests.web_support import (
    ALICE,
    BOB,
    bearer,
    chromium,
    expect,
    fetch,
    inspector,
    screenshot,
    session_cookie,
    signed_in,
)

QUESTION = "How many nights in Lisbon?"


def booking(*, approval: bool = False) -> pb.CreateRunRequest:
    request = create_request(BOOK, model="script")
    if approval:
        request.approval_required_tools.append("echo__book")
    return request


async def asked(web: Any, request: pb.CreateRunRequest) -> tuple[Any, str, str]:
    """Alice's run of `request` once its tool has asked: (its stream, run id, question id)."""
    stream = web.server.runs.CreateRunStream(request, metadata=bearer(ALICE))
    events = await until(stream, "elicitation_requested")
    return stream, events[0].run_id, events[-1].elicitation_requested.elicitation_id


async def test_a_question_is_answered_from_the_run_page_after_a_refused_answer(
    tmp_path: Path,
) -> None:
    async with inspector(tmp_path, mcp=echo_servers()) as web, chromium() as browser:
        stream, run_id, question_id = await asked(web, booking())
        page = await signed_in(browser, web.base, ALICE)
        await page.click("a[href='/approvals']")
        listed = page.locator(f".pending.question[data-call='{question_id}']")
        await expect(listed).to_contain_text(QUESTION)
        await listed.locator(f"a[href='/runs/{run_id}']").click()
        await page.wait_for_url(f"{web.base}/runs/{run_id}")
        await expect(page.locator("#run-status")).to_have_text("WAITING_FOR_INPUT")
        pending = page.locator(f"section.waiting .pending[data-call='{question_id}']")
        await expect(pending).to_contain_text("echo__book")
        await expect(pending.locator("pre.message")).to_have_text(QUESTION)
        await expect(pending.locator("label.field").first).to_contain_text("1 to 30 · required")
        asked_item = page.locator("li.item[data-name=elicitation_requested]")
        await expect(asked_item).to_contain_text(QUESTION)
        await expect(asked_item).to_contain_text('"maximum": 30')
        await screenshot(page, "question")

        await pending.locator("input[name='field.nights']").fill("99")
        await pending.locator("input[name='field.breakfast']").check()
        await pending.locator("button[value=accept]").click()
        refused = page.locator(f".pending[data-call='{question_id}'] p.refused")
        await expect(refused).to_contain_text("does not match the question's schema")
        await expect(refused).to_contain_text("99 is greater than the maximum of 30")
        await expect(page.locator("#run-status")).to_have_text("WAITING_FOR_INPUT")
        nights = page.locator("input[name='field.nights']")
        await expect(nights).to_have_value("99")  # what was typed is kept
        await expect(page.locator("input[name='field.breakfast']")).to_be_checked()
        await screenshot(page, "question-refused")
        still = await web.server.runs.ListPendingCalls(
            pb.ListPendingCallsRequest(run_id=run_id), metadata=bearer(ALICE)
        )
        assert [p.elicitation.elicitation_id for p in still.calls] == [question_id]

        await nights.fill("2")
        await page.locator("input[name='field.breakfast']").uncheck()
        await page.locator("button[value=accept]").click()
        await page.wait_for_url(f"{web.base}/runs/{run_id}")
        await expect(page.locator("#run-status")).to_have_text("COMPLETED", timeout=20_000)
        answered = page.locator("li.item[data-name=elicitation_answered]")
        await expect(answered).to_contain_text("question answered by alice")
        await expect(page.locator("#timeline")).to_contain_text("booked 2 night(s) in Lisbon (")
        await expect(page.locator("section.waiting")).to_have_count(0)
        await screenshot(page, "question-answered")
        rest = [kind(e) async for e in stream]
        assert rest[-1] == "run_completed"


async def test_a_question_asked_while_the_page_is_open_is_announced_and_declined(
    tmp_path: Path,
) -> None:
    async with inspector(tmp_path, mcp=echo_servers()) as web, chromium() as browser:
        stream = web.server.runs.CreateRunStream(booking(approval=True), metadata=bearer(ALICE))
        events = await until(stream, "approval_requested")
        run_id, call_id = events[0].run_id, events[-1].approval_requested.call.id
        page = await signed_in(browser, web.base, ALICE)
        await page.goto(f"{web.base}/runs/{run_id}")
        await expect(page.locator(f".pending[data-call='{call_id}']")).to_have_count(1)
        await expect(page.locator("#live-state")).to_have_text("live")
        allow = pb.ApprovalAnswer(call_id=call_id, decision=pb.APPROVAL_DECISION_ALLOW)
        await web.server.runs.SubmitApprovals(
            pb.SubmitApprovalsRequest(run_id=run_id, approvals=[allow]), metadata=bearer(ALICE)
        )
        notice = page.locator("#waiting-notice")  # the question came over the live tail
        await expect(notice).to_contain_text("The run waits for an answer")
        await expect(page.locator(f".pending[data-call='{call_id}']")).to_have_count(0)
        await expect(page.locator("#run-status")).to_have_text("WAITING_FOR_INPUT")
        await expect(page.locator("li.item[data-name=elicitation_requested]")).to_contain_text(
            QUESTION
        )
        await screenshot(page, "question-announced")
        await notice.locator("a").click()
        await page.wait_for_url(f"{web.base}/runs/{run_id}")
        question = page.locator(".pending.question")
        await expect(question.locator("pre.message")).to_have_text(QUESTION)
        await question.locator("button[value=decline]").click()
        await page.wait_for_url(f"{web.base}/runs/{run_id}")
        await expect(page.locator("#run-status")).to_have_text("COMPLETED", timeout=20_000)
        answered = page.locator("li.item.error[data-name=elicitation_answered]")
        await expect(answered).to_contain_text("question declined by alice")
        await expect(page.locator("#timeline")).to_contain_text(
            "not booked: the user chose decline"
        )
        assert [kind(e) async for e in stream][-1] == "run_completed"


async def test_another_tenant_neither_sees_nor_answers_a_question(tmp_path: Path) -> None:
    async with inspector(tmp_path, mcp=echo_servers()) as web, chromium() as browser:
        stream, run_id, question_id = await asked(web, booking())
        bobs = await signed_in(browser, web.base, BOB)
        await bobs.click("a[href='/approvals']")
        await expect(bobs.locator("#no-calls")).to_be_visible()
        shown = await bobs.goto(f"{web.base}/runs/{run_id}")
        assert shown is not None and shown.status == 404
        assert QUESTION not in await bobs.content()

        cookies = await session_cookie(web.base, BOB)
        csrf = (await fetch(f"{web.base}/approvals", cookies=cookies)).csrf()
        form = {
            "csrf": csrf,
            "kind": "elicitation",
            "call_id": question_id,
            "action": "accept",
            "field.nights": "3",
        }
        refused = await fetch(f"{web.base}/runs/{run_id}/answer", cookies=cookies, form=form)
        assert refused.status == 404
        assert QUESTION not in refused.body
        still = await web.server.runs.ListPendingCalls(
            pb.ListPendingCallsRequest(run_id=run_id), metadata=bearer(ALICE)
        )
        assert [p.elicitation.elicitation_id for p in still.calls] == [question_id]
        got = await web.server.runs.GetRun(pb.GetRunRequest(run_id=run_id), metadata=bearer(ALICE))
        assert got.run.status == c.RUN_STATUS_WAITING_FOR_INPUT

        alices = await session_cookie(web.base, ALICE)
        page = await fetch(f"{web.base}/runs/{run_id}", cookies=alices)
        form["csrf"] = page.csrf()
        form["action"] = "cancel"
        answered = await fetch(f"{web.base}/runs/{run_id}/answer", cookies=alices, form=form)
        assert answered.status == 303, answered.body
        rest = [e async for e in stream]
        assert kind(rest[-1]) == "run_completed"
        said = [e.elicitation_answered for e in rest if kind(e) == "elicitation_answered"]
        assert said[0].action == pb.ELICITATION_ACTION_CANCEL and said[0].answered_by == "alice"
