"""The AG-UI door through real HTTP. The real @ag-ui/client HttpAgent, in Node
(tests/agui_node/agui.test.mjs), runs a text run, a frontend tool the client answers, an
approval as an interrupt resumed, a failed run, a snapshot that catches the client up, and a
stream cut by the server resumed with Last-Event-ID, each checked with @ag-ui/client's own
event-order validation. Here: the door's refusals, each an HTTP status with Connect's JSON
error and nothing written."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.http_support import Connect
from tests.support import CI, Server, fast_settings, start_server, stop_server
from tests.web_support import ALICE, AUTH, BOB, inspector_settings

NODE_DIR = Path(__file__).resolve().parents[1] / "agui_node"
SCENARIOS = [
    "a text run",
    "a frontend tool the client answers",
    "an approval as an interrupt, resumed",
    "a failed run as RUN_ERROR with its code",
    "a snapshot catches the client up with the session",
    "a reconnect with Last-Event-ID gets the rest exactly once",
]
MAX_BODY = 256 * 1024
# An input whose forwardedProps nest deeper than any JSON behest takes.
DEEP = (
    f'{{"threadId": "{uuid.uuid4()}", "runId": "r", "messages": [], "forwardedProps": '
    + "[" * 99
    + "]" * 99
    + "}"
)


def base(server: Server) -> str:
    assert server.app.web is not None
    return f"http://127.0.0.1:{server.app.web.port}"


@pytest.fixture(scope="module")
def node() -> str:
    """Node with tests/agui_node's packages (`make test` installs them with npm ci)."""
    found = shutil.which("node")
    installed = (NODE_DIR / "node_modules" / "@ag-ui" / "client").is_dir()
    if found and installed:
        return found
    why = "no node" if not found else f"no node_modules in {NODE_DIR}: run `make test`"
    if CI:
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


@pytest.fixture
async def door(tmp_path: Path) -> AsyncIterator[Server]:
    server = await start_server(inspector_settings(tmp_path, max_receive_message_bytes=MAX_BODY))
    try:
        yield server
    finally:
        await stop_server(server)


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_the_agui_client_against_the_door(door: Server, node: str, scenario: str) -> None:
    env = {**os.environ, "AGUI_URL": base(door), "AGUI_TOKEN": ALICE}
    process = await asyncio.create_subprocess_exec(
        node,
        "--test",
        f"--test-name-pattern=^{scenario}$",
        "agui.test.mjs",
        cwd=NODE_DIR,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout=50)
    report = out.decode()
    assert process.returncode == 0, report
    assert "# pass 1\n" in report and "# fail 0\n" in report, report


# --- the door's refusals -------------------------------------------------------------------


def run_input(thread: str = "", *messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    said = list(messages) or [user("hello")]
    return {
        "threadId": thread or str(uuid.uuid4()),
        "runId": str(uuid.uuid4()),
        "messages": said,
        **fields,
    }


def user(text: str) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "role": "user", "content": text}


async def post(server: Server, body: Any, token: str = ALICE, **headers: str) -> httpx2.Response:
    sent = {"content-type": "application/json", **headers}
    if token:
        sent["authorization"] = f"Bearer {token}"
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx2.AsyncClient(timeout=30) as client:
        response = await client.post(f"{base(server)}/ag-ui", content=content, headers=sent)
        await response.aread()
        return response


def events(response: httpx2.Response) -> list[dict[str, Any]]:
    found = []
    for block in response.text.split("\n\n"):
        data = [line[6:] for line in block.split("\n") if line.startswith("data: ")]
        if data:
            found.append(json.loads("\n".join(data)))
    return found


async def sessions(server: Server, token: str) -> list[dict[str, Any]]:
    listed = await Connect(base(server), token).ok("SessionService/ListSessions", {})
    return list(listed.get("sessions", []))


def refused(response: httpx2.Response, status: int, code: str, says: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["code"] == code, body
    assert says in body["message"], body


async def test_without_a_token_or_with_a_wrong_one_is_401(door: Server) -> None:
    refused(await post(door, run_input(), token=""), 401, "unauthenticated", "")
    refused(await post(door, run_input(), token="not-a-token"), 401, "unauthenticated", "")
    assert await sessions(door, ALICE) == []


async def test_another_tenants_thread_is_not_found_and_untouched(door: Server) -> None:
    said = user("alice's thread")
    first = run_input("", said)
    answered = events(await post(door, first))
    assert [e["type"] for e in answered][-1] == "RUN_FINISHED"
    thread = first["threadId"]
    alice = await sessions(door, ALICE)
    history = [said, {"id": "a1", "role": "assistant", "content": "alice's thread"}]

    starting = run_input(thread, user("bob's try"))
    continuing = run_input(thread, *history, user("bob's turn"))
    resuming = run_input(
        thread, *history, resume=[{"interruptId": "call_1_1", "status": "cancelled"}]
    )
    for body in (starting, continuing, resuming):
        refused(await post(door, body, token=BOB), 404, "not_found", f"session {thread} not found")

    assert await sessions(door, BOB) == []
    assert await sessions(door, ALICE) == alice


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{not json", "the body is not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b"\xff\xfe", "not UTF-8"),
        ({"threadId": str(uuid.uuid4()), "runId": "r"}, "messages"),
        ({**run_input(), "threadId": "thread-1"}, "threadId must be a UUID"),
        (run_input("", {"id": "x", "role": "robot", "content": "hi"}), "messages"),
        (run_input(forwardedProps={"behest": {"modle": "echo"}}), 'no field named "modle"'),
        (run_input(forwardedProps={"behest": {"input": "x"}}), "forwardedProps.behest.input"),
        (run_input(forwardedProps={"behest": {"model": "nope"}}), "nope"),
        (run_input("", {"id": "a", "role": "assistant", "content": "hi"}), "nothing new"),
        (run_input(resume=[{"interruptId": "c", "status": "resolved"}]), "resume answers and"),
        (DEEP, "nested 100 levels deep"),
    ],
)
async def test_malformed_bodies_are_400_and_write_nothing(
    door: Server, body: Any, says: str
) -> None:
    sent = body.encode() if isinstance(body, str) else body
    refused(await post(door, sent), 400, "invalid_argument", says)
    assert await sessions(door, ALICE) == []


