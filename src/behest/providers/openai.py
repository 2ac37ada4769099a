"""OpenAI Chat Completions (and compatible servers: llama.cpp, vLLM, Ollama) over the SDK.

The SDK's own retries are off: the agent loop retries transient errors and announces each
attempt. Vendor quirks handled here and in openai_request.py (what is sent), openai_stream.py
(the chunks read) and openai_errors.py (errors classed):

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

from collections.abc import AsyncGenerator
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletionChunk

from behest.providers.base import Delta, ModelRequest
from behest.providers.config import ProviderConfig
from behest.providers.openai_errors import (
    error_cause,
    provider_error,
    rejects_json_schema,
    rejects_max_tokens,
)
from behest.providers.openai_request import request_body
from behest.providers.openai_stream import ChunkReader

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Local servers need no key, but the SDK refuses to start without one.
NO_KEY = "not-needed"


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
            raise provider_error(
                self.name,
                exc,
                receiving=receiving,
                timeout_s=self._timeout_s,
                secret=self._secret,
            ) from error_cause(exc)
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
                    and rejects_max_tokens(exc)
                ):
                    self._completion_tokens_models.add(request.model)
                elif not json_object and request.response_format and rejects_json_schema(exc):
                    self._json_object_models.add(request.model)
                else:
                    raise

    async def _post(self, body: dict[str, Any]) -> openai.AsyncStream[ChatCompletionChunk]:
        create = cast(Any, self._client.chat.completions.create)
        return cast(openai.AsyncStream[ChatCompletionChunk], await create(**body))
