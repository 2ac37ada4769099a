"""The Anthropic Messages API adapter, over the official `anthropic` SDK's async client.

What it sends: anthropic_request.py; how it reads the stream: anthropic_stream.py; how it
classes errors: anthropic_errors.py.

The SDK's own retries are off (`max_retries=0`): behest's loop retries and announces each attempt.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator

import anthropic
import httpx2

from behest.errors import PermanentProviderError, TransientProviderError, describe
from behest.providers.anthropic_errors import status_error
from behest.providers.anthropic_request import build_params
from behest.providers.anthropic_stream import StreamDecoder
from behest.providers.base import Delta, ModelRequest
from behest.providers.config import ProviderConfig
from behest.providers.redaction import redacted

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
            raise status_error(self.name, exc, api_key=self._api_key) from (
                None if exc.status_code in (401, 403) else exc
            )
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

    def _brief(self, text: str) -> str:
        return redacted(text, self._api_key)
