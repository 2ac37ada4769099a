"""The Anthropic Messages API adapter, over the official `anthropic` SDK's async client.

Request mapping (behest's normalised ModelRequest → `POST /v1/messages`, `stream: true`):

- `instructions` and every system-role message → `system` (joined by blank lines).
- user and assistant messages → content blocks: an assistant's text block, then a `tool_use`
  block {id, name, input} per call (`input` is the call's JSON arguments parsed; arguments that
  are not a JSON object are kept as `{"_raw_arguments": text}` so the model sees what it sent).
- tool messages → `tool_result` blocks {tool_use_id, content, is_error} in a user message;
  adjacent messages of one role are merged, since the API wants the roles to alternate, and
  in a user message the `tool_result` blocks come first, as the API requires.
- The API rejects a `tool_use` without a `tool_result` right after it, and a result without its
  call. A transcript can hold both (a run cancelled or failed between the assistant message and
  its tool results), so a missing result becomes an error result ("the tool call did not run")
  and a result without its call becomes a plain text block.
- `tools` → `[{name, description, input_schema}]`; `tool_choice` auto → {"type": "auto"},
  required → {"type": "any"}, none → {"type": "none"}, a tool's name → {"type": "tool", name}.
  With no tools offered, neither is sent, unless the transcript holds tool blocks: the API
  then wants tools defined, so the tools named in it are sent with a bare schema and
  {"type": "none"}, which lets the model call none of them.
- `max_tokens` (required by the API) is the request's `max_output_tokens`, else 4096.
- Structured output: the API has no response_format, so the format becomes a tool named after
  it whose input_schema is its schema (wrapped as {"answer": …} unless an object's), forced
  with {"type": "tool", name} when no other tool is offered (or tool_choice is none), else
  offered beside them. Its call is the final answer: the decoder turns its input into the
  answer's text and never reports it as a tool call (so it is never run, listed or approved).
- Tool-call ids are reduced to the characters the API accepts (letters, digits, `_`, `-`).
- Extended thinking: a run's `reasoning.budget_tokens` → `thinking: {"type": "enabled",
  "budget_tokens"}`, lowered below `max_tokens` when a budget clamps that (left out when that
  leaves less than 1024, or when tool_choice forces a tool, which the API refuses with
  thinking). An assistant message's thinking and redacted_thinking blocks, kept in the
  transcript as the API sent them (signatures included), are sent back first in its content,
  unchanged, as the API requires when tools are used.
- Images and files (a user message's content parts) → `image` blocks (base64 or url source)
  and `document` blocks (a PDF as base64, a text/plain file as a text source; its file name
  as `title`).
- Prompt caching (the provider's `cache_breakpoints`, default all): a `cache_control:
  {"type": "ephemeral"}` breakpoint on the last of the run's tools, on the system prompt (then
  sent as one text block), and on the last block of the transcript, so that the next call of
  the run reads the conversation so far from the cache. Cache reads and writes come back in
  usage (below) and are priced apart.

Stream mapping (raw server-sent events → deltas): `content_block_start` of a `tool_use` block →
ToolCallBegin; `text_delta` → TextChunk; `input_json_delta` → ToolCallArguments (empty
fragments skipped); `message_start`/`message_delta` carry usage and the stop reason;
`message_stop` → the one Finished; a `thinking` block's `thinking_delta`s → ReasoningChunks,
and the whole block (with its `signature_delta`) → a ReasoningBlock at its content_block_stop;
a `redacted_thinking` block → a ReasoningBlock as it is. Usage keeps the API's split:
`input_tokens` (neither read from nor written to the prompt cache), `cache_read_input_tokens`
→ cached input tokens, `cache_creation_input_tokens` → cache-write tokens; message_delta's
counts are cumulative and replace message_start's, field by field, when present. `ping` and
citation deltas are ignored. A stream that is cut or ends without `message_stop` is a
transient error; an `error` event is classed by its type, like the HTTP status it stands
for (overloaded_error as 529, api_error as 500, invalid_request_error as 400, …).

Errors: 429, 408, 409, 5xx, 529, timeouts and connection errors are transient (Retry-After and
retry-after-ms honoured; `x-should-retry` obeyed; a 429 is RateLimited); 401/403 (a
ProviderAuthError) and other 4xx are permanent, a prompt that does not fit the context window is
a ContextOverflowError; 429s that are spend limits are permanent. Messages name the HTTP status
and the provider's message, never the key.

The SDK's own retries are off (`max_retries=0`): behest's loop retries and announces each attempt.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncGenerator, Collection
from typing import Any

import anthropic
import httpx2

from behest import bounded_json
from behest.domain.content import ContentPart, PartKind
from behest.domain.messages import Message, Role
from behest.domain.output import ResponseFormat
from behest.domain.runs import MIN_THINKING_BUDGET, FinishReason
from behest.domain.spend import TokenUsage
from behest.errors import (
    ContextOverflowError,
    PermanentProviderError,
    ProviderAuthError,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    TransientProviderError,
    describe,
)
from behest.providers.base import (
    Delta,
    Finished,
    ModelRequest,
    ReasoningBlock,
    ReasoningChunk,
    TextChunk,
    ToolCallArguments,
    ToolCallBegin,
)
from behest.providers.config import ProviderConfig
from behest.providers.redaction import redacted
from behest.providers.retry import retry_after_s

DEFAULT_MAX_TOKENS = 4096
MISSING_RESULT = "no result: the tool call did not run (the run ended before it did)"

_FINISH = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "tool_use": FinishReason.TOOL_CALLS,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "refusal": FinishReason.CONTENT_FILTER,
}
# The API's usage fields → TokenUsage's; the three input counts are disjoint.
_USAGE_FIELDS = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_input_tokens": "cached_input_tokens",
    "cache_creation_input_tokens": "cache_write_tokens",
}
# The HTTP status an `error` event in a 200 stream stands for, by its error type.
_STATUS_OF_TYPE = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
_TRANSIENT_STATUS = frozenset({408, 409, 429})
_SPEND_LIMITS = frozenset(
    {
        "contract_spend_limit_reached",
        "enforced_spend_limit_reached",
        "linked_organization_spend_limit_reached",
    }
)
_CONTEXT_OVERFLOW = re.compile(
    r"prompt is too long|context window|context length|exceed context limit", re.IGNORECASE
)
_THINKING_TYPES = ("thinking", "redacted_thinking")
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_NO_KEY = "no API key: set api_key_env or api_key_file"


class AnthropicProvider:
    """Claude models through the Messages API, streamed."""

    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        self._api_key = config.api_key
        self._cache = config.cache_breakpoints
        try:
            self._client = anthropic.AsyncAnthropic(
                # None lets the SDK find credentials its own way (ANTHROPIC_API_KEY, profiles).
                api_key=config.api_key or None,
                base_url=config.base_url or None,
                timeout=config.timeout_s,
                max_retries=0,
            )
        except anthropic.AnthropicError as exc:
            raise ValueError(f"provider {config.name!r}: {_NO_KEY} ({exc})") from None
        client = self._client
        # The key the SDK found itself (ANTHROPIC_API_KEY) must be masked as well.
        self._api_key = config.api_key or client.api_key or client.auth_token or ""
        if not (client.api_key or client.auth_token or getattr(client, "credentials", None)):
            raise ValueError(f"provider {config.name!r}: {_NO_KEY}")

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        await self._client.close()

    async def stream(self, request: ModelRequest) -> AsyncGenerator[Delta, None]:
        """Stream one model call's deltas; the last one is `Finished`."""
        params = build_params(request, cache=self._cache)
        decoder = StreamDecoder(request.response_format)
        try:
            response = await self._client.messages.create(**params, stream=True)
            # Closing the response on every way out (cancel included) drops the connection,
            # so the server stops generating.
            async with response:
                async for event in response:
                    for delta in decoder.feed(event):
                        yield delta
        except anthropic.APIStatusError as exc:
            raise self._status_error(exc) from (None if exc.status_code in (401, 403) else exc)
        except anthropic.APITimeoutError as exc:
            raise TransientProviderError(self.name, "request timed out") from exc
        except anthropic.APIConnectionError as exc:
            raise TransientProviderError(
                self.name, f"connection failed: {self._brief(str(exc.__cause__ or exc))}"
            ) from exc
        except httpx2.TimeoutException as exc:
            raise TransientProviderError(self.name, "stream timed out") from exc
        except httpx2.RequestError as exc:
            cause = self._brief(describe(exc))
            raise TransientProviderError(self.name, f"stream cut: {cause}") from exc
        except json.JSONDecodeError as exc:
            raise TransientProviderError(self.name, "malformed stream event") from exc
        except anthropic.AnthropicError as exc:  # e.g. credentials the SDK could not refresh
            raise PermanentProviderError(
                self.name, f"client error: {self._brief(str(exc))}"
            ) from exc
        if not decoder.finished:
            raise TransientProviderError(self.name, "stream ended before message_stop")

    def _status_error(self, exc: anthropic.APIStatusError) -> ProviderError:
        error = _error_object(exc.body)
        kind = str(error.get("type") or "")
        detail = self._brief(str(error.get("message") or _text_body(exc.body)))
        status = exc.status_code
        in_stream = 200 <= status < 300  # an `error` event inside a 200 stream
        if in_stream:
            status = _STATUS_OF_TYPE.get(kind, 500)
            where = f"stream error event {kind or 'without a type'}"
        else:
            where = f"HTTP {status} {kind}".rstrip()
        if status in (401, 403):
            what = "authentication failed" if status == 401 else "permission denied"
            return ProviderAuthError(self.name, f"{what} ({where}): {detail}")
        if status in (400, 413) and _CONTEXT_OVERFLOW.search(detail):
            return ContextOverflowError(self.name, f"context window exceeded ({where}): {detail}")
        transient = status in _TRANSIENT_STATUS or status >= 500
        if _error_code(error) in _SPEND_LIMITS:
            transient = False
        headers = exc.response.headers
        if not in_stream and headers.get("x-should-retry") in ("true", "false"):
            transient = headers["x-should-retry"] == "true"
        message = f"{_describe(status)} ({where})" + (f": {detail}" if detail else "")
        if transient:
            retry_after = None if in_stream else retry_after_s(headers)
            error_class = RateLimited if status == 429 else TransientProviderError
            return error_class(self.name, message, retry_after=retry_after)
        if _error_code(error) in _SPEND_LIMITS:
            return QuotaExhausted(self.name, message)
        return PermanentProviderError(self.name, message)

    def _brief(self, text: str) -> str:
        return redacted(text, self._api_key)


