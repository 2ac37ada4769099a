"""OpenAI Chat Completions (and compatible servers: llama.cpp, vLLM, Ollama) over the SDK.

The SDK's own retries are off: the agent loop retries transient errors and announces each
attempt. Vendor quirks handled here:

- `max_tokens` is sent, as every compatible server understands it; a model that rejects
  it (OpenAI's reasoning and GPT-5 models: 400 `unsupported_parameter`) is asked again at
  once with `max_completion_tokens`, and that choice is kept for the model.
- Tool calls stream by `index`; the id and name come in a call's first fragment, the
  arguments in later ones. Calls are assumed to stream one after another (as OpenAI does).
- Usage arrives in a last chunk with no choices (`stream_options.include_usage`).
  `prompt_tokens` includes the prompt tokens read from OpenAI's prompt cache
  (`prompt_tokens_details.cached_tokens`); behest counts those apart, as cached input tokens.
  Cache writes are not split out: they stay in the input tokens.
- A 429 whose code is `insufficient_quota` will not pass by waiting: it is permanent. Other
  429s are RateLimited (transient); 401 and 403 are ProviderAuthErrors.
- Structured output is `response_format: {"type": "json_schema", "json_schema": {name,
  schema}}` on every call of the run. A server that refuses it naming response_format
  (llama-cpp-python's: a 500 "Input should be 'text' or 'json_object'") is asked again at once
  with `{"type": "json_object", "schema": …}`, which it turns into a grammar; that choice is
  kept for the model.
- Reasoning: a run's `reasoning.effort` is sent as `reasoning_effort`. Reasoning text streamed
  as `delta.reasoning_content` (DeepSeek, llama.cpp, vLLM) or `delta.reasoning` (OpenRouter,
  Ollama) becomes ReasoningChunks, never answer text; OpenAI itself streams none.
  `usage.completion_tokens_details.reasoning_tokens` is reported as reasoning tokens (a part
  of the output tokens).
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import openai
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionChunk

from behest.domain.content import ContentPart, PartKind
from behest.domain.messages import Message, Role
from behest.domain.runs import FinishReason
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
    ReasoningChunk,
    TextChunk,
    ToolCallArguments,
    ToolCallBegin,
)
from behest.providers.config import ProviderConfig
from behest.providers.redaction import redacted
from behest.providers.retry import retry_after_s

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Local servers need no key, but the SDK refuses to start without one.
NO_KEY = "not-needed"

_FINISH = {
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "length": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}
_OVERFLOW_CODES = {"context_length_exceeded", "exceed_context_size_error"}
_OVERFLOW_TEXT = re.compile(r"context[ _-]?(length|size|window)|maximum context", re.IGNORECASE)
_CHOICES = ("auto", "none", "required")


class OpenAIProvider:
    """A provider speaking OpenAI's Chat Completions API, streamed."""

    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        self._secret = config.api_key
        self._timeout_s = config.timeout_s
        self._client = openai.AsyncOpenAI(
            api_key=config.api_key or NO_KEY,
            base_url=config.base_url or DEFAULT_BASE_URL,
            timeout=config.timeout_s,
            max_retries=0,
        )
        # Models that refused `max_tokens` and want `max_completion_tokens` instead.
        self._completion_tokens_models: set[str] = set()
        # Models whose server refused response_format json_schema and takes llama-cpp-python's
        # {"type": "json_object", "schema": …} instead.
        self._json_object_models: set[str] = set()

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()

    async def stream(self, request: ModelRequest) -> AsyncGenerator[Delta, None]:
        """Stream one model call's deltas; the last one is `Finished`."""
        reader = ChunkReader()
        receiving = False
        try:
            stream = await self._create(request)
            receiving = True
            async with stream:
                async for chunk in stream:
                    for delta in reader.feed(chunk):
                        yield delta
        except openai.OpenAIError as exc:
            raise self._error(exc, receiving=receiving) from _cause(exc)
        yield reader.finished(self.name)

    async def _create(self, request: ModelRequest) -> openai.AsyncStream[ChatCompletionChunk]:
        """Post the request; a refused `max_tokens` or response_format is asked again at once
        in the form the model takes (once each, remembered for the model)."""
        while True:
            completion_tokens = request.model in self._completion_tokens_models
            json_object = request.model in self._json_object_models
            body = request_body(
                request, completion_tokens=completion_tokens, json_object=json_object
            )
            try:
                return await self._post(body)
            except openai.APIStatusError as exc:
                if (
                    not completion_tokens
                    and request.max_output_tokens
                    and isinstance(exc, openai.BadRequestError)
                    and _rejects_max_tokens(exc)
                ):
                    self._completion_tokens_models.add(request.model)
                elif not json_object and request.response_format and _rejects_json_schema(exc):
                    self._json_object_models.add(request.model)
                else:
                    raise

    async def _post(self, body: dict[str, Any]) -> openai.AsyncStream[ChatCompletionChunk]:
        create = cast(Any, self._client.chat.completions.create)
        return cast(openai.AsyncStream[ChatCompletionChunk], await create(**body))

    def _error(self, exc: openai.OpenAIError, *, receiving: bool) -> ProviderError:
        """The behest error for an SDK error; never carries the API key."""
        match exc:
            case openai.APIStatusError():
                return self._status_error(exc)
            case openai.APITimeoutError():
                return TransientProviderError(self.name, f"timed out after {self._timeout_s:g} s")
            case openai.APIConnectionError():
                what = "stream cut off" if receiving else "connection failed"
                cause = exc.__cause__
                detail = f": {describe(cause)}" if cause is not None else ""
                return TransientProviderError(self.name, self._clean(f"{what}{detail}"))
            case openai.APIError():
                # An error event inside a 200 stream ({"error": {...}}): the server gave up.
                message = self._clean(exc.message)
                if _is_overflow(exc.code, exc.type, message):
                    return ContextOverflowError(self.name, f"context window exceeded: {message}")
                return TransientProviderError(self.name, f"error in the stream: {message}")
        return PermanentProviderError(self.name, self._clean(f"client error: {describe(exc)}"))

    def _status_error(self, exc: openai.APIStatusError) -> ProviderError:
        status = exc.status_code
        message = self._clean(_provider_message(exc))
        detail = f"HTTP {status}: {message}" if message else f"HTTP {status}"
        if status == 401:
            # OpenAI's message quotes part of the key; it stays out of events and logs.
            return ProviderAuthError(self.name, f"authentication failed (HTTP {status})")
        if status == 403:
            return ProviderAuthError(self.name, f"permission denied ({detail})")
        if status == 429 and exc.code == "insufficient_quota":
            return QuotaExhausted(self.name, f"quota exhausted ({detail})")
        retry_after = retry_after_s(exc.response.headers)
        if status == 429:
            return RateLimited(self.name, f"rate limited ({detail})", retry_after=retry_after)
        if status in (408, 409) or status >= 500:
            return TransientProviderError(self.name, detail, retry_after=retry_after)
        if _is_overflow(exc.code, exc.type, message):
            return ContextOverflowError(self.name, f"context window exceeded ({detail})")
        return PermanentProviderError(self.name, f"request rejected ({detail})")

    def _clean(self, text: str) -> str:
        return redacted(text, self._secret)


