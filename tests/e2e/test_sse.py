"""Server-sent events of a run (doors/sse.py) over real HTTP, on SQLite and PostgreSQL: a run
streamed from POST /v1/runs and GET /v1/runs/{id}/events, the server's side dropping the
connection mid-run (a proxy in between aborts it), resumed with Last-Event-ID and ?after=
without a gap or a repeat; heartbeats while a run is quiet; the end after the terminal event;
POST /v1/runs idempotent with its client_request_id; a stream taken up on another replica
with a ticket minted on the first (PostgreSQL)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from tests.http_support import DroppingProxy
from tests.sse_support import (
    HEARTBEAT_S,
    TIMEOUT,
    WAITS_THEN_TALKS,
    Stream,
    Web,
    approve,
    assert_whole,
    auth,
    create_body,
    read_stream,
    run_ids,
    sse_settings,
    start_web,
    stop_web,
    stored_events,
)
from tests.support import script
from tests.web_support import ALICE, bearer


@pytest.fixture
async def web(database_url: str, tmp_path: Path) -> AsyncIterator[Web]:
    """A server with its HTTP listener, on SQLite and (a second run) on PostgreSQL."""
    running = await start_web(sse_settings(tmp_path, database_url))
    try:
        yield running
    finally:
        await stop_web(running)


def has(kind: str) -> object:
    return lambda stream: any(event.event == kind for event in stream.events)


async def test_a_stream_the_server_drops_mid_run_resumes_with_no_gap_and_no_repeat(
    web: Web,
) -> None:
    approving: list[asyncio.Task[None]] = []
    async with DroppingProxy(web.port) as proxy, httpx2.AsyncClient(timeout=TIMEOUT) as client:
        # 1. The run's own stream, dropped after its third event.
        proxy.drop_after(3)
        first = await read_stream(
            client, "POST", f"{proxy.base}/v1/runs", headers=auth(),
            json_body=create_body(WAITS_THEN_TALKS, approval_required_tools=["calculator"]),
        )  # fmt: skip
        assert first.status == 200 and first.dropped, first
        assert first.events and first.events[-1].event != "run_completed"
        run_id = first.events[0].json()["runId"]

        # 2. Resumed with Last-Event-ID; once the run waits, it is approved and goes on live,
        # and this connection is dropped two events later.
        def on_item(stream: Stream) -> bool:
            if not approving and any(e.event == "approval_requested" for e in stream.events):
                proxy.drop_after(2)
                approving.append(asyncio.create_task(approve(web, run_id)))
            return False

        url = f"{proxy.base}/v1/runs/{run_id}/events"
        second = await read_stream(
            client, "GET", url, headers=auth(**{"last-event-id": first.last_id}), until=on_item
        )
        await asyncio.gather(*approving)
        assert second.status == 200 and second.dropped, second
        assert second.events[0].sequence == first.events[-1].sequence + 1

        # 3. Resumed with ?after=, to the end.
        third = await read_stream(client, "GET", f"{url}?after={second.last_id}", headers=auth())
        assert third.status == 200 and not third.dropped, third

    assert proxy.drops == 2
    assert b"last-event-id: " + first.last_id.encode() in proxy.requests().lower()
    events = first.events + second.events + third.events
    assert_whole(events, await stored_events(web, run_id))
    assert third.events[-1].event == "run_completed"


async def test_a_finished_run_replays_after_the_cursor_and_last_event_id_wins(web: Web) -> None:
    async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
        body = create_body(script({"text": "a few words to stream"}))
        whole = await read_stream(
            client, "POST", f"{web.base}/v1/runs", headers=auth(), json_body=body
        )
        run_id = whole.events[0].json()["runId"]
        n = len(whole.events)
        url = f"{web.base}/v1/runs/{run_id}/events"

        everything = await read_stream(client, "GET", url, headers=auth())
        after = await read_stream(client, "GET", f"{url}?after=3", headers=auth())
        header_wins = await read_stream(
            client, "GET", f"{url}?after=3", headers=auth(**{"last-event-id": "5"})
        )
        at_end = await read_stream(client, "GET", url, headers=auth(**{"last-event-id": str(n)}))
        beyond = await read_stream(client, "GET", f"{url}?after={n + 1}", headers=auth())
        bad = await read_stream(client, "GET", f"{url}?after=-1", headers=auth())
        head = await client.head(url, headers=auth())

    stored = await stored_events(web, run_id)
    assert_whole(whole.events, stored)
    assert whole.headers["content-type"].startswith("text/event-stream")
    assert whole.headers["cache-control"] == "no-store"
    assert whole.retry == ["1000"]
    assert everything.events == whole.events
    assert [e.sequence for e in after.events] == list(range(4, n + 1))
    assert after.events == stored[3:]
    assert header_wins.events == stored[5:]
    # A reconnect after the end: 204 tells EventSource to stop.
    assert at_end.status == 204 and at_end.events == []
    assert beyond.status == 400 and '"out_of_range"' in beyond.body
    assert bad.status == 400 and '"invalid_argument"' in bad.body
    assert "sequence numbers" in bad.body
    assert head.status_code == 405  # no stream held open for a body nobody reads


async def test_a_quiet_run_gets_heartbeats_and_its_stream_ends_after_the_terminal_event(
    web: Web,
) -> None:
    async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
        body = create_body(WAITS_THEN_TALKS, approval_required_tools=["calculator"])
        started = await read_stream(
            client, "POST", f"{web.base}/v1/runs", headers=auth(), json_body=body,
            until=has("approval_requested"),
        )  # fmt: skip
        run_id = started.events[0].json()["runId"]
        url = f"{web.base}/v1/runs/{run_id}/events"
        waiting = started.last_id

        # The run waits: nothing but comments, every HEARTBEAT_S, until it is approved.
        quiet = await read_stream(
            client, "GET", url, headers=auth(**{"last-event-id": waiting}),
            until=lambda stream: len(stream.comments) >= 3,
        )  # fmt: skip
        assert quiet.status == 200 and quiet.events == []
        assert quiet.comments[:3] == ["keep-alive"] * 3

        await approve(web, run_id)
        rest = await read_stream(client, "GET", url, headers=auth(**{"last-event-id": waiting}))

    assert not rest.dropped  # the server ended the body: the run is over
    assert rest.events[0].event == "approval_resolved"
    assert rest.events[-1].event == "run_completed"
    assert_whole(started.events + rest.events, await stored_events(web, run_id))
    assert HEARTBEAT_S < 1


async def test_post_runs_is_idempotent_with_its_client_request_id(web: Web) -> None:
    key = f"sse-{uuid.uuid4()}"
    body = create_body(script({"text": "only once"}), client_request_id=key)
    before = await run_ids(web)
    async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
        first = await read_stream(
            client, "POST", f"{web.base}/v1/runs", headers=auth(), json_body=body
        )
        again = await read_stream(
            client, "POST", f"{web.base}/v1/runs", headers=auth(), json_body=body
        )
        changed = await read_stream(
            client, "POST", f"{web.base}/v1/runs", headers=auth(),
            json_body={**body, "input": script({"text": "another"})},
        )  # fmt: skip

    run_id = first.events[0].json()["runId"]
    assert again.status == 200
    assert again.events == first.events  # the same run, from its first event
    assert_whole(first.events, await stored_events(web, run_id))
    assert changed.status == 409 and '"already_exists"' in changed.body
    assert set(await run_ids(web)) - set(before) == {run_id}


async def test_a_stopping_server_closes_its_open_streams(tmp_path: Path) -> None:
    web = await start_web(sse_settings(tmp_path))
    stopped = False
    try:
        async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
            body = create_body(WAITS_THEN_TALKS, approval_required_tools=["calculator"])
            opened = await client.send(
                client.build_request("POST", f"{web.base}/v1/runs", headers=auth(), json=body),
                stream=True,
            )
            lines = opened.aiter_lines()
            while await anext(lines) != "event: approval_requested":
                pass
            async with asyncio.timeout(10):
                await stop_web(web)
                stopped = True
                with pytest.raises(httpx2.TransportError):  # cut, not ended: resume elsewhere
                    async for _ in lines:
                        pass
            await opened.aclose()
    finally:
        if not stopped:
            await stop_web(web)


async def test_a_stream_resumes_on_another_replica_with_a_ticket_minted_on_the_first(
    tmp_path: Path, postgres_url: str
) -> None:
    suffix = uuid.uuid4().hex[:8]
    first, second = [
        await start_web(sse_settings(tmp_path / name, postgres_url, node_id=f"sse-{name}-{suffix}"))
        for name in ("a", "b")
    ]
    approving: list[asyncio.Task[None]] = []
    try:
        async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
            body = create_body(WAITS_THEN_TALKS, approval_required_tools=["calculator"])
            started = await read_stream(
                client, "POST", f"{first.base}/v1/runs", headers=auth(), json_body=body,
                until=has("approval_requested"),
            )  # fmt: skip
            run_id = started.events[0].json()["runId"]
            request = pb.CreateStreamTicketRequest(run_id=run_id)
            minted = await first.server.runs.CreateStreamTicket(request, metadata=bearer(ALICE))

            def on_item(stream: Stream) -> bool:
                if stream.comments and not approving:  # the second replica follows the run
                    approving.append(asyncio.create_task(approve(first, run_id)))
                return False

            url = f"{second.base}/v1/runs/{run_id}/events?ticket={minted.ticket}"
            rest = await read_stream(
                client, "GET", url, headers={"last-event-id": started.last_id}, until=on_item
            )
            await asyncio.gather(*approving)
        assert rest.status == 200 and not rest.dropped
        assert_whole(started.events + rest.events, await stored_events(second, run_id))
        assert rest.events[-1].event == "run_completed"
    finally:
        for web in (first, second):
            await stop_web(web)
