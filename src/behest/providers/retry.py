"""Retries of model calls: the policy, the server's Retry-After hint, backoff, the attempt loop.

Transient provider errors (429, 5xx, timeouts, cut or garbled streams) are retried up to
`max_attempts` per model call, waiting a backoff with full jitter — a uniform draw from 0 to
`min(backoff_max_s, backoff_initial_s * 2 ** (attempt - 1))` — or the server's Retry-After if
that is longer. A server that asks to wait longer than `max_retry_after_s` fails the call at
once: a run should not stall for minutes on one provider's say-so.
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from behest.backoff import backoff_s
from behest.errors import ProviderError, TransientProviderError

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Attempts per model call for transient errors, with exponential backoff and jitter."""

    max_attempts: int = 4
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 8.0
    # A provider asking to wait longer than this (Retry-After) fails the call instead.
    max_retry_after_s: float = 60.0

    def backoff_s(self, attempt: int, *, rng: random.Random | None = None) -> float:
        """The wait after failed attempt number `attempt` (1-based): full jitter."""
        return backoff_s(
            attempt, initial_s=self.backoff_initial_s, max_s=self.backoff_max_s, rng=rng
        )

    def delay_after(self, error: TransientProviderError, attempt: int) -> float:
        """How long to wait before the next attempt; raises the error to give up."""
        hint = error.retry_after or 0.0
        # The error's own class (RateLimited stays RateLimited): how the run fails says why.
        if hint > self.max_retry_after_s:
            raise type(error)(
                error.provider,
                f"{reason(error)}; it asks to retry after {hint:g} s, longer than behest "
                f"waits ({self.max_retry_after_s:g} s)",
            ) from error
        if attempt >= self.max_attempts:
            raise type(error)(
                error.provider, f"{reason(error)}; gave up after {attempt} attempts"
            ) from error
        return max(self.backoff_s(attempt), hint)


async def with_retries(
    attempt: Callable[[int], Awaitable[T]],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    retried: Callable[[TransientProviderError], None] = lambda error: None,
) -> T:
    """`attempt(n)` for n = 1, 2, … until it returns, retrying TransientProviderError;
    `retried(error)` counts each retry (the caller's metrics)."""
    for number in itertools.count(1):
        try:
            return await attempt(number)
        except TransientProviderError as exc:
            delay = policy.delay_after(exc, number)
            retried(exc)
            await sleep(delay)
    raise AssertionError("unreachable")


def reason(error: ProviderError) -> str:
    """The error's message without its "provider 'NAME': " prefix."""
    prefix = f"provider {error.provider!r}: "
    text = str(error)
    return text[len(prefix) :] if text.startswith(prefix) else text


def retry_after_s(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The server's wait hint: `retry-after-ms`, else `retry-after` in seconds or a date."""
    milliseconds = _number(headers.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None
