"""Property-based fuzz of the HTTP listener's doors through a real server and real HTTP:
any method, door path, content type, token, origin, query and body (random bytes, random
JSON, Connect and gRPC-Web envelopes with lying lengths, huge bodies). Properties: never a
5xx; no answer names Python internals or echoes a token; a refused request leaves no run
behind it; the server still serves a good request afterwards."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.http_support import Connect
from tests.support import Server, start_server, stop_server
from tests.web_support import ALICE, BOB, inspector_settings

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    max_examples=150,
    suppress_health_check=(HealthCheck.function_scoped_fixture, HealthCheck.too_slow),
)
LEAK = re.compile(r"Traceback|File \"|<class |NoneType|object has no attribute|_pb2\b|sqlite3\.")
RUN = "11111111-2222-3333-4444-555555555555"
VALID_RUN = {"provider": {"value": "local"}, "model": {"value": "echo"}, "input": "fuzz"}

paths = st.sampled_from(
    [
        "/agent.v1.RunService/CreateRun",
        "/agent.v1.RunService/CreateRunStream",
        "/agent.v1.RunService/GetRun",
        "/agent.v1.RunService/WatchRunEvents",
        "/agent.v1.RunService/SubmitApprovals",
        "/agent.v1.RunService/ListRunEvents",
        "/agent.v1.SessionService/ListSessions",
        "/agent.v1.WorkerService/Connect",
        "/agent.v1.NoService/Nothing",
        "/v1/runs",
        f"/v1/runs/{RUN}/events",
        "/v1/runs/not-a-uuid/events",
        "/ag-ui",
        "/runs",
    ]
)
content_types = st.sampled_from(
    [
        "application/json",
        "application/connect+json",
        "application/proto",
        "application/connect+proto",
        "application/grpc-web+proto",
        "application/grpc-web-text",
        "application/grpc",
        "text/plain",
        "",
        "application/json; charset=utf-16",
    ]
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
json_bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(
        st.sampled_from(["input", "runId", "model", "provider", "threadId", "messages", "after"]),
        json_values,
    ).map(lambda v: json.dumps(v).encode()),
    st.just(json.dumps(VALID_RUN).encode()),
)


def _envelope(flags: int, size: int, data: bytes) -> bytes:
    return struct.pack(">BI", flags, size) + data


bodies = st.one_of(
    st.binary(max_size=300),
    json_bodies,
    st.builds(
        _envelope, st.sampled_from([0, 1, 2, 0x80, 255]), st.integers(0, 2**32 - 1), json_bodies
    ),
    json_bodies.map(lambda b: _envelope(0, len(b), b)),
    st.just(b"[" * 100_000),
    st.just(b"x" * (5 * 1024 * 1024)),
)
requests = st.fixed_dictionaries(
    {
        "method": st.sampled_from(["POST", "POST", "GET", "PUT", "OPTIONS"]),
        "path": paths,
        "query": st.sampled_from(["", "?after=3", "?after=-1", f"?after={10**30}", "?ticket=x"]),
        "content_type": content_types,
        "token": st.sampled_from([ALICE, ALICE, BOB, "", "wrong-token-canary"]),
        "origin": st.sampled_from(["", "http://app.example:8000", "http://evil.example"]),
        "last_event_id": st.sampled_from(["", "2", "-5", "abc", "9" * 40]),
        "timeout_ms": st.sampled_from(["", "100", "-1", "x", "9" * 30]),
        "body": bodies,
    }
)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    running = await start_server(
        inspector_settings(tmp_path, http_cors_origins=["http://app.example:8000"])
    )
    try:
        yield running
    finally:
        await stop_server(running)


def _headers(sent: dict[str, Any]) -> dict[str, str]:
    headers = {"content-type": sent["content_type"]} if sent["content_type"] else {}
    if sent["token"]:
        headers["authorization"] = f"Bearer {sent['token']}"
    for name, key in (
        ("origin", "origin"),
        ("last-event-id", "last_event_id"),
        ("connect-timeout-ms", "timeout_ms"),
    ):
        if sent[key]:
            headers[name] = sent[key]
    return headers


async def _send(base: str, sent: dict[str, Any]) -> tuple[int, bytes]:
    """The request; the status and at most 64 KiB of the answer, read for at most 3 s (a
    stream that is still going by then is cut: only its start is judged)."""
    url = f"{base}{sent['path']}{sent['query']}"
    body = sent["body"] if sent["method"] in ("POST", "PUT") else None
    async with httpx2.AsyncClient(timeout=30) as client:
        async with client.stream(
            sent["method"], url, content=body, headers=_headers(sent)
        ) as response:
            read = b""
            try:
                async with asyncio.timeout(3):
                    async for chunk in response.aiter_bytes():
                        read += chunk
                        if len(read) > 65536:
                            break
            except TimeoutError:
                pass
            return response.status_code, read


@FUZZ
@given(sent=requests)
async def test_fuzzed_http_requests_never_get_a_server_error(
    server: Server, sent: dict[str, Any]
) -> None:
    assert server.app.web is not None
    base = f"http://127.0.0.1:{server.app.web.port}"
    nobody = sent["token"] not in (ALICE, BOB)
    before = await _run_count(server)
    status, answer = await _send(base, sent)
    assert status < 500, (status, answer[:300])
    text = answer.decode(errors="replace")
    assert not LEAK.search(text), text[:300]
    assert "wrong-token-canary" not in text
    if nobody or status >= 400:
        assert await _run_count(server) == before, (status, text[:300])


async def _run_count(server: Server) -> int:
    """Every run stored, of any tenant (read from the database file itself)."""
    path = Path(server.app.settings.data_dir) / "behest.db"
    with sqlite3.connect(path) as db:
        (count,) = db.execute("SELECT count(*) FROM runs").fetchone()
    return int(count)


async def test_the_server_serves_after_a_burst_of_garbage(server: Server) -> None:
    assert server.app.web is not None
    base = f"http://127.0.0.1:{server.app.web.port}"
    garbage = [b"\x00" * 10, b"{", b"\xff" * 1000, _envelope(0, 2**32 - 1, b"{}")]
    async with httpx2.AsyncClient(timeout=30) as client:
        for body in garbage * 5:
            for ct in ("application/json", "application/connect+json", "application/grpc-web"):
                answer = await client.post(
                    f"{base}/agent.v1.RunService/CreateRun",
                    content=body,
                    headers={"content-type": ct, "authorization": f"Bearer {ALICE}"},
                )
                assert answer.status_code < 500
    created = await Connect(base, ALICE).ok("RunService/CreateRun", VALID_RUN)
    assert created["runId"]
