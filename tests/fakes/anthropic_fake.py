"""A scripted fake of Anthropic's Messages API (`POST /v1/messages`), on the shared SSE server.

Streams speak the wire format of Anthropic's streaming reference: chunked `text/event-stream`
with `event: <type>` and `data: <json>` lines: message_start (a message object with usage:
input_tokens, cache_read_input_tokens and cache_creation_input_tokens, three disjoint counts),
content_block_start / content_block_delta (text_delta, input_json_delta) / content_block_stop,
message_delta (stop_reason, usage.output_tokens and, optionally, the other counts, which are
cumulative), message_stop, ping, and error events.
Errors are JSON bodies {"type": "error", "error": {"type", "message"}} with their status.
Every reply has its own `request-id` and says `Connection: close`.

    async with FakeAnthropic() as fake:
        fake.push(text_reply("Hello", ", ", "world"), error_reply(529, "overloaded_error", "…"))
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from tests.fakes.sse_server import Event, Reply, Request, SSEServer

MODEL = "claude-test"
_ids = itertools.count(1)


class FakeAnthropic(SSEServer):
    """The fake server; `url` is the base_url to configure."""

    stream_content_type = "text/event-stream; charset=utf-8"

    def __init__(self) -> None:
        super().__init__(_nothing_scripted, path="/v1/messages")

    def reply_headers(self, reply: Reply) -> dict[str, str]:
        headers = {"request-id": f"req_fake{next(_ids):06d}", "Connection": "close"}
        return headers | ({"Cache-Control": "no-cache"} if reply.events else {})


def sse_event(data: dict[str, Any]) -> Event:
    """An SSE event named, as the API names them, by its data's `type`."""
    return Event(json.dumps(data), event=data["type"])


def message_object(input_tokens: int, **usage: int) -> dict[str, Any]:
    """The message object a message_start event carries: no content yet, the input usage.

    Cache reads and writes are 0 unless `usage` sets cache_read_input_tokens or
    cache_creation_input_tokens.
    """
    return {
        "id": f"msg_fake{next(_ids):06d}",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": MODEL,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 1,
            **usage,
        },
    }


def message_start(input_tokens: int, *, cache_read: int = 0, cache_write: int = 0) -> Event:
    """message_start with the call's input usage: uncached, read from and written to the cache."""
    usage = {"cache_read_input_tokens": cache_read, "cache_creation_input_tokens": cache_write}
    return sse_event({"type": "message_start", "message": message_object(input_tokens, **usage)})


def block_delta(index: int, delta: dict[str, Any]) -> Event:
    return sse_event({"type": "content_block_delta", "index": index, "delta": delta})


def block(index: int, content: dict[str, Any], deltas: list[dict[str, Any]]) -> list[Event]:
    """content_block_start, a content_block_delta per delta, content_block_stop."""
    return [
        sse_event({"type": "content_block_start", "index": index, "content_block": content}),
        *(block_delta(index, delta) for delta in deltas),
        sse_event({"type": "content_block_stop", "index": index}),
    ]


def text_block(index: int, chunks: list[str]) -> list[Event]:
    text = [{"type": "text_delta", "text": c} for c in chunks]
    return block(index, {"type": "text", "text": ""}, text)


def thinking_block(index: int, chunks: list[str], signature: str) -> list[Event]:
    """An extended-thinking block: thinking_delta per chunk, then its signature_delta."""
    deltas = [{"type": "thinking_delta", "thinking": c} for c in chunks]
    deltas.append({"type": "signature_delta", "signature": signature})
    return block(index, {"type": "thinking", "thinking": "", "signature": ""}, deltas)


def redacted_thinking_block(index: int, data: str) -> list[Event]:
    return block(index, {"type": "redacted_thinking", "data": data}, [])


def tool_use_block(index: int, call_id: str, name: str, fragments: list[str]) -> list[Event]:
    start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    # The API's first input_json_delta of a block carries an empty string.
    json_deltas = [{"type": "input_json_delta", "partial_json": f} for f in ["", *fragments]]
    return block(index, start, json_deltas)


def message_end(stop_reason: str, output_tokens: int, **usage: int) -> list[Event]:
    """message_delta (the stop reason, cumulative usage: output tokens and any `usage`), then
    message_stop."""
    delta = {"stop_reason": stop_reason, "stop_sequence": None}
    usage = {**usage, "output_tokens": output_tokens}
    return [
        sse_event({"type": "message_delta", "delta": delta, "usage": usage}),
        sse_event({"type": "message_stop"}),
    ]


def text_reply(
    *chunks: str,
    input_tokens: int = 21,
    output_tokens: int = 9,
    cache_read: int = 0,
    cache_write: int = 0,
    **options: Any,
) -> Reply:
    """A streamed text answer, one text_delta per chunk; `options` go to the Reply."""
    events = [
        message_start(input_tokens, cache_read=cache_read, cache_write=cache_write),
        sse_event({"type": "ping"}),
        *text_block(0, list(chunks)),
        *message_end("end_turn", output_tokens),
    ]
    return Reply(events=tuple(events), **options)


def tool_reply(
    *calls: tuple[str, str, list[str]],
    text: str = "",
    input_tokens: int = 40,
    output_tokens: int = 30,
    cache_read: int = 0,
    cache_write: int = 0,
) -> Reply:
    """A streamed answer: a text block if `text`, a tool_use block per (id, name, fragments)."""
    events = [message_start(input_tokens, cache_read=cache_read, cache_write=cache_write)]
    if text:
        events += text_block(0, [text])
    for index, (call_id, name, fragments) in enumerate(calls, start=1 if text else 0):
        events += tool_use_block(index, call_id, name, fragments)
    events += message_end("tool_use", output_tokens)
    return Reply(events=tuple(events))


def error_reply(
    status: int, error_type: str, message: str, headers: dict[str, str] | None = None
) -> Reply:
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return Reply(status=status, body=body, headers=headers or {})


def stream_error_reply(*chunks: str, error_type: str = "overloaded_error") -> Reply:
    """A stream that starts an answer, then sends an `error` event instead of finishing."""
    error = sse_event({"type": "error", "error": {"type": error_type, "message": "Overloaded"}})
    return Reply(events=(message_start(10), *text_block(0, list(chunks))[:-1], error))


def _nothing_scripted(request: Request) -> Reply:
    return error_reply(500, "api_error", "the fake has no scripted reply left")
