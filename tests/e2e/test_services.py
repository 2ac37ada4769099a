"""SessionService, ToolService, ProviderService and RunService.ListRunEvents through a real
server and real gRPC clients: listings, pages, erasure, tenants and what is never shown."""

from __future__ import annotations

import hashlib
import json
import secrets
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.json_format import MessageToJson

from behest._proto.agent.v1 import catalog_pb2 as cat
from behest._proto.agent.v1 import catalog_pb2_grpc as cat_rpc
from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import session_pb2 as spb
from behest._proto.agent.v1 import session_pb2_grpc as session_rpc
from behest.config import Settings
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    start_server,
    start_server_with_plugins,
    stop_server,
)

ECHO_SERVER = Path(__file__).parents[1] / "mcp_servers" / "echo_server.py"
TOKENS = {
    "alice": ("acme", secrets.token_urlsafe(32)),
    "bob": ("globex", secrets.token_urlsafe(32)),
}
Metadata = tuple[tuple[str, str], ...]


def sessions(server: Server) -> session_rpc.SessionServiceStub:
    return session_rpc.SessionServiceStub(server.channel)


async def code_of(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    try:
        await call
    except grpc.aio.AioRpcError as err:
        return err.code(), err.details() or ""
    return grpc.StatusCode.OK, ""


async def run_to_end(server: Server, text: str, session_id: str = "", md: Metadata = ()) -> str:
    """An echo run on `session_id` (a new session if empty), streamed to its end; its id."""
    request = create_request(text, session_id=session_id)
    events = await collect(server.runs.CreateRunStream(request, metadata=md))
    assert kind(events[-1]) == "run_completed", events[-1]
    return events[0].run_id


async def session_of(server: Server, run_id: str, md: Metadata = ()) -> str:
    got = await server.runs.GetRun(pb.GetRunRequest(run_id=run_id), metadata=md)
    return got.run.session_id


async def started(server: Server, steps: str, md: Metadata = ()) -> str:
    """A `script` run, once its model call has started (it is active then); its id."""
    created = await server.runs.CreateRun(create_request(steps, model="script"), metadata=md)
    watch = server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
    async for event in watch:
        if kind(event) == "model_started":
            watch.cancel()
            return created.run_id
    raise AssertionError("the run ended before its model call")


# --- sessions ---------------------------------------------------------------------------------


async def test_sessions_are_listed_newest_first_with_their_counts(server: Server) -> None:
    first = await run_to_end(server, "one")
    first_session = await session_of(server, first)
    await run_to_end(server, "two", first_session)
    second = await run_to_end(server, "three")
    second_session = await session_of(server, second)

    listed = (await sessions(server).ListSessions(spb.ListSessionsRequest())).sessions
    assert [s.id for s in listed] == [second_session, first_session]
    # Each echo run wrote the user's message and the answer.
    assert [(s.run_count, s.message_count) for s in listed] == [(1, 2), (2, 4)]
    assert all(s.active_run_id == "" for s in listed)
    page = spb.ListSessionsRequest(pagination=c.Pagination(limit=1, offset=1))
    assert [s.id for s in (await sessions(server).ListSessions(page)).sessions] == [first_session]

    got = await sessions(server).GetSession(spb.GetSessionRequest(session_id=first_session))
    assert got.session == listed[1]
    assert got.session.created_at.ToDatetime() <= got.session.updated_at.ToDatetime()


async def test_a_session_with_an_active_run_says_so_and_is_not_deleted(server: Server) -> None:
    run_id = await started(server, script({"text": "zzz", "delay_ms": 60_000}))
    session_id = await session_of(server, run_id)
    stub = sessions(server)
    got = await stub.GetSession(spb.GetSessionRequest(session_id=session_id))
    assert got.session.active_run_id == run_id

    code, details = await code_of(
        stub.DeleteSession(spb.DeleteSessionRequest(session_id=session_id))
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION, details
    assert run_id in details
    await server.runs.CancelRun(pb.CancelRunRequest(run_id=run_id))
    deleted = await stub.DeleteSession(spb.DeleteSessionRequest(session_id=session_id))
    assert deleted.runs_deleted == 1


async def test_session_messages_come_in_gapless_pages(server: Server) -> None:
    first = await run_to_end(server, "alpha")
    session_id = await session_of(server, first)
    for text in ("beta", "gamma"):
        await run_to_end(server, text, session_id)
    stub = sessions(server)
    whole = await stub.ListSessionMessages(spb.ListSessionMessagesRequest(session_id=session_id))
    assert [m.role for m in whole.messages] == ["user", "assistant"] * 3
    assert [m.content[0].text.text for m in whole.messages[::2]] == ["alpha", "beta", "gamma"]
    assert (whole.next_position, whole.more) == (6, False)

    seen, start, more = [], 0, True
    while more:
        request = spb.ListSessionMessagesRequest(
            session_id=session_id, from_position=start, limit=4
        )
        page = await stub.ListSessionMessages(request)
        assert 0 < len(page.messages) <= 4
        seen += page.messages
        start, more = page.next_position, page.more
    assert seen == list(whole.messages)
    assert start == 6
    after = await stub.ListSessionMessages(
        spb.ListSessionMessagesRequest(session_id=session_id, from_position=2**32 - 1)
    )
    assert (list(after.messages), after.next_position, after.more) == ([], 2**32 - 1, False)


async def test_delete_session_erases_its_runs_and_messages(server: Server) -> None:
    first = await run_to_end(server, "to be forgotten")
    session_id = await session_of(server, first)
    second = await run_to_end(server, "this too", session_id)
    kept = await run_to_end(server, "another session stays")
    stub = sessions(server)

    deleted = await stub.DeleteSession(spb.DeleteSessionRequest(session_id=session_id))
    assert deleted.runs_deleted == 2
    for call in (
        stub.GetSession(spb.GetSessionRequest(session_id=session_id)),
        stub.ListSessionMessages(spb.ListSessionMessagesRequest(session_id=session_id)),
        stub.DeleteSession(spb.DeleteSessionRequest(session_id=session_id)),
        server.runs.GetRun(pb.GetRunRequest(run_id=first)),
        server.runs.ListRunEvents(pb.ListRunEventsRequest(run_id=second)),
    ):
        code, details = await code_of(call)
        assert code == grpc.StatusCode.NOT_FOUND, details
    listed = (await stub.ListSessions(spb.ListSessionsRequest())).sessions
    assert [s.id for s in listed] == [await session_of(server, kept)]


async def test_session_requests_are_checked_field_by_field(server: Server) -> None:
    stub = sessions(server)
    cases = {
        "session_id is required": stub.GetSession(spb.GetSessionRequest()),
        "session_id must be a UUID": stub.DeleteSession(
            spb.DeleteSessionRequest(session_id="nope")
        ),
        "limit must be at most 1000": stub.ListSessionMessages(
            spb.ListSessionMessagesRequest(session_id=str(uuid.uuid4()), limit=1001)
        ),
        "pagination.limit must be at most 100": stub.ListSessions(
            spb.ListSessionsRequest(pagination=c.Pagination(limit=101))
        ),
    }
    for expected, call in cases.items():
        code, details = await code_of(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (expected, code)
        assert details.startswith(expected), details
    unknown = str(uuid.uuid4())
    for call in (
        stub.GetSession(spb.GetSessionRequest(session_id=unknown)),
        stub.ListSessionMessages(spb.ListSessionMessagesRequest(session_id=unknown)),
        stub.DeleteSession(spb.DeleteSessionRequest(session_id=unknown)),
    ):
        assert (await code_of(call))[0] == grpc.StatusCode.NOT_FOUND


# --- tenants ----------------------------------------------------------------------------------


def bearer(name: str) -> Metadata:
    return (("authorization", f"Bearer {TOKENS[name][1]}"),)


@pytest.fixture
async def tenants_server(tmp_path: Path) -> AsyncIterator[Server]:
    tokens = {
        name: {"sha256": hashlib.sha256(t.encode()).hexdigest(), "principal": name, "tenant": x}
        for name, (x, t) in TOKENS.items()
    }
    tables = {"auth": {"mode": "bearer", "tokens": tokens}}
    running = await start_server(fast_settings(tmp_path).with_tables(tables, source="test"))
    try:
        yield running
    finally:
        await stop_server(running)


async def test_another_tenants_session_and_events_are_not_found(tenants_server: Server) -> None:
    server, alice, bob = tenants_server, bearer("alice"), bearer("bob")
    run_id = await run_to_end(server, "alice's", md=alice)
    session_id = await session_of(server, run_id, alice)
    stub = sessions(server)
    for call in (
        stub.GetSession(spb.GetSessionRequest(session_id=session_id), metadata=bob),
        stub.ListSessionMessages(
            spb.ListSessionMessagesRequest(session_id=session_id), metadata=bob
        ),
        stub.DeleteSession(spb.DeleteSessionRequest(session_id=session_id), metadata=bob),
        server.runs.ListRunEvents(pb.ListRunEventsRequest(run_id=run_id), metadata=bob),
    ):
        code, details = await code_of(call)
        assert code == grpc.StatusCode.NOT_FOUND, details
    assert list((await stub.ListSessions(spb.ListSessionsRequest(), metadata=bob)).sessions) == []
    mine = await stub.ListSessions(spb.ListSessionsRequest(), metadata=alice)
    assert [s.id for s in mine.sessions] == [session_id]
    # Bob's refused delete erased nothing.
    got = await stub.GetSession(spb.GetSessionRequest(session_id=session_id), metadata=alice)
    assert got.session.run_count == 1
    events = await server.runs.ListRunEvents(pb.ListRunEventsRequest(run_id=run_id), metadata=alice)
    assert kind(events.events[-1]) == "run_completed"
    # Without a token, none of the new RPCs reaches a handler.
    tools = cat_rpc.ToolServiceStub(server.channel)
    for call in (
        stub.ListSessions(spb.ListSessionsRequest()),
        tools.ListTools(cat.ListToolsRequest()),
        cat_rpc.ProviderServiceStub(server.channel).ListProviders(cat.ListProvidersRequest()),
        server.runs.ListRunEvents(pb.ListRunEventsRequest(run_id=run_id)),
    ):
        assert (await code_of(call))[0] == grpc.StatusCode.UNAUTHENTICATED


# --- ListRunEvents ------------------------------------------------------------------------------


async def test_list_run_events_pages_are_gapless_and_equal_watch_run_events(
    server: Server,
) -> None:
    steps = script({"text": " ".join(f"w{i}" for i in range(60)), "deltas": 60})
    watched = await collect(server.runs.CreateRunStream(create_request(steps, model="script")))
    run_id = watched[0].run_id
    replay = await collect(server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))
    assert replay == watched

    for limit in (1, 7, len(watched) - 1, len(watched), 0):
        pages, after, more = [], 0, True
        while more:
            request = pb.ListRunEventsRequest(run_id=run_id, after_sequence=after, limit=limit)
            page = await server.runs.ListRunEvents(request)
            assert page.events, (limit, after)
            assert page.events[0].sequence == after + 1
            assert page.last_sequence == page.events[-1].sequence
            pages.append(list(page.events))
            after, more = page.last_sequence, page.more
        assert [e for p in pages for e in p] == watched, limit
        assert after == watched[-1].sequence

    middle = await server.runs.ListRunEvents(
        pb.ListRunEventsRequest(run_id=run_id, after_sequence=5)
    )
    assert list(middle.events) == watched[5:]
    assert not middle.more
    for after in (len(watched), len(watched) + 10, 2**64 - 1):
        past = await server.runs.ListRunEvents(
            pb.ListRunEventsRequest(run_id=run_id, after_sequence=after)
        )
        assert (list(past.events), past.last_sequence, past.more) == ([], after, False)


async def test_list_run_events_of_a_live_run_is_what_is_stored_so_far(server: Server) -> None:
    run_id = await started(server, script({"text": "zzz", "delay_ms": 60_000}))
    page = await server.runs.ListRunEvents(pb.ListRunEventsRequest(run_id=run_id))
    kinds = [kind(e) for e in page.events]
    assert kinds[0] == "run_started" and kinds[-1] == "model_started"
    assert not page.more
    await server.runs.CancelRun(pb.CancelRunRequest(run_id=run_id))


async def test_list_run_events_requests_are_checked(server: Server) -> None:
    run_id = await run_to_end(server, "checked")
    cases = {
        "run_id is required": pb.ListRunEventsRequest(),
        "run_id must be a UUID": pb.ListRunEventsRequest(run_id="42"),
        "limit must be at most 10000": pb.ListRunEventsRequest(run_id=run_id, limit=10_001),
    }
    for expected, request in cases.items():
        code, details = await code_of(server.runs.ListRunEvents(request))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, expected
        assert details.startswith(expected), details
    unknown = pb.ListRunEventsRequest(run_id=str(uuid.uuid4()))
    assert (await code_of(server.runs.ListRunEvents(unknown)))[0] == grpc.StatusCode.NOT_FOUND
    most = await server.runs.ListRunEvents(pb.ListRunEventsRequest(run_id=run_id, limit=10_000))
    assert kind(most.events[-1]) == "run_completed"


# --- tools --------------------------------------------------------------------------------------


def mcp_settings(tmp_path: Path) -> Settings:
    servers = {"echo": {"command": sys.executable, "args": [str(ECHO_SERVER)]}}
    tables = {"mcp": {"servers": servers}}
    settings = fast_settings(tmp_path, approval_required_tools=("current_time",))
    return settings.with_tables(tables, source="test")


async def test_list_tools_shows_every_tool_with_its_source_and_flags(tmp_path: Path) -> None:
    server = await start_server_with_plugins(mcp_settings(tmp_path))
    try:
        listed = await cat_rpc.ToolServiceStub(server.channel).ListTools(cat.ListToolsRequest())
        registry = server.app.server_tools.now()
    finally:
        await stop_server(server)
    tools = {t.spec.name: t for t in listed.tools}
    names = [t.spec.name for t in listed.tools]
    assert names == sorted(names)
    assert set(names) == {*registry.names(), "spawn_agent"}
    sources = {t.source for t in listed.tools}
    assert sources == {"builtin", "plugin", "mcp"}

    calculator = tools["calculator"]
    assert calculator.source == "builtin"
    assert (calculator.read_only, calculator.concurrency_safe, calculator.idempotent) == (
        True,
        True,
        True,
    )
    assert not calculator.requires_approval
    assert calculator.timeout_s == 30.0
    assert json.loads(calculator.spec.parameters_schema)["required"] == ["expression"]
    # Named by the settings' approval_required_tools.
    assert tools["current_time"].requires_approval

    unsafe = tools["slow_unsafe"]
    assert unsafe.source == "plugin"
    assert not (unsafe.read_only or unsafe.concurrency_safe or unsafe.idempotent)

    add = tools["echo__add"]
    assert add.source == "mcp"
    assert "MCP server 'echo'" in add.spec.description
    assert json.loads(add.spec.parameters_schema)["type"] == "object"

    spawn = tools["spawn_agent"]
    assert spawn.source == "builtin"
    assert (spawn.idempotent, spawn.concurrency_safe, spawn.read_only) == (True, True, False)
    assert "allow_sub_agents" in spawn.spec.description
    assert json.loads(spawn.spec.parameters_schema)["required"] == ["input"]


# --- providers ----------------------------------------------------------------------------------


async def test_list_providers_shows_models_and_prices_but_never_a_key(tmp_path: Path) -> None:
    canary = "sk-cnry-" + secrets.token_hex(24)
    key_file = tmp_path / "openai.key"
    key_file.write_text(canary + "\n")
    model = {
        "context_window": 64_000,
        "max_output_tokens": 2_000,
        "input_price": "0.000015",
        "output_price": "12.5",
        "cached_input_price": "0.0000001",
    }
    providers = {
        "openai": {
            "type": "openai",
            "base_url": "http://127.0.0.1:9/v1",
            "api_key_file": str(key_file),
            "default_model": "gpt-test",
            "currency": "EUR",
            "models": {
                "gpt-test": model,
                "gpt-free": {"context_window": 8_000, "input_media": []},
            },
        }
    }
    settings = fast_settings(tmp_path / "data").with_tables({"providers": providers}, source="t")
    server = await start_server(settings)
    try:
        stub = cat_rpc.ProviderServiceStub(server.channel)
        listed = await stub.ListProviders(cat.ListProvidersRequest())
    finally:
        await stop_server(server)
    assert canary.encode() not in listed.SerializeToString()
    assert canary not in MessageToJson(listed) and canary[8:20] not in str(listed)

    found = {p.id.value: p for p in listed.providers}
    assert list(found) == ["local", "openai"]
    local = found["local"]
    assert local.type == "local"
    assert [m.name.value for m in local.models] == ["echo", "script"]
    assert local.models[0].context_window == 128_000 and local.models[0].input_price == ""
    assert list(local.models[0].input_media) == ["*/*"]

    openai = found["openai"]
    assert (openai.type, openai.base_url, openai.default_model) == (
        "openai",
        "http://127.0.0.1:9/v1",
        "gpt-test",
    )
    free, priced = openai.models
    # What each takes beside text: its settings, else the provider type's default.
    assert list(free.input_media) == []
    assert list(priced.input_media) == ["image/*", "application/pdf"]
    assert (free.name.value, free.context_window, free.input_price, free.currency) == (
        "gpt-free",
        8_000,
        "",
        "",
    )
    assert priced.name.value == "gpt-test"
    assert (priced.context_window, priced.max_output_tokens) == (64_000, 2_000)
    # Exact decimal strings, never an exponent; the cache-write price defaults to the input's.
    assert (priced.input_price, priced.output_price) == ("0.000015", "12.5")
    assert (priced.cached_input_price, priced.cache_write_price) == ("0.0000001", "0.000015")
    assert priced.currency == "EUR"