async def test_an_oversized_body_is_refused_and_writes_nothing(door: Server) -> None:
    body = run_input("", user("x" * (MAX_BODY + 1)))
    refused(await post(door, body), 429, "resource_exhausted", f"over {MAX_BODY} bytes")
    assert await sessions(door, ALICE) == []


async def test_a_history_that_is_not_the_sessions_is_refused(door: Server) -> None:
    said = user("the real question")
    first = run_input("", said)
    await post(door, first)
    before = await sessions(door, ALICE)
    edited = {"id": "a1", "role": "assistant", "content": "an answer behest never gave"}

    response = await post(door, run_input(first["threadId"], said, edited, user("next")))

    refused(response, 400, "failed_precondition", "message 1 (assistant) is not the thread's")
    assert await sessions(door, ALICE) == before


async def test_a_bad_last_event_id_is_400(door: Server) -> None:
    response = await post(door, run_input(), **{"last-event-id": "seven"})
    refused(response, 400, "invalid_argument", "Last-Event-ID")
    assert await sessions(door, ALICE) == []


async def test_a_pause_ends_the_stream_and_frees_its_slot_for_the_next_input(
    tmp_path: Path,
) -> None:
    server = await start_server(inspector_settings(tmp_path, max_streams=1))
    try:
        calc = {"name": "calculator", "arguments": {"expression": "2+2"}}
        steps = json.dumps({"steps": [{"tool_calls": [calc]}, {"text": "it is 4"}]})
        behest = {"model": "script", "approvalRequiredTools": ["calculator"]}
        said = user(steps)
        first = run_input("", said, forwardedProps={"behest": behest})
        paused = events(await post(server, first))
        assert paused[-1]["outcome"]["type"] == "interrupt"

        assistant = {
            "id": "a",
            "role": "assistant",
            "toolCalls": [
                {
                    "id": "call_1_1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": "{}"},
                }
            ],
        }
        resume = [{"interruptId": "call_1_1", "status": "resolved", "payload": True}]
        answer = run_input(first["threadId"], said, assistant, resume=resume)
        answered = events(await post(server, answer))

        assert answered[0]["type"] == "RUN_STARTED"
        assert answered[-1]["outcome"]["type"] == "success"
    finally:
        await stop_server(server)


async def test_an_open_stream_holds_one_of_the_tenants_slots(tmp_path: Path) -> None:
    server = await start_server(inspector_settings(tmp_path, max_streams=1))
    try:
        slow = json.dumps({"steps": [{"text": "one two three four", "delay_ms": 300}]})
        body = run_input("", user(slow), forwardedProps={"behest": {"model": "script"}})
        headers = {"authorization": f"Bearer {ALICE}", "content-type": "application/json"}
        async with httpx2.AsyncClient(timeout=30) as client:
            url = f"{base(server)}/ag-ui"
            async with client.stream("POST", url, json=body, headers=headers) as open_one:
                assert open_one.status_code == 200
                chunks = open_one.aiter_text()
                received = [await anext(chunks)]
                refused(await post(server, run_input()), 429, "resource_exhausted", "max_streams")
                received += [chunk async for chunk in chunks]
        assert '"type":"RUN_FINISHED"' in "".join(received)
    finally:
        await stop_server(server)


async def test_a_jwt_is_a_caller_here_too_and_its_thread_is_its_tenants(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    public = tmp_path / "jwt-public.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    verify = {"public_key_file": str(public), "audience": "behest", "tenant_claim": "org"}
    tables = {"auth": {**AUTH["auth"], "jwt": verify}}
    settings = fast_settings(tmp_path, http_listen="127.0.0.1:0").with_tables(tables, source="t")
    server = await start_server(settings)
    try:
        claims = {"sub": "carol", "org": "initech", "aud": "behest", "exp": int(time.time()) + 300}
        token = jwt.encode(claims, key, algorithm="ES256")
        body = run_input("", user("signed"))

        answered = events(await post(server, body, token=token))

        assert answered[-1]["type"] == "RUN_FINISHED"
        assert [s["id"] for s in await sessions(server, token)] == [body["threadId"]]
        assert await sessions(server, ALICE) == []
    finally:
        await stop_server(server)
