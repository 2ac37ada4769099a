"""Support for the server-sent events tests: a reader of `text/event-stream` over a real HTTP
client (httpx2), and a server with the HTTP doors (the proxy that drops connections mid-stream is
tests/http_support.py's `DroppingProxy`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx2
from google.protobuf.json_format import MessageToDict

from behest._proto.agent.v1 import run_pb2 as pb
from behest.config import Settings
from tests.support import Server, collect, kind, script, start_server, stop_server
from tests.web_support import ALICE, bearer, inspector_settings

# An origin the test servers let call the doors from a browser.
ALLOWED_ORIGIN = "https://app.example.test"
HEARTBEAT_S = 0.1
TIMEOUT = httpx2.Timeout(20.0)
CALCULATOR = {"name": "calculator", "arguments": {"expression": "2+2"}}
# A run that asks to use the calculator, waits for the approval, then talks for a while.
WAITS_THEN_TALKS = script(
    {"tool_calls": [CALCULATOR]},
    {"text": "one two three four five six seven eight", "delay_ms": 20},
)
TERMINAL = {"run_completed", "run_failed", "run_cancelled"}


@dataclass
class Event:
    """One server-sent event as EventSource dispatches it."""

    id: str
    event: str
    data: str

    @property
    def sequence(self) -> int:
        return int(self.id)

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class Stream:
    """What one response of a stream carried, and how it ended."""

    status: int
    headers: dict[str, str]
    events: list[Event] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    retry: list[str] = field(default_factory=list)
    body: str = ""  # the body of an answer that is not a stream
    dropped: bool = False  # the connection broke before the body ended

    @property
    def last_id(self) -> str:
        return self.events[-1].id if self.events else ""


async def read_stream(
    client: httpx2.AsyncClient,
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    json_body: Any = None,
    until: Any = None,
) -> Stream:
    """One request, its stream read until it ends, breaks, or `until(stream)` is true."""
    request = client.build_request(method, url, headers=headers, json=json_body)
    response = await client.send(request, stream=True)
    stream = Stream(response.status_code, dict(response.headers))
    try:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            stream.body = (await response.aread()).decode()
            return stream
        await _parse(response, stream, until)
    except httpx2.TransportError:
        stream.dropped = True
    finally:
        await response.aclose()
    return stream


async def _parse(response: httpx2.Response, stream: Stream, until: Any) -> None:
    fields: dict[str, list[str]] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "data" in fields:
                stream.events.append(
                    Event(
                        id=fields.get("id", [""])[-1],
                        event=fields.get("event", ["message"])[-1],
                        data="\n".join(fields["data"]),
                    )
                )
            fields = {}
            if until is not None and until(stream):
                return
            continue
        if line.startswith(":"):
            stream.comments.append(line[1:].strip())
            if until is not None and until(stream):
                return
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "retry":
            stream.retry.append(value)
        else:
            fields.setdefault(name, []).append(value)


# --- a server with the HTTP doors ------------------------------------------------------------


def sse_settings(data_dir: Any, database_url: str = "", **overrides: object) -> Settings:
    """The inspector's settings (bearer tokens of two tenants) with the doors' own."""
    values: dict[str, object] = {
        "http_cors_origins": [ALLOWED_ORIGIN],
        "sse_heartbeat_s": HEARTBEAT_S,
        **overrides,
    }
    if database_url:
        values["database_url"] = database_url
    return inspector_settings(data_dir, **values)


@dataclass
class Web:
    """A running server and the base URL of its HTTP listener."""

    server: Server

    @property
    def port(self) -> int:
        web = self.server.app.web
        assert web is not None
        return web.port

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def start_web(settings: Settings) -> Web:
    return Web(await start_server(settings))


async def stop_web(web: Web) -> None:
    await stop_server(web.server)


def auth(token: str = ALICE, **headers: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", **headers}


def create_body(input: str, *, model: str = "script", **fields: Any) -> dict[str, Any]:
    """A CreateRunRequest as JSON (the proto's field names; Connect's camelCase work too)."""
    return {"provider": {"value": "local"}, "model": {"value": model}, "input": input, **fields}


async def stored_events(web: Web, run_id: str, token: str = ALICE) -> list[Event]:
    """The run's whole log through gRPC, as the SSE door should send it."""
    events = await collect(
        web.server.runs.WatchRunEvents(
            pb.WatchRunEventsRequest(run_id=run_id), metadata=bearer(token)
        )
    )
    return [
        Event(str(e.sequence), kind(e), json.dumps(MessageToDict(e), separators=(",", ":")))
        for e in events
    ]


async def approve(web: Web, run_id: str, call_id: str = "call_1_1") -> None:
    answer = pb.ApprovalAnswer(call_id=call_id, decision=pb.APPROVAL_DECISION_ALLOW)
    request = pb.SubmitApprovalsRequest(run_id=run_id, approvals=[answer])
    await web.server.runs.SubmitApprovals(request, metadata=bearer(ALICE))


async def run_ids(web: Web, token: str = ALICE) -> list[str]:
    listed = await web.server.runs.ListRuns(pb.ListRunsRequest(), metadata=bearer(token))
    return [run.id for run in listed.runs]


def assert_whole(events: list[Event], stored: list[Event]) -> None:
    """Events 1..N, each once, in order, and exactly the stored ones; the last is terminal."""
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert [(e.id, e.event, e.json()) for e in events] == [
        (e.id, e.event, e.json()) for e in stored
    ]
    assert events[-1].event in TERMINAL
