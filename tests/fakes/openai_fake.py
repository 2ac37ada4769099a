"""A scripted fake of OpenAI's `POST /v1/chat/completions` with `stream: true`.

Replies use the wire format of OpenAI's API reference: `data: {chat.completion.chunk}` SSE
events, a final usage chunk with `choices: []` (the request asks for include_usage; its
`prompt_tokens_details.cached_tokens` are a part of `prompt_tokens`), then `data: [DONE]`;
errors are JSON `{"error": {message, type, param, code}}` bodies.

    async with FakeOpenAI() as fake:
        fake.push(text("Hello there."), error(429, "slow down", headers={"retry-after": "1"}))
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.fakes.sse_server import Event, Reply, Request, SSEServer

MODEL = "gpt-test"
CREATED = 1_735_689_600
_WORD = re.compile(r"\s*\S+\s*")


class FakeOpenAI(SSEServer):
    """The fake server; `url` + "/v1" is the base_url to configure."""

    def __init__(self) -> None:
        super().__init__(_nothing_scripted, path="/v1/chat/completions")


def text(
    answer: str,
    *,
    finish: str | None = "stop",
    usage: tuple[int, int] = (12, 5),
    cached: int = 0,
    delay_s: float = 0.0,
    cut_after: int | None = None,
) -> Reply:
    """A streamed text answer, one word per chunk; `finish=None` leaves out the finish chunk.

    `usage` is (prompt_tokens, completion_tokens); `cached` of the prompt tokens were cached.
    """
    chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
    chunks += [chunk({"content": word}) for word in _WORD.findall(answer)]
    if finish is not None:
        chunks.append(chunk({}, finish=finish))
    chunks.append(usage_chunk(*usage, cached=cached))
    return stream(chunks, delay_s=delay_s, cut_after=cut_after)


def reasoning(
    thought: str, answer: str, *, usage: tuple[int, int] = (12, 9), reasoning_tokens: int = 0
) -> Reply:
    """A reasoning server's answer (DeepSeek, llama.cpp): `delta.reasoning_content` word by
    word, then the answer's `content`; the usage says `reasoning_tokens`."""
    chunks = [chunk({"role": "assistant", "content": None, "reasoning_content": ""})]
    chunks += [chunk({"reasoning_content": w, "content": None}) for w in _WORD.findall(thought)]
    chunks += [chunk({"content": word}) for word in _WORD.findall(answer)]
    chunks.append(chunk({}, finish="stop"))
    chunks.append(usage_chunk(*usage, reasoning=reasoning_tokens))
    return stream(chunks)


def tool_calls(
    *calls: tuple[str, str, str],
    fragment_chars: int = 6,
    usage: tuple[int, int] = (40, 18),
    cached: int = 0,
) -> Reply:
    """Streamed tool calls `(id, name, arguments JSON)`, arguments in small fragments."""
    chunks = [chunk({"role": "assistant", "content": None, "refusal": None})]
    for index, (call_id, name, arguments) in enumerate(calls):
        head = {"index": index, "id": call_id, "type": "function"}
        chunks.append(tool_chunk({**head, "function": {"name": name, "arguments": ""}}))
        for start in range(0, len(arguments), fragment_chars):
            piece = arguments[start : start + fragment_chars]
            chunks.append(tool_chunk({"index": index, "function": {"arguments": piece}}))
    chunks += [chunk({}, finish="tool_calls"), usage_chunk(*usage, cached=cached)]
    return stream(chunks)


def error(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """An error response in OpenAI's format."""
    return Reply(status=status, body=error_body(message, type, code, param), headers=headers or {})


def stream_error(answer: str, message: str, *, type: str = "server_error") -> Reply:
    """A 200 stream that starts an answer, then carries an error event instead of the rest."""
    chunks = [chunk({"role": "assistant", "content": answer}), error_body(message, type)]
    return stream(chunks)


def stream(
    chunks: list[dict[str, Any]], *, delay_s: float = 0.0, cut_after: int | None = None
) -> Reply:
    """SSE `data:` events of the chunks, then `data: [DONE]`."""
    events = tuple(Event(json.dumps(c, separators=(",", ":"))) for c in chunks)
    return Reply(
        events=(*events, Event("[DONE]")),
        headers={"Cache-Control": "no-cache", "x-request-id": "req_fake"},
        delay_s=delay_s,
        cut_after=cut_after,
    )


def chunk(delta: dict[str, Any], *, finish: str | None = None, index: int = 0) -> dict[str, Any]:
    """A `chat.completion.chunk` with one choice."""
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    return _envelope([choice], usage=None)


def tool_chunk(*fragments: dict[str, Any]) -> dict[str, Any]:
    """A chunk carrying tool call fragments."""
    return chunk({"tool_calls": list(fragments)})


def usage_chunk(
    prompt: int, completion: int, *, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    """The last chunk of an include_usage stream: no choices, the call's usage.

    `cached` prompt tokens came from the prompt cache; the API counts them in prompt_tokens
    (and so in total_tokens) too.
    """
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0},
    }
    return _envelope([], usage=usage)


def error_body(
    message: str, type: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def _envelope(choices: list[dict[str, Any]], *, usage: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake0001",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "system_fingerprint": "fp_fake",
        "choices": choices,
        "usage": usage,
    }


def _nothing_scripted(request: Request) -> Reply:
    return error(500, "fake OpenAI: no scripted reply left", type="server_error")
