"""The run inspector's HTTP side without a browser: CSRF on every POST, the cookie, sign-out,
the live tail's resumption (Last-Event-ID), security headers, HTTPS, settings and the CLI, and
the words of its timeline, which are the terminal's."""

from __future__ import annotations

import io
import re
import ssl
from pathlib import Path

import pytest
from markupsafe import escape

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest.app import App
from behest.cli import build_parser
from behest.cli.render import EventPrinter
from behest.client import Approval, BehestClient, Decision
from behest.config import Settings
from tests.certs import CertificateAuthority
from tests.e2e.test_outcome_unknown import until_unknown
from tests.e2e.test_resume import interrupt_during_tool
from tests.support import (
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    start_server,
    start_server_with_plugins,
    stop_server,
)
from tests.web_support import (
    ALICE,
    AUTH,
    BOB,
    CAROL,
    Inspector,
    bearer,
    fetch,
    inspector,
    session_cookie,
)

CALC = {"name": "calculator", "arguments": {"expression": "6*7"}}


async def waiting_run(web_runs: object) -> tuple[str, str]:
    """A run that waits for an approval of a calculator call: (run id, call id)."""
    request = create_request(script({"tool_calls": [CALC]}, {"text": "ok"}), model="script")
    request.approval_required_tools.append("calculator")
    stream = web_runs.CreateRunStream(request, metadata=bearer(ALICE))  # type: ignore[attr-defined]
    async for event in stream:
        if kind(event) == "approval_requested":
            return event.run_id, event.approval_requested.call.id
    raise AssertionError("the run did not wait")


