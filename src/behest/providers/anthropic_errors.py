"""The Anthropic adapter's errors: an HTTP status or a stream's `error` event as a ProviderError.

429, 408, 409, 5xx, 529, timeouts and connection errors are transient (Retry-After and
retry-after-ms honoured; `x-should-retry` obeyed; a 429 is RateLimited); 401/403 (a
ProviderAuthError) and other 4xx are permanent, a prompt that does not fit the context window is
a ContextOverflowError; 429s that are spend limits are permanent. Messages name the HTTP status
and the provider's message, never the key.
"""

from __future__ import annotations

import re
from typing import Any

import anthropic

from behest.errors import (
    ContextOverflowError,
    PermanentProviderError,
    ProviderAuthError,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    TransientProviderError,
)
from behest.providers.redaction import redacted
from behest.providers.retry import retry_after_s

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


def status_error(name: str, exc: anthropic.APIStatusError, *, api_key: str) -> ProviderError:
    """The error an HTTP status (or an `error` event in a 200 stream) stands for; its text
    never holds `api_key`."""
    error = _error_object(exc.body)
    kind = str(error.get("type") or "")
    detail = redacted(str(error.get("message") or _text_body(exc.body)), api_key)
    status = exc.status_code
    in_stream = 200 <= status < 300  # an `error` event inside a 200 stream
    if in_stream:
        status = _STATUS_OF_TYPE.get(kind, 500)
        where = f"stream error event {kind or 'without a type'}"
    else:
        where = f"HTTP {status} {kind}".rstrip()
    if status in (401, 403):
        what = "authentication failed" if status == 401 else "permission denied"
        return ProviderAuthError(name, f"{what} ({where}): {detail}")
    if status in (400, 413) and _CONTEXT_OVERFLOW.search(detail):
        return ContextOverflowError(name, f"context window exceeded ({where}): {detail}")
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
        return error_class(name, message, retry_after=retry_after)
    if _error_code(error) in _SPEND_LIMITS:
        return QuotaExhausted(name, message)
    return PermanentProviderError(name, message)


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
