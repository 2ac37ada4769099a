"""Multimodal input (issue 17, item 1): CreateRunRequest.content (text, images by URL or bytes,
files) through a real server — stored in the transcript with their bytes apart, referenced by
digest in events and listings, sent in each provider's own format, and refused in plain words
where a part is too big, of an unknown type, or more than the model takes."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy as sa

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import session_pb2 as spb
from behest._proto.agent.v1 import session_pb2_grpc as session_rpc
from behest.api import convert
from behest.store.sql import tables as t
from tests.fakes.anthropic_fake import FakeAnthropic, text_reply
from tests.fakes.openai_fake import FakeOpenAI, text
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    start_server,
    stop_server,
)

# A real 1x1 PNG and a tiny PDF: what clients send is bytes, and behest never looks inside.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def image(data: bytes = PNG, mime: str = "image/png") -> c.ContentPart:
    return c.ContentPart(image=c.ImageContent(mime_type=mime, data=data))


def image_url(url: str) -> c.ContentPart:
    return c.ContentPart(image=c.ImageContent(url=url))


def pdf(data: bytes = PDF, name: str = "report.pdf") -> c.ContentPart:
    return c.ContentPart(file=c.FileContent(mime_type="application/pdf", data=data, filename=name))


def words(text: str) -> c.ContentPart:
    return c.ContentPart(text=c.TextContent(text=text))


def answer(events: list[pb.AgentEvent]) -> str:
    return "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")


async def count(server: Server, table: sa.Table) -> int:
    async with server.app.store.engines.reader.connect() as conn:  # type: ignore[attr-defined]
        return int((await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar())


async def stored_payloads(server: Server) -> list[str]:
    async with server.app.store.engines.reader.connect() as conn:  # type: ignore[attr-defined]
        return [row.payload for row in await conn.execute(sa.select(t.events.c.payload))]


async def test_the_model_gets_each_part_and_the_log_keeps_only_references(
    served: Server,
) -> None:
    big = PNG + bytes(200_000)  # a bigger image: the events must not carry it
    request = create_request(script({"say": "content"}), model="script")
    request.content.extend([image(big), pdf(), image_url("https://example.com/cat.webp")])
    before = await count(served, t.content_blobs)
    events = await collect(served.runs.CreateRunStream(request))
    assert kind(events[-1]) == "run_completed"
    # The script model says what it received: kind, media type, digest and size of the bytes.
    assert answer(events).splitlines() == [
        f"image image/png {sha(big)} ({len(big)} bytes)",
        f"file application/pdf report.pdf {sha(PDF)} ({len(PDF)} bytes)",
        "image ? https://example.com/cat.webp",
    ]
    started = events[0].run_started
    assert [(p.image.digest, p.image.size_bytes, p.image.data) for p in started.content[:1]] == [
        (sha(big), len(big), b"")
    ]
    assert started.content[1].file.filename == "report.pdf"
    assert started.content[2].image.url == "https://example.com/cat.webp"
    # Read back from the store (as a restarted server replays it): the same event.
    [stored] = await served.app.store.read_events(events[0].run_id, after=0, limit=1)
    assert convert.event(stored) == events[0]
    # Stored: the bytes once, apart; no event is more than a few hundred bytes.
    assert await count(served, t.content_blobs) - before == 2
    assert max(len(p) for p in await stored_payloads(served)) < 2_000
    # The transcript lists the parts as references, the input first.
    sessions = session_rpc.SessionServiceStub(served.channel)
    page = await sessions.ListSessionMessages(
        spb.ListSessionMessagesRequest(session_id=started.session_id)
    )
    user = page.messages[0]
    assert [p.WhichOneof("content") for p in user.content] == ["text", "image", "file", "image"]
    assert user.content[1].image.digest == sha(big) and user.content[1].image.data == b""


async def test_deleting_the_session_erases_the_bytes(served: Server) -> None:
    request = create_request("look", model="echo")
    request.content.append(image())
    before = await count(served, t.content_blobs)
    events = await collect(served.runs.CreateRunStream(request))
    assert answer(events) == "look"
    assert await count(served, t.content_blobs) == before + 1
    sessions = session_rpc.SessionServiceStub(served.channel)
    await sessions.DeleteSession(
        spb.DeleteSessionRequest(session_id=events[0].run_started.session_id)
    )
    assert await count(served, t.content_blobs) == before


async def test_content_alone_is_a_message_and_text_parts_keep_their_place(served: Server) -> None:
    request = create_request("", model="echo")
    request.content.extend([words("what is"), image(), words("this?")])
    events = await collect(served.runs.CreateRunStream(request))
    assert kind(events[-1]) == "run_completed"
    assert answer(events) == "what is\n\nthis?"


async def test_a_repeated_request_id_must_carry_the_same_parts(served: Server) -> None:
    first = create_request("look", model="echo", client_request_id="same-key")
    first.content.append(image())
    created = await served.runs.CreateRun(first)
    again = await served.runs.CreateRun(first)
    assert again.run_id == created.run_id
    other = create_request("look", model="echo", client_request_id="same-key")
    other.content.append(image(PNG + b"x"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await served.runs.CreateRun(other)
    assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS


@pytest.mark.parametrize(
    ("part", "names"),
    [
        (image(mime="image/tiff"), "content[0].image.mime_type must be one of image/png"),
        (image(b""), "content[0].image.data is empty"),
        (c.ContentPart(image=c.ImageContent(data=PNG)), "content[0].image.mime_type is required"),
        (image_url("http://example.com/a.png"), "content[0].image.url must be an https:// URL"),
        (
            c.ContentPart(file=c.FileContent(mime_type="application/zip", data=b"PK")),
            "content[0].file.mime_type must be one of application/pdf, text/plain",
        ),
        (
            c.ContentPart(file=c.FileContent(mime_type="text/plain", data=b"\xff\xfe")),
            "content[0].file.data: a text/plain file must be UTF-8",
        ),
        (pdf(name="../etc/passwd"), "content[0].file.filename must be a plain file name"),
        (c.ContentPart(), "content[0] is empty: set text, image or file"),
        (c.ContentPart(json=c.JsonContent(json="{}")), "content[0]: json parts are not taken"),
    ],
)
async def test_a_bad_part_is_invalid_argument_naming_it_and_writes_nothing(
    served: Server, part: c.ContentPart, names: str
) -> None:
    request = create_request("look", model="echo")
    request.content.append(part)
    before = [await count(served, table) for table in (t.runs, t.messages, t.content_blobs)]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await served.runs.CreateRun(request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert names in (refused.value.details() or "")
    after = [await count(served, table) for table in (t.runs, t.messages, t.content_blobs)]
    assert after == before


async def test_parts_are_bounded_one_by_one_together_and_in_number(tmp_path: Path) -> None:
    server = await start_server(
        fast_settings(
            tmp_path, max_content_parts=3, max_content_part_bytes=1000, max_content_bytes=1500
        )
    )
    try:
        cases = [
            ([image(bytes(1001))], "content[0].image.data is 1001 bytes; the limit is 1000"),
            ([image(bytes(800)), pdf(bytes(800))], "1600 bytes together; the limit is 1500"),
            ([words("a")] * 4, "content has 4 parts; the limit is 3"),
        ]
        for parts, names in cases:
            request = create_request("look", model="echo")
            request.content.extend(parts)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await server.runs.CreateRun(request)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert names in (refused.value.details() or "")
        fits = create_request("look", model="echo")
        fits.content.extend([image(bytes(700)), pdf(bytes(700))])
        assert kind((await collect(server.runs.CreateRunStream(fits)))[-1]) == "run_completed"
    finally:
        await stop_server(server)


async def test_a_model_that_takes_no_images_is_named_in_the_refusal(tmp_path: Path) -> None:
    providers = {
        "text-only": {"type": "local", "models": {"echo": {"input_media": ["application/pdf"]}}}
    }
    settings = fast_settings(tmp_path).with_tables({"providers": providers}, source="test")
    server = await start_server(settings)
    try:
        request = create_request("look", provider="text-only", model="echo")
        request.content.extend([pdf(), image()])
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await server.runs.CreateRun(request)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = refused.value.details() or ""
        assert "content[1]: model 'echo' of provider 'text-only' does not take image" in details
        assert "it takes: application/pdf" in details
        request = create_request("look", provider="text-only", model="echo")
        request.content.append(pdf())
        assert kind((await collect(server.runs.CreateRunStream(request)))[-1]) == "run_completed"
    finally:
        await stop_server(server)


# --- the providers' wire formats ------------------------------------------------------------


async def _served_with(tmp_path: Path, name: str, table: dict[str, Any]) -> Server:
    settings = fast_settings(tmp_path).with_tables({"providers": {name: table}}, source="test")
    return await start_server(settings)


async def test_openai_gets_image_url_and_file_parts_and_later_runs_send_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_OPENAI_KEY", "sk-test")
    async with FakeOpenAI() as fake:
        table = {"type": "openai", "base_url": f"{fake.url}/v1", "api_key_env": "FAKE_OPENAI_KEY"}
        server = await _served_with(tmp_path, "oa", table)
        try:
            fake.push(text("A cat."), text("Still a cat."))
            request = create_request("What is this?", provider="oa", model="gpt-test")
            request.content.extend([image(), pdf(), image_url("https://example.com/c.png")])
            first = await collect(server.runs.CreateRunStream(request))
            assert kind(first[-1]) == "run_completed"
            again = create_request("And now?", provider="oa", model="gpt-test")
            again.session_id = first[0].run_started.session_id
            assert kind((await collect(server.runs.CreateRunStream(again)))[-1]) == "run_completed"
        finally:
            await stop_server(server)
    expected = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": _data_url("image/png", PNG)}},
        {
            "type": "file",
            "file": {"file_data": _data_url("application/pdf", PDF), "filename": "report.pdf"},
        },
        {"type": "image_url", "image_url": {"url": "https://example.com/c.png"}},
    ]
    bodies = [json.loads(r.body) for r in fake.requests]
    assert bodies[0]["messages"][0] == {"role": "user", "content": expected}
    # The next run of the session reads the transcript back from the store, bytes included.
    assert bodies[1]["messages"][0] == {"role": "user", "content": expected}
    assert bodies[1]["messages"][2] == {"role": "user", "content": "And now?"}


async def test_anthropic_gets_image_and_document_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", "sk-ant-test")
    async with FakeAnthropic() as fake:
        table = {"type": "anthropic", "base_url": fake.url, "api_key_env": "FAKE_ANTHROPIC_KEY"}
        server = await _served_with(tmp_path, "an", table)
        try:
            fake.push(text_reply("A ", "cat."))
            request = create_request("What is this?", provider="an", model="claude-test")
            notes = c.ContentPart(
                file=c.FileContent(mime_type="text/plain", data=b"notes", filename="n.txt")
            )
            request.content.extend([image(), pdf(), notes, image_url("https://example.com/c.png")])
            events = await collect(server.runs.CreateRunStream(request))
            assert kind(events[-1]) == "run_completed"
        finally:
            await stop_server(server)
    body = json.loads(fake.requests[0].body)
    png = base64.b64encode(PNG).decode()
    assert body["messages"][0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
            {
                "type": "document",
                "source": {
                    "type": "base64",
                    "media_type": "application/pdf",
                    "data": base64.b64encode(PDF).decode(),
                },
                "title": "report.pdf",
            },
            {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": "notes"},
                "title": "n.txt",
            },
            {
                "type": "image",
                "source": {"type": "url", "url": "https://example.com/c.png"},
                # The end of the transcript so far: the prompt cache's breakpoint.
                "cache_control": {"type": "ephemeral"},
            },
        ],
    }


def _data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"
