"""The Connect door: every RunService RPC as plain JSON over real HTTP, server streams as
Connect frames them, a stream cut by the server resumed with no gap and no duplicate, and the
same auth, tenants, bounds and error table as gRPC (SQLite and PostgreSQL where it matters)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.http_support import Connect, DroppingProxy
from tests.support import Server, start_server, stop_server
from tests.web_support import ALICE, BOB, inspector_settings

TERMINAL = {"runCompleted", "runFailed", "runCancelled"}
COMMON = {"sequence", "runId", "timestamp", "traceId", "spanId"}


def kind(event: dict[str, Any]) -> str:
    return next(k for k in event if k not in COMMON)


def sequences(events: list[dict[str, Any]]) -> list[int]:
    return [int(e["sequence"]) for e in events]


def run(input: str, model: str = "echo", **fields: Any) -> dict[str, Any]:
    return {"provider": {"value": "local"}, "model": {"value": model}, "input": input, **fields}


def script(*steps: dict[str, Any]) -> str:
    return json.dumps({"steps": list(steps)})


CALC = {"name": "calculator", "arguments": {"expression": "6*7"}}
BROWSER = {
    "name": "browser_open",
    "description": "Opens a page.",
    "parametersSchema": json.dumps({"type": "object", "properties": {"url": {"type": "string"}}}),
}


def base(server: Server) -> str:
    assert server.app.web is not None
    return f"http://127.0.0.1:{server.app.web.port}"


@pytest.fixture
async def door(database_url: str, tmp_path: Path) -> AsyncIterator[Server]:
    overrides = {"database_url": database_url} if database_url else {}
    settings = inspector_settings(
        tmp_path, http_cors_origins=["http://app.example:8000"], **overrides
    )
    server = await start_server(settings)
    try:
        yield server
    finally:
        await stop_server(server)


async def test_every_run_service_rpc_over_connect_json(door: Server) -> None:
    alice = Connect(base(door), ALICE)
    created = await alice.ok("RunService/CreateRun", run("hello over connect"))
    run_id = created["runId"]
    watched = await alice.stream("RunService/WatchRunEvents", {"runId": run_id})
    assert watched.end == {} and watched.error is None
    assert sequences(watched.messages) == list(range(1, len(watched.messages) + 1))
    assert kind(watched.messages[0]) == "runStarted"
    assert kind(watched.messages[-1]) == "runCompleted"
    text = "".join(e["textDelta"]["delta"] for e in watched.messages if "textDelta" in e)
    assert text == "hello over connect"

    got = await alice.ok("RunService/GetRun", {"runId": run_id})
    assert got["run"]["status"] == "RUN_STATUS_COMPLETED"
    # By its session: on PostgreSQL the database is the test session's, shared with others.
    listed = await alice.ok("RunService/ListRuns", {"sessionId": created["sessionId"]})
    assert [r["id"] for r in listed["runs"]] == [run_id]
    output = await alice.ok("RunService/GetRunOutput", {"runId": run_id})
    assert "hello over connect" in json.dumps(output)
    page = await alice.ok("RunService/ListRunEvents", {"runId": run_id, "limit": 2})
    assert sequences(page["events"]) == [1, 2] and page["more"] is True

    cancelled = await alice.call("RunService/CancelRun", {"runId": run_id})
    assert cancelled.status_code == 400
    assert cancelled.json()["code"] == "failed_precondition"
    assert "ended COMPLETED" in cancelled.json()["message"]

    streamed = await alice.stream("RunService/CreateRunStream", run("streamed"))
    assert kind(streamed.messages[-1]) == "runCompleted"


async def test_approvals_and_client_tools_are_answered_over_connect(door: Server) -> None:
    alice = Connect(base(door), ALICE)
    asked = run(
        script({"tool_calls": [CALC]}, {"text": "approved"}),
        model="script",
        approvalRequiredTools=["calculator"],
    )
    created = await alice.ok("RunService/CreateRun", asked)
    run_id = created["runId"]
    paused = await alice.stream(
        "RunService/WatchRunEvents",
        {"runId": run_id},
        until=lambda s: kind(s.messages[-1]) == "approvalRequested",
    )
    pending = await alice.ok("RunService/ListPendingCalls", {"runId": run_id})
    call_id = pending["calls"][0]["call"]["id"]
    assert call_id == paused.messages[-1]["approvalRequested"]["call"]["id"]
    answer = {"callId": call_id, "decision": "APPROVAL_DECISION_ALLOW"}
    await alice.ok("RunService/SubmitApprovals", {"runId": run_id, "approvals": [answer]})
    after = int(paused.messages[-1]["sequence"])
    rest = await alice.stream("RunService/WatchRunEvents", {"runId": run_id, "lastEventId": after})
    assert kind(rest.messages[-1]) == "runCompleted"
    assert "toolExecutionFinished" in {kind(e) for e in rest.messages}

    browsing = run(
        script(
            {"tool_calls": [{"name": "browser_open", "arguments": {"url": "x"}}]}, {"text": "ok"}
        ),
        model="script",
        clientTools=[BROWSER],
    )
    created = await alice.ok("RunService/CreateRun", browsing)
    run_id = created["runId"]
    paused = await alice.stream(
        "RunService/WatchRunEvents",
        {"runId": run_id},
        until=lambda s: kind(s.messages[-1]) == "clientToolRequested",
    )
    call_id = paused.messages[-1]["clientToolRequested"]["call"]["id"]
    result = {"callId": call_id, "output": "opened"}
    await alice.ok("RunService/SubmitToolResults", {"runId": run_id, "results": [result]})
    rest = await alice.stream(
        "RunService/WatchRunEvents",
        {"runId": run_id, "lastEventId": int(paused.messages[-1]["sequence"])},
    )
    assert kind(rest.messages[-1]) == "runCompleted"


async def test_a_stream_cut_by_the_server_resumes_with_no_gap_and_no_duplicate(
    door: Server,
) -> None:
    alice = Connect(base(door), ALICE)
    words = " ".join(f"w{i}" for i in range(12))
    async with DroppingProxy(door.app.web.port) as proxy:  # type: ignore[union-attr]

        def cut_after_five(streamed: Any) -> bool:
            if len(streamed.messages) == 5:
                proxy.cut()
            return False

        first = await alice.stream(
            "RunService/CreateRunStream",
            run(script({"text": words, "delay_ms": 40}), model="script"),
            until=cut_after_five,
            base=f"http://127.0.0.1:{proxy.port}",
        )
    assert first.broken and first.end is None
    assert len(first.messages) >= 5
    last = int(first.messages[-1]["sequence"])
    rest = await alice.stream(
        "RunService/WatchRunEvents", {"runId": first.messages[0]["runId"], "lastEventId": last}
    )
    events = first.messages + rest.messages
    assert sequences(events) == list(range(1, len(events) + 1))
    assert kind(events[-1]) == "runCompleted"
    text = "".join(e["textDelta"]["delta"] for e in events if "textDelta" in e)
    assert text == words


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_callers_tenants_and_origins_are_the_grpc_sides(door: Server) -> None:
    alice, bob, nobody = (Connect(base(door), t) for t in (ALICE, BOB, ""))
    refused = await nobody.call("RunService/ListRuns", {})
    assert refused.status_code == 401
    assert refused.json()["code"] == "unauthenticated"
    assert "Bearer" in refused.json()["message"] and "metadata" not in refused.json()["message"]
    wrong = await Connect(base(door), "not-a-token").call("RunService/ListRuns", {})
    assert wrong.status_code == 401 and "not-a-token" not in wrong.text

    run_id = (await alice.ok("RunService/CreateRun", run("mine")))["runId"]
    other = await bob.call("RunService/GetRun", {"runId": run_id})
    assert other.status_code == 404 and other.json()["code"] == "not_found"
    assert (await bob.ok("RunService/ListRuns", {})) == {}

    allowed = Connect(base(door), ALICE, {"origin": "http://app.example:8000"})
    answer = await allowed.call("RunService/GetRun", {"runId": run_id})
    assert answer.headers["access-control-allow-origin"] == "http://app.example:8000"
    stranger = Connect(base(door), ALICE, {"origin": "http://evil.example"})
    answer = await stranger.call("RunService/GetRun", {"runId": run_id})
    assert "access-control-allow-origin" not in answer.headers


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_bad_bodies_get_a_clear_error_and_write_nothing(door: Server) -> None:
    alice = Connect(base(door), ALICE)
    misspelt = await alice.call("RunService/CreateRun", {**run("x"), "inptu": "typo"})
    assert misspelt.status_code == 400 and misspelt.json()["code"] == "invalid_argument"
    assert "inptu" in misspelt.json()["message"]
    wrong_type = await alice.call("RunService/CreateRun", {**run("x"), "input": {"a": 1}})
    assert wrong_type.status_code == 400 and "input" in wrong_type.json()["message"]
    deep: Any = "x"
    for _ in range(200):
        deep = {"value": deep}
    nested = await alice.call("RunService/CreateRun", {"provider": deep})
    assert nested.status_code == 400 and nested.json()["code"] == "invalid_argument"
    too_big = await alice.call("RunService/CreateRun", run("x" * (5 * 1024 * 1024)))
    assert too_big.status_code == 429 and too_big.json()["code"] == "resource_exhausted"
    over_input = await alice.call("RunService/CreateRun", run("x" * (300 * 1024)))
    assert over_input.json()["code"] == "invalid_argument", over_input.text
    for body in (b"{", b"\xff\xfe", b"[1, 2]", b"null"):
        raw = await _post_raw(door, "RunService/CreateRun", body, "application/json")
        assert raw.status_code == 400 and raw.json()["code"] == "invalid_argument", body
    stream = await alice.stream("RunService/CreateRunStream", {**run("x"), "model": "echo"})
    assert stream.error is not None and stream.error["code"] == "invalid_argument"
    assert stream.messages == []
    assert (await alice.ok("RunService/ListRuns", {})) == {}
    missing = await alice.stream(
        "RunService/WatchRunEvents", {"runId": "00000000-0000-0000-0000-000000000000"}
    )
    assert missing.error is not None and missing.error["code"] == "not_found"
    unknown = await alice.call("RunService/NoSuchMethod", {})
    assert unknown.status_code == 404
    bidi = await alice.call("WorkerService/Connect", {})
    assert bidi.status_code == 404


async def _post_raw(door: Server, method: str, body: bytes, content_type: str) -> Any:
    import httpx2

    headers = {"content-type": content_type, "authorization": f"Bearer {ALICE}"}
    async with httpx2.AsyncClient(timeout=30) as client:
        return await client.post(f"{base(door)}/agent.v1.{method}", content=body, headers=headers)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_every_agent_service_answers_over_connect(door: Server) -> None:
    alice = Connect(base(door), ALICE)
    run_id = (await alice.ok("RunService/CreateRun", run("sessions")))["runId"]
    await alice.stream("RunService/WatchRunEvents", {"runId": run_id})
    tools = await alice.ok("ToolService/ListTools", {})
    assert "calculator" in {t["spec"]["name"] for t in tools["tools"]}
    providers = await alice.ok("ProviderService/ListProviders", {})
    assert "local" in {p["id"]["value"] for p in providers["providers"]}
    sessions = await alice.ok("SessionService/ListSessions", {})
    assert len(sessions["sessions"]) == 1
    await alice.ok("UsageService/GetUsage", {})
    executions = await alice.ok("ToolExecutionService/ListToolExecutions", {"runId": run_id})
    assert executions == {}
    await alice.ok("SnapshotService/ListSnapshots", {})
    await alice.ok("CompactionService/GetCompactionConfig", {})


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_grpc_web_binary_unary_and_stream(door: Server) -> None:
    import struct

    import httpx2

    from behest._proto.agent.v1 import run_pb2 as pb
    from tests.http_support import envelopes
    from tests.support import create_request

    request = create_request("over grpc-web")
    frame = request.SerializeToString()
    headers = {
        "content-type": "application/grpc-web+proto",
        "x-grpc-web": "1",
        "authorization": f"Bearer {ALICE}",
    }
    url = f"{base(door)}/agent.v1.RunService/CreateRunStream"
    events, trailers = [], b""
    async with httpx2.AsyncClient(timeout=30) as client:
        body = struct.pack(">BI", 0, len(frame)) + frame
        async with client.stream("POST", url, content=body, headers=headers) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("application/grpc-web")
            async for flags, data in envelopes(response.aiter_bytes()):
                if flags & 0x80:
                    trailers = data
                else:
                    events.append(pb.AgentEvent.FromString(data))
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[-1].WhichOneof("event") == "run_completed"
    assert b"grpc-status: 0" in trailers.lower() or b"grpc-status:0" in trailers.lower()

    headers["authorization"] = "Bearer wrong"
    async with httpx2.AsyncClient(timeout=30) as client:
        get = pb.GetRunRequest(run_id=events[0].run_id).SerializeToString()
        body = struct.pack(">BI", 0, len(get)) + get
        refused = await client.post(
            f"{base(door)}/agent.v1.RunService/GetRun", content=body, headers=headers
        )
    status = refused.headers.get("grpc-status") or refused.content.decode(errors="replace")
    assert "16" in status  # UNAUTHENTICATED


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_preflight_is_answered_for_configured_origins_only(door: Server) -> None:
    import httpx2

    asks = {
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization,content-type,connect-protocol-version",
    }
    url = f"{base(door)}/agent.v1.RunService/CreateRunStream"
    async with httpx2.AsyncClient(timeout=30) as client:
        allowed = await client.options(url, headers={**asks, "origin": "http://app.example:8000"})
        refused = await client.options(url, headers={**asks, "origin": "http://evil.example"})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "http://app.example:8000"
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    assert refused.status_code == 400
    assert "access-control-allow-origin" not in refused.headers


async def test_a_tenants_limits_are_shared_by_grpc_and_connect(tmp_path: Path) -> None:
    """One creation a minute: Connect's second is refused; one stream slot: a gRPC stream
    holds it, and a Connect stream is refused for it."""
    from behest._proto.agent.v1 import run_pb2 as pb
    from tests.web_support import bearer

    settings = inspector_settings(tmp_path, max_streams=1, creates_per_minute=1)
    server = await start_server(settings)
    try:
        alice = Connect(base(server), ALICE)
        created = await alice.ok(
            "RunService/CreateRun", run(script({"text": "slow", "delay_ms": 60_000}), "script")
        )
        refused = await alice.call("RunService/CreateRun", run("no more this minute"))
        assert refused.status_code == 429 and "creates_per_minute" in refused.json()["message"]

        request = pb.WatchRunEventsRequest(run_id=created["runId"])
        held = server.runs.WatchRunEvents(request, metadata=bearer(ALICE))
        await anext(held.__aiter__())
        over = await alice.stream("RunService/WatchRunEvents", {"runId": created["runId"]})
        assert over.error is not None and over.error["code"] == "resource_exhausted"
        assert "max_streams" in over.error["message"]
        held.cancel()
    finally:
        await stop_server(server)
