"""Who may use the server-sent events door, and what it refuses (doors/sse.py), over real HTTP:
the gRPC side's bearer tokens and tenants (no token → 401, another tenant's run → 404), stream
tickets for EventSource (that run only, until they expire), CORS for configured origins only,
bounded and checked bodies that write nothing when refused, and the gRPC side's stream slots."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import httpx2
import pytest
import sqlalchemy as sa

from behest._proto.agent.v1 import run_pb2 as pb
from behest.runs.tickets import digest_of
from behest.store.sql.ticket_tables import stream_tickets
from tests.sse_support import (
    ALLOWED_ORIGIN,
    TIMEOUT,
    WAITS_THEN_TALKS,
    Web,
    auth,
    create_body,
    read_stream,
    run_ids,
    sse_settings,
    start_web,
    stop_web,
    stored_events,
)
from tests.stored import engine_on
from tests.support import script
from tests.web_support import ALICE, BOB, bearer

MAX_BODY = 64 * 1024
CLIENT_LOGGERS = ("httpx2", "httpcore2")


@pytest.fixture
async def web(database_url: str, tmp_path: Path) -> AsyncIterator[Web]:
    """A server with its HTTP listener, on SQLite and (a second run) on PostgreSQL."""
    settings = sse_settings(tmp_path, database_url, max_receive_message_bytes=MAX_BODY)
    running = await start_web(settings)
    try:
        yield running
    finally:
        await stop_web(running)


async def finished_run(web: Web, token: str = ALICE) -> str:
    request = pb.CreateRunRequest(input="done at once")
    request.provider.value, request.model.value = "local", "echo"
    stream = web.server.runs.CreateRunStream(request, metadata=bearer(token))
    events = [event async for event in stream]
    return events[0].run_id


async def mint(web: Web, run_id: str, token: str = ALICE) -> str:
    request = pb.CreateStreamTicketRequest(run_id=run_id)
    minted = await web.server.runs.CreateStreamTicket(request, metadata=bearer(token))
    return minted.ticket


async def test_no_token_is_401_and_another_tenants_run_is_404_like_a_missing_one(
    web: Web,
) -> None:
    run_id = await finished_run(web)
    url = f"{web.base}/v1/runs/{run_id}/events"
    async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
        anonymous = await read_stream(client, "GET", url)
        wrong = await read_stream(client, "GET", url, headers=auth("not-a-token-of-this-server"))
        create = await read_stream(
            client, "POST", f"{web.base}/v1/runs", json_body=create_body(script({"text": "x"}))
        )
        theirs = await read_stream(client, "GET", url, headers=auth(BOB))
        missing = await read_stream(
            client, "GET", f"{web.base}/v1/runs/{uuid.uuid4()}/events", headers=auth(BOB)
        )

    for refused in (anonymous, wrong, create):
        assert refused.status == 401, refused
        assert json.loads(refused.body)["code"] == "unauthenticated"
    assert "not-a-token" not in wrong.body
    assert theirs.status == missing.status == 404
    assert json.loads(theirs.body) == {"code": "not_found", "message": f"run {run_id} not found"}
    with pytest.raises(grpc.aio.AioRpcError) as minting:
        await mint(web, run_id, BOB)
    assert minting.value.code() == grpc.StatusCode.NOT_FOUND
    assert await run_ids(web, BOB) == []


async def test_a_stream_ticket_opens_its_run_only_and_only_until_it_expires(web: Web) -> None:
    run_id, other = await finished_run(web), await finished_run(web)
    bobs = await finished_run(web, BOB)
    ticket, bobs_ticket = await mint(web, run_id), await mint(web, bobs, BOB)
    url = f"{web.base}/v1/runs/{run_id}/events"
    async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
        opened = await read_stream(client, "GET", f"{url}?ticket={ticket}")
        again = await read_stream(client, "GET", f"{url}?ticket={ticket}&after=2")
        elsewhere = await read_stream(
            client, "GET", f"{web.base}/v1/runs/{other}/events?ticket={ticket}"
        )
        bobs_here = await read_stream(client, "GET", f"{url}?ticket={bobs_ticket}")
        forged = await read_stream(client, "GET", f"{url}?ticket={ticket[:-2]}xx")
        await expire(web, ticket)
        expired = await read_stream(client, "GET", f"{url}?ticket={ticket}")

    assert opened.status == 200 and opened.events == await stored_events(web, run_id)
    assert again.events == opened.events[2:]  # used again, as EventSource's reconnects do
    for refused, words in (
        (elsewhere, "another run"),
        (bobs_here, "another run"),
        (forged, "not one this server issued"),
        (expired, "expired"),
    ):
        assert refused.status == 401, refused
        body = json.loads(refused.body)
        assert body["code"] == "unauthenticated" and words in body["message"]
        assert ticket not in refused.body


async def expire(web: Web, ticket: str) -> None:
    """Make the ticket's stored expiry a second ago, behind the server's back."""
    tickets = stream_tickets
    expired = sa.update(tickets).where(tickets.c.digest == digest_of(ticket))
    async with engine_on(web.server.app.settings.effective_database_url) as engine:
        async with engine.begin() as conn:
            done = await conn.execute(
                expired.values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
            )
    assert done.rowcount == 1


async def test_only_configured_origins_get_cors_headers(web: Web) -> None:
    run_id = await finished_run(web)
    url = f"{web.base}/v1/runs/{run_id}/events"
    preflight = {
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
    }
    async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
        allowed = await read_stream(client, "GET", url, headers=auth(origin=ALLOWED_ORIGIN))
        other = await read_stream(client, "GET", url, headers=auth(origin="https://evil.example"))
        ok_preflight = await client.options(
            f"{web.base}/v1/runs", headers={"origin": ALLOWED_ORIGIN, **preflight}
        )
        bad_preflight = await client.options(
            f"{web.base}/v1/runs", headers={"origin": "https://evil.example", **preflight}
        )

    assert allowed.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert other.status == 200  # answered, but a browser keeps it from the page
    assert not any(name.startswith("access-control-") for name in other.headers)
    assert ok_preflight.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert "authorization" in ok_preflight.headers["access-control-allow-headers"].lower()
    assert bad_preflight.status_code == 400
    assert "access-control-allow-origin" not in bad_preflight.headers


BAD_BODIES = {
    "malformed JSON": (b'{"input": ', "application/json", 400, "invalid_argument", "JSON"),
    "an unknown field": (
        json.dumps({**create_body("x"), "inptu": "typo"}).encode(),
        "application/json",
        400,
        "invalid_argument",
        "inptu",
    ),
    "not JSON's content type": (
        json.dumps(create_body("x")).encode(),
        "text/plain",
        415,
        "invalid_argument",
        "Content-Type: application/json",
    ),
    "an empty body": (b"", "application/json", 400, "invalid_argument", "empty"),
    "a body over max_receive_message_bytes": (
        json.dumps(create_body("x" * MAX_BODY)).encode(),
        "application/json",
        429,
        "resource_exhausted",
        f"over {MAX_BODY} bytes",
    ),
    "an unknown model": (
        json.dumps(create_body("x", model="no-such-model")).encode(),
        "application/json",
        400,
        "invalid_argument",
        "no-such-model",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
async def test_a_bad_body_is_refused_clearly_and_writes_nothing(web: Web, case: str) -> None:
    body, content_type, status, code, words = BAD_BODIES[case]
    before = await run_ids(web)
    async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
        reply = await client.post(
            f"{web.base}/v1/runs", content=body, headers=auth(**{"content-type": content_type})
        )

    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert reply.json()["code"] == code and words in reply.json()["message"], reply.json()
    assert await run_ids(web) == before


async def test_streams_take_the_grpc_sides_slots_and_give_them_back(tmp_path: Path) -> None:
    web = await start_web(sse_settings(tmp_path, max_streams=1))
    try:
        admission = web.server.app.admission
        async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
            body = create_body(WAITS_THEN_TALKS, approval_required_tools=["calculator"])
            opened = await client.send(
                client.build_request("POST", f"{web.base}/v1/runs", headers=auth(), json=body),
                stream=True,
            )
            assert opened.status_code == 200 and admission.open_streams("acme") == 1
            full = await read_stream(
                client, "GET", f"{web.base}/v1/runs/{uuid.uuid4()}/events", headers=auth()
            )
            await opened.aclose()  # the client goes away mid-stream
            await until(lambda: admission.open_streams("acme") == 0)
            free = await read_stream(
                client, "GET", f"{web.base}/v1/runs/{uuid.uuid4()}/events", headers=auth()
            )
    finally:
        await stop_web(web)

    assert full.status == 429 and '"resource_exhausted"' in full.body and "max_streams" in full.body
    assert free.status == 404  # a slot again: the run is looked up, and is not there


async def until(condition: object, timeout_s: float = 10.0) -> None:
    """Wait for `condition()` to hold (checked as the event loop turns)."""
    assert callable(condition)
    async with asyncio.timeout(timeout_s):
        while not condition():  # noqa: ASYNC110 (a count in the server, with no event to wait on)
            await asyncio.sleep(0.01)


def pieces(secret: str) -> dict[str, bytes]:
    """A secret and long pieces of it, to grep for."""
    return {
        "whole": secret.encode(),
        "without its prefix": secret.removeprefix("bst_").encode(),
        "first half": secret[: len(secret) // 2].encode(),
        "second half": secret[len(secret) // 2 :].encode(),
    }


async def test_a_stream_ticket_is_stored_as_its_sha256_only_and_never_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    data_dir = tmp_path / "data"
    web = await start_web(sse_settings(data_dir))
    try:
        run_id, other = await finished_run(web), await finished_run(web)
        tickets = [await mint(web, run_id)]
        async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
            over_connect = await client.post(
                f"{web.base}/agent.v1.RunService/CreateStreamTicket",
                json={"runId": run_id},
                headers=auth(),
            )
            assert over_connect.status_code == 200, over_connect.text
            tickets.append(over_connect.json()["ticket"])
            for ticket in tickets:
                for url, status in (
                    (f"{web.base}/v1/runs/{run_id}/events?ticket={ticket}", 200),
                    (f"{web.base}/v1/runs/{other}/events?ticket={ticket}", 401),
                    (f"{web.base}/v1/runs/{run_id}/events?ticket={ticket}x", 401),
                    (f"{web.base}/v1/runs/{run_id}/events?ticket={ticket}&after=x", 400),
                ):
                    assert (await read_stream(client, "GET", url)).status == status, url
    finally:
        await stop_web(web)

    files = {path: path.read_bytes() for path in data_dir.rglob("*") if path.is_file()}
    # The server's log, not the test's HTTP client's (which logs the URLs it asks for).
    server_log = [r for r in caplog.records if not r.name.startswith(CLIENT_LOGGERS)]
    logged = "\n".join(
        f"{record.name} {record.getMessage()} {record.args!r} {record.exc_text}"
        for record in server_log
    ).encode()
    assert any(r.name.startswith("uvicorn") for r in server_log)  # the log was captured
    for ticket in tickets:
        assert any(digest_of(ticket).encode() in data for data in files.values())
        for name, piece in pieces(ticket).items():
            assert piece not in logged, f"ticket ({name}) in the log"
            for path, data in files.items():
                assert piece not in data, f"ticket ({name}) in {path.name}"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_the_python_client_mints_a_ticket_that_opens_its_run(web: Web) -> None:
    from behest.client import BehestClient, StreamTicket

    run_id = await finished_run(web)
    async with BehestClient(web.server.address, token=ALICE) as client:
        ticket = await client.stream_ticket(run_id)
    assert isinstance(ticket, StreamTicket) and ticket.ticket.startswith("bst_")
    assert ticket.expires_at is not None and ticket.expires_at > datetime.now(UTC)
    assert ticket.ticket not in repr(ticket)
    url = f"{web.base}/v1/runs/{run_id}/events?ticket={ticket.ticket}"
    async with httpx2.AsyncClient(timeout=TIMEOUT) as http:
        stream = await read_stream(http, "GET", url)
    assert stream.status == 200
    assert [int(e.id) for e in stream.events] == list(range(1, len(stream.events) + 1))
    assert stream.events[-1].event == "run_completed"