# --- request mapping --------------------------------------------------------------------


def request_body(
    request: ModelRequest, *, completion_tokens: bool = False, json_object: bool = False
) -> dict[str, Any]:
    """The JSON body of a streamed chat completion for `request`; `json_object`: its response
    format in llama-cpp-python's form."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": chat_messages(request),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters_schema,
                },
            }
            for tool in request.tools
        ]
        body["tool_choice"] = tool_choice(request.tool_choice)
    if request.max_output_tokens:
        field_name = "max_completion_tokens" if completion_tokens else "max_tokens"
        body[field_name] = request.max_output_tokens
    if request.reasoning is not None and request.reasoning.effort:
        body["reasoning_effort"] = request.reasoning.effort
    if request.response_format is not None and json_object:
        body["response_format"] = {"type": "json_object", "schema": request.response_format.schema}
    elif request.response_format is not None:
        # Not strict: strict mode refuses most schemas (every property required, no
        # additionalProperties); behest validates the answer itself.
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": request.response_format.name,
                "schema": request.response_format.schema,
            },
        }
    return body


def tool_choice(choice: str) -> str | dict[str, Any]:
    """`auto`, `none`, `required`, or the one tool the model must call."""
    if choice in _CHOICES or not choice:
        return choice or "auto"
    return {"type": "function", "function": {"name": choice}}


def chat_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Instructions as a leading system message, then the transcript."""
    messages = [{"role": "system", "content": request.instructions}] if request.instructions else []
    return messages + [chat_message(m) for m in request.messages]


