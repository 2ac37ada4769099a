"""A browser's EventSource follows a run over the server-sent events door (doors/sse.py), in
headless Chromium: the page fetches a stream ticket over Connect with its token in the
Authorization header, opens EventSource with the ticket, and follows the run through two
connections the server's side drops (a proxy aborts them: once while the run waits for an
approval, once while it streams its answer) to its terminal event, with no gap and no repeat.
The token never appears in a URL."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from behest.domain.events import KINDS
from tests.http_support import DroppingProxy
from tests.sse_support import (
    TERMINAL,
    WAITS_THEN_TALKS,
    Web,
    approve,
    sse_settings,
    start_web,
    stop_web,
    stored_events,
)
from tests.support import create_request, kind
from tests.web_support import ALICE, bearer, chromium

pytestmark = pytest.mark.timeout(90)

PAGE = """<!doctype html>
<meta charset="utf-8">
<title>following a run</title>
<script>
const TOKEN = %(token)s, RUN_ID = %(run_id)s, KINDS = %(kinds)s, TERMINAL = %(terminal)s;
window.seen = []; window.opens = 0; window.errors = 0; window.done = false;
(async () => {
  const reply = await fetch("/agent.v1.RunService/CreateStreamTicket", {
    method: "POST",
    headers: {"content-type": "application/json", "authorization": "Bearer " + TOKEN},
    body: JSON.stringify({runId: RUN_ID}),
  });
  const {ticket} = await reply.json();
  const url = `/v1/runs/${RUN_ID}/events?ticket=${encodeURIComponent(ticket)}`;
  const source = new EventSource(url);
  source.onopen = () => { window.opens += 1; };
  source.onerror = () => { window.errors += 1; };
  for (const kind of KINDS) {
    source.addEventListener(kind, (event) => {
      const data = JSON.parse(event.data);
      window.seen.push({id: event.lastEventId, kind, sequence: data.sequence});
      if (TERMINAL.includes(kind)) { source.close(); window.done = true; }
    });
  }
})();
</script>
"""


@pytest.fixture
async def web(tmp_path: Path) -> AsyncIterator[Web]:
    running = await start_web(sse_settings(tmp_path))
    try:
        yield running
    finally:
        await stop_web(running)


async def waiting_run(web: Web) -> str:
    """A run that has asked for its approval and waits; its id."""
    request = create_request(
        WAITS_THEN_TALKS, model="script", approval_required_tools=["calculator"]
    )
    stream = web.server.runs.CreateRunStream(request, metadata=bearer(ALICE))
    async for event in stream:
        if kind(event) == "approval_requested":
            stream.cancel()
            return event.run_id
    raise AssertionError("the run did not wait for its approval")


def page_for(run_id: str) -> str:
    values = {
        "token": json.dumps(ALICE),
        "run_id": json.dumps(run_id),
        "kinds": json.dumps(sorted(KINDS.values())),
        "terminal": json.dumps(sorted(TERMINAL)),
    }
    return PAGE % values


async def test_event_source_follows_a_run_through_dropped_connections_without_a_gap(
    web: Web,
) -> None:
    run_id = await waiting_run(web)
    async with DroppingProxy(web.port) as proxy, chromium() as browser:
        context = await browser.new_context()
        page = await context.new_page()

        async def serve_page(route: Any) -> None:
            await route.fulfill(status=200, content_type="text/html", body=page_for(run_id))

        await page.route(f"{proxy.base}/follow.html", serve_page)
        proxy.drop_after(3)  # while the run waits
        await page.goto(f"{proxy.base}/follow.html")
        await proxy.dropped.wait()
        await page.wait_for_function(
            "window.opens >= 2 && window.seen.some(e => e.kind === 'approval_requested')"
        )

        proxy.drop_after(2)  # while it streams its answer
        await approve(web, run_id)
        await proxy.dropped.wait()
        await page.wait_for_function("window.done", timeout=30_000)
        seen = await page.evaluate("window.seen")
        opens, errors = await page.evaluate("[window.opens, window.errors]")
        await context.close()

    stored = await stored_events(web, run_id)
    assert [int(e["id"]) for e in seen] == list(range(1, len(stored) + 1))
    assert [int(e["sequence"]) for e in seen] == [e.sequence for e in stored]
    assert [e["kind"] for e in seen] == [e.event for e in stored]
    assert seen[-1]["kind"] == "run_completed"
    assert proxy.drops == 2 and opens == 3 and errors >= 2
    assert_token_only_in_headers(proxy.requests(), run_id)


def assert_token_only_in_headers(sent: bytes, run_id: str) -> None:
    """What the browser sent: the token only ever in the Authorization header of the ticket's
    request, never in a request line; EventSource's requests name the ticket and resume."""
    text = sent.decode("latin-1")
    # (A request on a kept-alive connection may follow a body without a line break.)
    request_lines = re.findall(r"(?:GET|POST|OPTIONS|HEAD) /[^\r\n ]* HTTP/1\.1", text)
    assert request_lines and all(ALICE not in line for line in request_lines)
    streams = [line for line in request_lines if f"/v1/runs/{run_id}/events?ticket=bst_" in line]
    assert len(streams) == 3, request_lines
    headers = [line.lower() for line in text.splitlines() if ALICE in line]
    assert headers == [f"authorization: bearer {ALICE}".lower()], headers
    assert len(re.findall(r"(?im)^last-event-id: \d+", text)) == 2