class StreamDecoder:
    """Turns the raw stream events of one message into deltas; `finished` after message_stop.

    With a response format, a call of its answer tool is the answer: its input becomes the
    answer's text (one TextChunk once the block ends), and is never a tool call. Text the model
    writes meanwhile is held back: sent before a call of another tool or at the end, and
    dropped when the answer tool was called (the answer is the tool's input alone).
    """

    def __init__(self, response_format: ResponseFormat | None = None) -> None:
        self.finished = False
        # TokenUsage's fields by the API's names; message_delta's counts replace these.
        self._usage = dict.fromkeys(_USAGE_FIELDS.values(), 0)
        self._stop_reason: str | None = None
        self._tool_ids: dict[int, str] = {}
        self._format = response_format
        self._held: list[Delta] = []
        # The answer tool's block: its index, the input's fragments; whether it was called.
        self._answer_index: int | None = None
        self._answer: list[str] = []
        self._answered = False
        # Thinking blocks being streamed, by index: the block as the API will want it back.
        self._thinking: dict[int, dict[str, Any]] = {}

    def feed(self, event: Any) -> list[Delta]:
        if self.finished:
            return []
        match getattr(event, "type", None):
            case "message_start":
                self._take_usage(getattr(event.message, "usage", None))
            case "content_block_start":
                return self._hold(self._block_start(event.index, event.content_block))
            case "content_block_delta":
                return self._hold(self._block_delta(event.index, event.delta))
            case "content_block_stop" if event.index == self._answer_index:
                return self._answer_text()
            case "content_block_stop" if event.index in self._thinking:
                return [ReasoningBlock(self._thinking.pop(event.index))]
            case "message_delta":
                reason = getattr(event.delta, "stop_reason", None)
                if reason is not None:
                    self._stop_reason = reason
                self._take_usage(getattr(event, "usage", None))
            case "message_stop":
                self.finished = True
                if self._answered and self._stop_reason == "tool_use" and not self._tool_ids:
                    self._stop_reason = "end_turn"  # the answer tool was the only call
                reason = _FINISH.get(self._stop_reason or "", FinishReason.UNKNOWN)
                deltas = self._answer_text() if self._answer_index is not None else []
                if not self._answered:
                    deltas = [*self._held, *deltas]
                return [*deltas, Finished(reason, TokenUsage(**self._usage))]
        return []

    def _hold(self, deltas: list[Delta]) -> list[Delta]:
        """With a response format, text waits until it is known whether it is the answer."""
        if self._format is None:
            return deltas
        out: list[Delta] = []
        for delta in deltas:
            if isinstance(delta, TextChunk):
                if not self._answered:
                    self._held.append(delta)
                continue
            if isinstance(delta, ToolCallBegin) and not self._answered:
                out += self._held  # text before another tool's call is no answer
                self._held.clear()
            out.append(delta)
        return out

    def _answer_text(self) -> list[Delta]:
        """The answer tool's input, as the answer (unwrapped from {"answer": …} when its
        schema is not an object's)."""
        text = "".join(self._answer) or "{}"
        self._answer_index, self._answer = None, []
        assert self._format is not None
        if not _wraps(self._format):
            return [TextChunk(text)]
        try:
            value = bounded_json.parse(text)
        except bounded_json.JsonRefused:
            return [TextChunk(text)]  # not JSON: the loop says so and asks for a repair
        if not isinstance(value, dict) or "answer" not in value:
            return [TextChunk(text)]
        return [TextChunk(json.dumps(value["answer"]))]

    def _take_usage(self, usage: Any) -> None:
        """The counts `usage` has (a missing or null one keeps the earlier count)."""
        if usage is None:
            return
        for wire, name in _USAGE_FIELDS.items():
            value = getattr(usage, wire, None)
            if value is not None:
                self._usage[name] = value

    def _block_start(self, index: int, block: Any) -> list[Delta]:
        match getattr(block, "type", None):
            case "thinking":
                thought = getattr(block, "thinking", "") or ""
                signature = getattr(block, "signature", "") or ""
                self._thinking[index] = {
                    "type": "thinking",
                    "thinking": thought,
                    "signature": signature,
                }
                return [ReasoningChunk(thought)] if thought else []
            case "redacted_thinking":
                data = getattr(block, "data", "") or ""
                return [ReasoningBlock({"type": "redacted_thinking", "data": data})]
            case "text":
                text = getattr(block, "text", "") or ""
                return [TextChunk(text)] if text else []
            case "tool_use" if self._format is not None and block.name == self._format.name:
                self._answered = True
                self._held.clear()
                self._answer_index = index
                initial = getattr(block, "input", None)
                self._answer = [json.dumps(initial)] if initial else []
                return []
            case "tool_use":
                call_id = str(block.id)
                self._tool_ids[index] = call_id
                deltas: list[Delta] = [ToolCallBegin(call_id, str(block.name))]
                # The API starts a tool_use block with input {} and streams the input after it.
                initial = getattr(block, "input", None)
                if initial:
                    deltas.append(ToolCallArguments(call_id, json.dumps(initial)))
                return deltas
        return []

    def _block_delta(self, index: int, delta: Any) -> list[Delta]:
        match getattr(delta, "type", None):
            case "thinking_delta" if index in self._thinking:
                thought = getattr(delta, "thinking", "") or ""
                self._thinking[index]["thinking"] += thought
                return [ReasoningChunk(thought)] if thought else []
            case "signature_delta" if index in self._thinking:
                self._thinking[index]["signature"] += getattr(delta, "signature", "") or ""
                return []
            case "text_delta":
                return [TextChunk(delta.text)] if delta.text else []
            case "input_json_delta" if index == self._answer_index:
                self._answer.append(delta.partial_json or "")
                return []
            case "input_json_delta":
                call_id = self._tool_ids.get(index)
                if call_id is None or not delta.partial_json:
                    return []
                return [ToolCallArguments(call_id, delta.partial_json)]
        return []