def chat_message(message: Message) -> dict[str, Any]:
    """One transcript message in Chat Completions form."""
    match message.role:
        case Role.USER if message.parts:
            return {"role": "user", "content": [_content_part(part) for part in message.parts]}
        case Role.SYSTEM | Role.USER:
            return {"role": message.role.value, "content": message.text}
        case Role.ASSISTANT:
            if not message.tool_calls:
                return {"role": "assistant", "content": message.text}
            return {
                "role": "assistant",
                # "" rather than null: OpenAI accepts both, llama.cpp's server only a string.
                "content": message.text,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments or "{}"},
                    }
                    for call in message.tool_calls
                ],
            }
        case Role.TOOL:
            # Chat Completions has no error flag on tool results; say it in the content.
            content = f"Error: {message.text}" if message.is_error else message.text
            return {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
    raise ValueError(f"unknown role {message.role!r}")


def _content_part(part: ContentPart) -> dict[str, Any]:
    """A content part as a Chat Completions user content part (text, image_url, file)."""
    match part.kind:
        case PartKind.TEXT:
            return {"type": "text", "text": part.text}
        case PartKind.IMAGE:
            url = part.url or _data_url(part)
            return {"type": "image_url", "image_url": {"url": url}}
    file: dict[str, str] = {"file_data": _data_url(part)}
    if part.filename:
        file["filename"] = part.filename
    return {"type": "file", "file": file}


def _data_url(part: ContentPart) -> str:
    return f"data:{part.media_type};base64,{base64.b64encode(part.data).decode()}"


# --- stream mapping ---------------------------------------------------------------------


@dataclass(slots=True)
class _Call:
    id: str = ""
    name: str = ""
    begun: bool = False
    pending: list[str] = field(default_factory=list)


class ChunkReader:
    """Turns `chat.completion.chunk`s into deltas: text, tool calls by index, finish, usage."""

    def __init__(self) -> None:
        self.finish_reason: FinishReason | None = None
        self.usage: TokenUsage | None = None
        self._calls: dict[int, _Call] = {}

    def feed(self, chunk: ChatCompletionChunk) -> list[Delta]:
        """The deltas of one chunk (only the first choice counts)."""
        if chunk.usage is not None:
            self.usage = usage_of(chunk.usage)
        deltas: list[Delta] = []
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None:
                thought = _reasoning_of(delta)
                if thought:
                    deltas.append(ReasoningChunk(thought))
                for text in (delta.content, delta.refusal):
                    if text:
                        deltas.append(TextChunk(text))
                for position, fragment in enumerate(delta.tool_calls or ()):
                    deltas += self._tool_fragment(position, fragment)
            if choice.finish_reason:
                deltas += self._flush()
                self.finish_reason = _FINISH.get(choice.finish_reason, FinishReason.UNKNOWN)
        return deltas

    def finished(self, provider: str) -> Finished:
        """The closing delta; a stream that never said why it stopped was cut short."""
        if self.finish_reason is None:
            raise TransientProviderError(provider, "stream ended early (no finish_reason)")
        return Finished(self.finish_reason, self.usage or TokenUsage())

    def _tool_fragment(self, position: int, fragment: Any) -> list[Delta]:
        index = fragment.index if isinstance(fragment.index, int) else position
        function = fragment.function
        call = self._calls.get(index)
        if call is None or (fragment.id and call.id and fragment.id != call.id):
            call = self._calls[index] = _Call()
        if fragment.id and not call.id:
            call.id = fragment.id
        if function is not None and function.name and not call.name:
            call.name = function.name
        if function is not None and function.arguments:
            call.pending.append(function.arguments)
        deltas: list[Delta] = []
        # Announce a call once its name is known; its id too, unless the server never sends it.
        if not call.begun and call.name and call.id:
            deltas += self._begin(call)
        if call.begun:
            deltas += [ToolCallArguments(call.id, piece) for piece in call.pending]
            call.pending.clear()
        return deltas

    def _begin(self, call: _Call) -> list[Delta]:
        call.id = call.id or f"call_{uuid.uuid4().hex[:24]}"
        call.begun = True
        return [ToolCallBegin(call.id, call.name)]

    def _flush(self) -> list[Delta]:
        """Calls still waiting for an id or a name start now (the loop reports a nameless one)."""
        deltas: list[Delta] = []
        for call in self._calls.values():
            if not call.begun:
                deltas += self._begin(call)
                deltas += [ToolCallArguments(call.id, piece) for piece in call.pending]
                call.pending.clear()
        return deltas


def _reasoning_of(delta: Any) -> str:
    """The reasoning text of a chunk's delta, which compatible servers send beside the
    content (an extra field to the SDK)."""
    extra = delta.model_extra or {}
    for name in ("reasoning_content", "reasoning"):
        value = extra.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def usage_of(usage: CompletionUsage) -> TokenUsage:
    """Chat Completions usage with the cached prompt tokens (a part of prompt_tokens) apart."""
    prompt = usage.prompt_tokens or 0
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    # A compatible server claiming more cached tokens than prompt tokens: trust the prompt.
    cached = min(cached, prompt)
    output = usage.completion_tokens or 0
    completion = usage.completion_tokens_details
    reasoning = (completion.reasoning_tokens or 0) if completion is not None else 0
    return TokenUsage(
        input_tokens=prompt - cached,
        output_tokens=output,
        cached_input_tokens=cached,
        reasoning_tokens=min(reasoning, output),
    )


# --- errors -----------------------------------------------------------------------------


def _provider_message(exc: openai.APIStatusError) -> str:
    """The provider's own message: `error.message` of a JSON body, else the body text."""
    body = exc.body
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str):
            return message
        detail = body.get("detail")  # FastAPI-style servers (vLLM's validation errors)
        return str(detail) if detail is not None else ""
    return body if isinstance(body, str) else ""


def _is_overflow(code: str | None, kind: str | None, message: str) -> bool:
    if code in _OVERFLOW_CODES or kind in _OVERFLOW_CODES:
        return True
    return bool(_OVERFLOW_TEXT.search(message))


def _rejects_max_tokens(exc: openai.BadRequestError) -> bool:
    message = _provider_message(exc)
    return exc.param == "max_tokens" or (
        "max_tokens" in message and "max_completion_tokens" in message
    )


def _rejects_json_schema(exc: openai.APIStatusError) -> bool:
    """The server refused response_format {"type": "json_schema"} (llama-cpp-python answers
    500 "… response_format … Input should be 'text' or 'json_object'")."""
    return exc.status_code in (400, 422, 500) and "response_format" in _provider_message(exc)


def _cause(exc: openai.OpenAIError) -> BaseException | None:
    # An auth error's text may quote part of the key: keep it out of any traceback.
    if isinstance(exc, openai.AuthenticationError):
        return None
    return exc