async def test_every_post_needs_the_csrf_token_of_its_sign_in(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web:
        run_id, call_id = await waiting_run(web.server.runs)
        cookies = await session_cookie(web.base, ALICE)
        other = await session_cookie(web.base, ALICE)  # a second sign-in: its own token
        theirs = (await fetch(f"{web.base}/runs", cookies=other)).csrf()
        mine = (await fetch(f"{web.base}/runs", cookies=cookies)).csrf()
        assert mine != theirs
        answer = {"call_id": call_id, "kind": "approval", "decision": "allow"}
        url = f"{web.base}/runs/{run_id}"
        for form in (answer, {**answer, "csrf": theirs}, {**answer, "csrf": "0" * 64}):
            refused = await fetch(f"{url}/answer", cookies=cookies, form=form)
            assert refused.status == 403, refused.body
            assert "nothing was done" in refused.body
        assert (await fetch(f"{url}/cancel", cookies=cookies, form={})).status == 403
        assert (await fetch(f"{web.base}/signout", cookies=cookies, form={})).status == 403
        signing_in = await fetch(f"{web.base}/signin", form={"token": ALICE})
        assert signing_in.status == 403
        run = await web.server.runs.GetRun(pb.GetRunRequest(run_id=run_id), metadata=bearer(ALICE))
        assert run.run.status == c.RUN_STATUS_WAITING_FOR_INPUT  # none of them did anything

        done = await fetch(f"{url}/answer", cookies=cookies, form={**answer, "csrf": mine})
        assert (done.status, done.headers["location"]) == (303, f"/runs/{run_id}")
        watch = pb.WatchRunEventsRequest(run_id=run_id)
        rest = await collect(web.server.runs.WatchRunEvents(watch, metadata=bearer(ALICE)))
        assert kind(rest[-1]) == "run_completed"


async def test_the_cookie_is_secure_httponly_strict_and_sign_out_ends_it(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web:
        form = await fetch(f"{web.base}/signin")
        nonce = {"behest_signin": form.cookie("behest_signin")}
        signed = await fetch(
            f"{web.base}/signin", cookies=nonce, form={"csrf": form.csrf(), "token": ALICE}
        )
        header = next(h for h in signed.cookies if h.startswith("behest_session="))
        assert {"HttpOnly", "Secure", "SameSite=strict"} <= {p.strip() for p in header.split(";")}
        cookies = {"behest_session": signed.cookie("behest_session")}
        page = await fetch(f"{web.base}/runs", cookies=cookies)
        assert page.status == 200 and "alice" in page.body
        assert ALICE not in page.body  # the token never shows in a page
        out = await fetch(f"{web.base}/signout", cookies=cookies, form={"csrf": page.csrf()})
        assert out.status == 303
        assert any("behest_session=" in h and "Max-Age=0" in h for h in out.cookies)
        again = await fetch(f"{web.base}/runs", cookies=cookies)  # a copy of the old cookie
        assert (again.status, again.headers["location"]) == (303, "/signin")
        bad = await fetch(
            f"{web.base}/signin", cookies=nonce, form={"csrf": form.csrf(), "token": BOB + "x"}
        )
        assert bad.status == 401 and "invalid token" in bad.body


async def test_the_live_tail_resumes_after_last_event_id(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web:
        request = create_request(script({"text": "one two three four five"}), model="script")
        events = await collect(web.server.runs.CreateRunStream(request, metadata=bearer(ALICE)))
        last = events[-1].sequence
        cookies = await session_cookie(web.base, ALICE)
        live = f"{web.base}/runs/{events[0].run_id}/live"
        for url, headers, first in (
            (f"{live}?after=2", {}, 3),
            (f"{live}?after=2", {"Last-Event-ID": "5"}, 6),  # a reconnect: the header wins
        ):
            reply = await fetch(url, cookies=cookies, headers=headers)
            assert reply.headers["content-type"].startswith("text/event-stream")
            ids = [int(line[4:]) for line in reply.body.splitlines() if line.startswith("id: ")]
            assert ids == list(range(first, last + 1))
            assert reply.body.rstrip().endswith("event: end\ndata: {}")
        at_end = await fetch(live, cookies=cookies, headers={"Last-Event-ID": str(last)})
        assert "id: " not in at_end.body and "event: end" in at_end.body
        refused = await fetch(f"{live}?after=x", cookies=cookies)
        assert refused.status == 400
        assert (await fetch(live)).status == 401  # not signed in


async def test_pages_forbid_inline_scripts_and_are_never_cached(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web:
        cookies = await session_cookie(web.base, ALICE)
        for path in ("/runs", "/approvals", "/sessions", "/dashboard", "/signin"):
            reply = await fetch(f"{web.base}{path}", cookies=cookies)
            assert reply.status == 200, path
            assert "script-src 'self'" in reply.headers["content-security-policy"]
            assert "unsafe-inline" not in reply.headers["content-security-policy"]
            assert reply.headers["cache-control"] == "no-store"
            assert reply.headers["x-content-type-options"] == "nosniff"
            assert "<script>" not in reply.body  # only <script src=/static/inspector.js>
        script_file = await fetch(f"{web.base}/static/inspector.js")
        assert script_file.status == 200 and "textContent" in script_file.body
        assert (await fetch(f"{web.base}/runs")).headers["location"] == "/signin"


async def test_without_authentication_everyone_signs_in_as_the_default_tenant(
    tmp_path: Path,
) -> None:
    server = await start_server(fast_settings(tmp_path, http_listen="127.0.0.1:0"))
    try:
        assert server.app.web is not None
        base = f"http://127.0.0.1:{server.app.web.port}"
        form = await fetch(f"{base}/signin")
        assert 'name="token"' not in form.body
        cookies = await session_cookie(base, "")
        page = await fetch(f"{base}/runs", cookies=cookies)
        assert "anonymous" in page.body and "tenant <b>default</b>" in page.body
    finally:
        await stop_server(server)


async def test_https_with_the_grpc_sides_certificate(tmp_path: Path) -> None:
    authority = CertificateAuthority(tmp_path)
    pem = authority.server()
    tls = {"tls": {"cert_file": str(pem.cert_file), "key_file": str(pem.key_file)}}
    settings = fast_settings(tmp_path / "data", http_listen="127.0.0.1:0").with_tables(
        {**AUTH, **tls}, source="test"
    )
    app = App(settings)
    await app.start()
    try:
        assert app.web is not None and app.web.scheme == "https"
        context = ssl.create_default_context(cafile=str(authority.pem.cert_file))
        reply = await fetch(f"https://127.0.0.1:{app.web.port}/signin", context=context)
        assert reply.status == 200
        assert reply.headers["strict-transport-security"].startswith("max-age=")
    finally:
        await app.stop(0)


async def test_the_http_side_is_off_by_default_and_refused_off_loopback_without_tls(
    tmp_path: Path,
) -> None:
    assert Settings().http_listen == ""
    assert App(fast_settings(tmp_path)).web is None
    with pytest.raises(ValueError, match="not a loopback address"):
        Settings().with_values({"http_listen": "0.0.0.0:8080", **AUTH}, source="test")
    with pytest.raises(ValueError, match="not a loopback address"):
        Settings().with_values({"http_listen": "0.0.0.0:8080"}, source="test")
    authority = CertificateAuthority(tmp_path)
    pem = authority.server()
    mtls = {
        "auth": {"mode": "mtls"},
        "tls": {
            "cert_file": str(pem.cert_file),
            "key_file": str(pem.key_file),
            "client_ca_file": str(authority.pem.cert_file),
        },
    }
    with pytest.raises(ValueError, match="bearer tokens"):
        Settings().with_values({"http_listen": "127.0.0.1:8080", **mtls}, source="test")
    insecure = {"auth": {"mode": "none", "allow_insecure": True}}
    allowed = Settings().with_values({"http_listen": "0.0.0.0:8080", **insecure}, source="t")
    assert allowed.http_listen == "0.0.0.0:8080"


def test_behest_serve_takes_http_listen() -> None:
    args = build_parser().parse_args(["serve", "--http-listen", "127.0.0.1:8081"])
    assert args.http_listen == "127.0.0.1:8081"
    assert Settings.load(http_listen=args.http_listen).http_listen == "127.0.0.1:8081"


async def test_deciding_needs_the_approver_role_as_over_grpc(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web:
        run_id, call_id = await waiting_run(web.server.runs)
        cookies = await session_cookie(web.base, CAROL)
        page = await fetch(f"{web.base}/approvals", cookies=cookies)
        assert call_id in page.body  # carol sees what waits in her tenant
        form = {"call_id": call_id, "kind": "approval", "decision": "allow", "csrf": page.csrf()}
        refused = await fetch(f"{web.base}/runs/{run_id}/answer", cookies=cookies, form=form)
        assert refused.status == 403
        assert "needs the role &#39;approver&#39;" in refused.body  # escaped, as all
        run = await web.server.runs.GetRun(pb.GetRunRequest(run_id=run_id), metadata=bearer(ALICE))
        assert run.run.status == c.RUN_STATUS_WAITING_FOR_INPUT


async def test_the_runs_page_filters_by_time_and_says_what_is_wrong(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web:
        done = await collect(
            web.server.runs.CreateRunStream(create_request("hi"), metadata=bearer(ALICE))
        )
        run_id = done[0].run_id
        cookies = await session_cookie(web.base, ALICE)
        runs = f"{web.base}/runs"
        assert run_id in (await fetch(f"{runs}?since=2000-01-01T00:00", cookies=cookies)).body
        assert run_id not in (await fetch(f"{runs}?since=2999-01-01T00:00", cookies=cookies)).body
        assert run_id not in (await fetch(f"{runs}?until=2000-01-01T00:00", cookies=cookies)).body
        assert run_id not in (await fetch(f"{runs}?model=gpt-4o", cookies=cookies)).body
        bad = await fetch(f"{runs}?since=yesterday", cookies=cookies)
        assert bad.status == 400 and "since must be a time" in bad.body
        bad = await fetch(f"{runs}?status=SLEEPING", cookies=cookies)
        assert bad.status == 400 and "status must be one of" in bad.body


async def test_the_timeline_says_each_event_in_the_terminals_words(tmp_path: Path) -> None:
    async with inspector(tmp_path) as web:
        run_id, call_id = await waiting_run(web.server.runs)
        out = io.StringIO()
        async with BehestClient(web.server.address, token=ALICE) as client:
            denial = Approval(Decision.DENY, reason="not today")
            await client.submit_approvals(run_id, {call_id: denial})
            printer = EventPrinter(out, io.StringIO())
            async for event in client.watch(run_id):
                printer.render(event)
        page = await fetch(
            f"{web.base}/runs/{run_id}", cookies=await session_cookie(web.base, ALICE)
        )
        said = [line for line in out.getvalue().splitlines() if line[:1] in "→←?✓✗!"]
        assert [line[:1] for line in said] == ["→", "?", "✗", "✓"], said
        assert said[2] == "✗ calculator denied by alice: not today"
        for line in said:
            assert str(escape(line)) in page.body, line


async def test_an_outcome_unknown_is_reconciled_from_the_run_page(tmp_path: Path) -> None:
    steps = script(
        {"tool_calls": [{"name": "slow_unsafe", "arguments": {"seconds": 1}}]},
        {"say": "tool_results"},
    )
    first = await start_server_with_plugins(fast_settings(tmp_path))
    run_id = await interrupt_during_tool(first, steps)  # it runs as `anonymous` of default
    server = await start_server_with_plugins(fast_settings(tmp_path, http_listen="127.0.0.1:0"))
    web = Inspector(server)
    try:
        await until_unknown(server, run_id)
        cookies = await session_cookie(web.base, "")
        page = await fetch(f"{web.base}/runs/{run_id}", cookies=cookies)
        assert "its outcome is unknown" in page.body and "slow_unsafe" in page.body
        assert "outcome_unknown" in page.body  # the executions table
        execution = re.search(r'name="execution_id" value="([0-9a-f-]+)"', page.body)
        assert execution is not None
        form = {
            "csrf": page.csrf(),
            "kind": "reconcile",
            "call_id": "call_1_1",
            "execution_id": execution.group(1),
            "verdict": "ran",
            "output": "slept, the backend says",
        }
        answered = await fetch(f"{web.base}/runs/{run_id}/answer", cookies=cookies, form=form)
        assert answered.status == 303, answered.body
        events = await collect(server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))
        after = await fetch(f"{web.base}/runs/{run_id}", cookies=cookies)
    finally:
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    assert said == "slow_unsafe: slept, the backend says"
    assert "reconciled (ran)" in after.body