# --- request mapping ----------------------------------------------------------------------


def build_params(request: ModelRequest, *, cache: Collection[str] = ()) -> dict[str, Any]:
    """The keyword arguments of `messages.create` for one model call (without `stream`);
    `cache`: where prompt-cache breakpoints go (tools, instructions, transcript)."""
    system = [request.instructions] if request.instructions.strip() else []
    system += [m.text for m in request.messages if m.role == Role.SYSTEM and m.text.strip()]
    messages = build_messages(request.messages)
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_output_tokens or DEFAULT_MAX_TOKENS,
        "messages": messages,
    }
    if system:
        params["system"] = "\n\n".join(system)
    answer = request.response_format
    if request.tools:
        params["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters_schema}
            for t in request.tools
        ]
        params["tool_choice"] = tool_choice(request.tool_choice)
    else:
        used = [n for n in _tool_names_used(messages) if answer is None or n != answer.name]
        if used:
            params["tools"] = [
                {
                    "name": name,
                    "description": "Not available now.",
                    "input_schema": {"type": "object"},
                }
                for name in used
            ]
            params["tool_choice"] = {"type": "none"}
    if answer is not None:
        params.setdefault("tools", []).append(answer_tool(answer))
        if not request.tools or request.tool_choice == "none":
            params["tool_choice"] = {"type": "tool", "name": answer.name}
    thinking = _thinking(request, params)
    if thinking is not None:
        params["thinking"] = thinking
    _cache_breakpoints(params, cache, tools=len(request.tools))
    return params


