"""The OpenAI adapter's errors: an SDK error as a ProviderError, and the refusals the adapter
answers by asking again in another form (`max_tokens`, response_format json_schema)."""

from __future__ import annotations

import re
from collections.abc import Mapping

import openai

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
from behest.providers.redaction import redacted
from behest.providers.retry import retry_after_s

_OVERFLOW_CODES = {"context_length_exceeded", "exceed_context_size_error"}
_OVERFLOW_TEXT = re.compile(r"context[ _-]?(length|size|window)|maximum context", re.IGNORECASE)


def provider_error(
    name: str, exc: openai.OpenAIError, *, receiving: bool, timeout_s: float, secret: str
) -> ProviderError:
    """The behest error for an SDK error; never carries the API key."""
    match exc:
        case openai.APIStatusError():
            return status_error(name, exc, secret=secret)
        case openai.APITimeoutError():
            return TransientProviderError(name, f"timed out after {timeout_s:g} s")
        case openai.APIConnectionError():
            what = "stream cut off" if receiving else "connection failed"
            cause = exc.__cause__
            detail = f": {describe(cause)}" if cause is not None else ""
            return TransientProviderError(name, redacted(f"{what}{detail}", secret))
        case openai.APIError():
            # An error event inside a 200 stream ({"error": {...}}): the server gave up.
            message = redacted(exc.message, secret)
            if _is_overflow(exc.code, exc.type, message):
                return ContextOverflowError(name, f"context window exceeded: {message}")
            return TransientProviderError(name, f"error in the stream: {message}")
    return PermanentProviderError(name, redacted(f"client error: {describe(exc)}", secret))


def status_error(name: str, exc: openai.APIStatusError, *, secret: str) -> ProviderError:
    """The behest error for an HTTP status; never carries the API key."""
    status = exc.status_code
    message = redacted(_provider_message(exc), secret)
    detail = f"HTTP {status}: {message}" if message else f"HTTP {status}"
    if status == 401:
        # OpenAI's message quotes part of the key; it stays out of events and logs.
        return ProviderAuthError(name, f"authentication failed (HTTP {status})")
    if status == 403:
        return ProviderAuthError(name, f"permission denied ({detail})")
    if status == 429 and exc.code == "insufficient_quota":
        return QuotaExhausted(name, f"quota exhausted ({detail})")
    retry_after = retry_after_s(exc.response.headers)
    if status == 429:
        return RateLimited(name, f"rate limited ({detail})", retry_after=retry_after)
    if status in (408, 409) or status >= 500:
        return TransientProviderError(name, detail, retry_after=retry_after)
    if _is_overflow(exc.code, exc.type, message):
        return ContextOverflowError(name, f"context window exceeded ({detail})")
    return PermanentProviderError(name, f"request rejected ({detail})")


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


def rejects_max_tokens(exc: openai.BadRequestError) -> bool:
    """The model refused `max_tokens` and wants `max_completion_tokens` instead."""
    message = _provider_message(exc)
    return exc.param == "max_tokens" or (
        "max_tokens" in message and "max_completion_tokens" in message
    )


def rejects_json_schema(exc: openai.APIStatusError) -> bool:
    """The server refused response_format {"type": "json_schema"} (llama-cpp-python answers
    500 "… response_format … Input should be 'text' or 'json_object'")."""
    return exc.status_code in (400, 422, 500) and "response_format" in _provider_message(exc)


def error_cause(exc: openai.OpenAIError) -> BaseException | None:
    """What to chain the ProviderError to (`raise … from`): the SDK error, or nothing."""
    # An auth error's text may quote part of the key: keep it out of any traceback.
    if isinstance(exc, openai.AuthenticationError):
        return None
    return exc