def _cache_breakpoints(params: dict[str, Any], cache: Collection[str], *, tools: int) -> None:
    """Mark the ends of the stable prefixes for Anthropic's prompt cache: the run's tools,
    the system prompt, and the transcript so far (its last block, read back by the next call
    of the run). Prefixes shorter than the model's minimum are just not cached."""
    if "tools" in cache and tools:
        params["tools"][tools - 1]["cache_control"] = dict(EPHEMERAL)
    if "instructions" in cache and "system" in params:
        params["system"] = [
            {"type": "text", "text": params["system"], "cache_control": dict(EPHEMERAL)}
        ]
    if "transcript" in cache and params["messages"]:
        blocks = params["messages"][-1]["content"]
        cacheable = [b for b in blocks if b["type"] not in _THINKING_TYPES]
        if cacheable:
            cacheable[-1]["cache_control"] = dict(EPHEMERAL)


def _thinking(request: ModelRequest, params: dict[str, Any]) -> dict[str, Any] | None:
    """Extended thinking as the run asks, within the call's max_tokens; None when not asked
    or not possible (a forced tool, or too few tokens left for the least budget)."""
    if request.reasoning is None or not request.reasoning.budget_tokens:
        return None
    if params.get("tool_choice", {}).get("type") in ("any", "tool"):
        return None
    budget = min(request.reasoning.budget_tokens, params["max_tokens"] - 1)
    if budget < MIN_THINKING_BUDGET:
        return None
    return {"type": "enabled", "budget_tokens": budget}


EPHEMERAL = {"type": "ephemeral"}


def answer_tool(response_format: ResponseFormat) -> dict[str, Any]:
    """The tool whose input is the final answer (Anthropic has no response_format). Its
    input_schema must be an object's: any other schema is wrapped as {"answer": …}."""
    schema: dict[str, Any] = response_format.schema
    if _wraps(response_format):
        schema = {"type": "object", "properties": {"answer": schema}, "required": ["answer"]}
    return {
        "name": response_format.name,
        "description": "Give your final answer with this tool: its input is the answer.",
        "input_schema": schema,
    }


def _wraps(response_format: ResponseFormat) -> bool:
    return response_format.schema.get("type") != "object"


def tool_choice(choice: str) -> dict[str, str]:
    match choice:
        case "auto" | "":
            return {"type": "auto"}
        case "required":
            return {"type": "any"}
        case "none":
            return {"type": "none"}
    return {"type": "tool", "name": choice}


def build_messages(transcript: list[Message]) -> list[dict[str, Any]]:
    """User/assistant turns with alternating roles, every tool_use paired with its result."""
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    pending: dict[str, None] = {}  # tool_use ids of the last assistant turn still unanswered
    answered: set[str] = set()

    def close_pending() -> None:
        for call_id in pending:
            turns.append(("user", [_tool_result(call_id, MISSING_RESULT, is_error=True)]))
        pending.clear()

    for message in transcript:
        match message.role:
            case Role.ASSISTANT:
                close_pending()
                answered.clear()
                blocks = _reasoning_blocks(message) + _text_blocks(message.text)
                for call in message.tool_calls:
                    call_id = safe_id(call.id)
                    if call_id in pending:
                        continue  # the API wants unique ids; a repeat cannot be answered
                    pending[call_id] = None
                    blocks.append(
                        {
                            "type": "tool_use",
                            "id": call_id,
                            "name": call.name,
                            "input": tool_input(call.arguments),
                        }
                    )
                if blocks:
                    turns.append(("assistant", blocks))
            case Role.TOOL:
                call_id = safe_id(message.tool_call_id)
                if call_id in pending:
                    del pending[call_id]
                    answered.add(call_id)
                    result = _tool_result(call_id, message.text, is_error=message.is_error)
                    turns.append(("user", [result]))
                elif message.text.strip() and call_id not in answered:
                    label = f"[result of tool {message.tool_name or 'call'} {call_id}]"
                    turns.append(("user", [{"type": "text", "text": f"{label}\n{message.text}"}]))
            case Role.USER:
                close_pending()
                blocks = (
                    [_content_block(part) for part in message.parts]
                    if message.parts
                    else _text_blocks(message.text)
                )
                if blocks:
                    turns.append(("user", blocks))
    close_pending()
    return merge_turns(turns)


def _content_block(part: ContentPart) -> dict[str, Any]:
    """A content part as a Messages API block: text, image, or document (PDF, plain text)."""
    match part.kind:
        case PartKind.TEXT:
            return {"type": "text", "text": part.text}
        case PartKind.IMAGE if part.url:
            return {"type": "image", "source": {"type": "url", "url": part.url}}
        case PartKind.IMAGE:
            return {"type": "image", "source": _base64(part)}
    if part.media_type == "text/plain":
        source = {"type": "text", "media_type": "text/plain", "data": part.data.decode()}
    else:
        source = _base64(part)
    block: dict[str, Any] = {"type": "document", "source": source}
    if part.filename:
        block["title"] = part.filename
    return block


def _base64(part: ContentPart) -> dict[str, str]:
    data = base64.b64encode(part.data).decode()
    return {"type": "base64", "media_type": part.media_type, "data": data}


def _reasoning_blocks(message: Message) -> list[dict[str, Any]]:
    """The thinking blocks kept with an assistant message, exactly as the API sent them."""
    if not message.reasoning_blocks:
        return []
    blocks = json.loads(message.reasoning_blocks)
    return [b for b in blocks if isinstance(b, dict) and b.get("type") in _THINKING_TYPES]


def merge_turns(turns: list[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Adjacent turns of one role become one message; a user message's tool results go first."""
    merged: list[dict[str, Any]] = []
    for role, blocks in turns:
        if merged and merged[-1]["role"] == role:
            merged[-1]["content"].extend(blocks)
        else:
            merged.append({"role": role, "content": list(blocks)})
    for message in merged:
        if message["role"] == "user":
            message["content"].sort(key=lambda block: block["type"] != "tool_result")
    return merged


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's JSON arguments as the object `tool_use.input` must be."""
    if not arguments.strip():
        return {}
    try:
        value = bounded_json.parse(arguments)
    except bounded_json.JsonRefused:
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"_raw_arguments": arguments}


def safe_id(call_id: str) -> str:
    """A tool-call id in the characters the API accepts (another provider may have made it)."""
    return _UNSAFE_ID_CHARS.sub("_", call_id) or "call"


def _text_blocks(text: str) -> list[dict[str, Any]]:
    # The API rejects empty and whitespace-only text blocks.
    return [{"type": "text", "text": text}] if text.strip() else []


def _tool_result(call_id: str, text: str, *, is_error: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "is_error": is_error}
    if text:
        block["content"] = text
    return block


def _tool_names_used(messages: list[dict[str, Any]]) -> list[str]:
    names = {
        block["name"]: None
        for message in messages
        for block in message["content"]
        if block["type"] == "tool_use"
    }
    return list(names)


# --- responses ----------------------------------------------------------------------------


def _describe(status: int) -> str:
    if status == 429:
        return "rate limited"
    if status == 529:
        return "overloaded"
    if status in (408, 504):
        return "timed out"
    if status >= 500:
        return "server error"
    if status == 404:
        return "not found"
    if status == 413:
        return "request too large"
    return "bad request"


def _error_object(body: object) -> dict[str, Any]:
    """`error` of Anthropic's {"type": "error", "error": {"type", "message"}} body, if any."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return error
    return {}


def _error_code(error: dict[str, Any]) -> str:
    details = error.get("details")
    code = details.get("error_code") if isinstance(details, dict) else None
    return code if isinstance(code, str) else ""


def _text_body(body: object) -> str:
    if body is None or isinstance(body, dict):
        return ""
    return str(body)
