"""A provider's stream may fail only with a ProviderError: everything else it raises is a
protocol error of that provider (a malformed chunk, a cut connection an SDK did not wrap, a
chunk of an unexpected shape) and becomes a TransientProviderError in plain words.

Transient, because a garbled response is usually the network's or the server's passing
fault: the attempt loop retries it like a 503, then fails the run naming the provider. The
exception itself, with its traceback, goes to the log for the operator, never to the client.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator

from behest.domain.runs import FinishReason
from behest.errors import BehestError, TransientProviderError
from behest.providers.base import (
    Delta,
    Finished,
    ModelRequest,
    Provider,
    ReasoningBlock,
    ReasoningChunk,
    TextChunk,
    ToolCallArguments,
    ToolCallBegin,
)

log = logging.getLogger(__name__)

_SHAPE = "sent a response of a shape behest does not understand"
# More tokens than any model's call can use: a usage count beyond it is garbage.
_MAX_TOKENS = 10**12
# Packages whose exceptions mean the transport failed (an SDK let one through unwrapped).
_TRANSPORT_PACKAGES = frozenset({"httpx", "httpx2", "httpcore", "h11", "h2", "anyio"})


async def guarded_stream(provider: Provider, request: ModelRequest) -> AsyncGenerator[Delta, None]:
    """`provider.stream(request)`, with anything but a ProviderError made one."""
    deltas = provider.stream(request)
    try:
        async for delta in deltas:
            # Text first and inline: most deltas are text, and this is every delta's path.
            if delta.__class__ is not TextChunk or delta.text.__class__ is not str:  # type: ignore[union-attr]
                if not well_formed(delta):
                    raise _Malformed(repr(delta)[:200])
            yield delta
    except BehestError:
        raise  # a ProviderError, or a check such as an unknown model
    except Exception as exc:
        log.warning("provider %r broke its stream protocol", provider.name, exc_info=True)
        raise TransientProviderError(provider.name, protocol_problem(exc)) from exc
    finally:
        await deltas.aclose()


class _Malformed(Exception):
    """A delta that does not hold what its type says."""


def well_formed(delta: Delta) -> bool:
    """Whether a delta holds what its type says (an SDK passes odd JSON values through)."""
    match delta:
        case TextChunk(text) | ReasoningChunk(text):
            return isinstance(text, str)
        case ReasoningBlock(block):
            return isinstance(block, dict)
        case ToolCallBegin(call_id, name):
            return isinstance(call_id, str) and isinstance(name, str)
        case ToolCallArguments(call_id, fragment):
            return isinstance(call_id, str) and isinstance(fragment, str)
        case Finished(reason, usage):
            counts = (
                usage.input_tokens,
                usage.output_tokens,
                usage.cached_input_tokens,
                usage.cache_write_tokens,
                usage.reasoning_tokens,
            )
            return isinstance(reason, FinishReason) and all(
                type(n) is int and 0 <= n <= _MAX_TOKENS for n in counts
            )
    return False


def protocol_problem(exc: Exception) -> str:
    """What went wrong with a provider's response, in words a client can act on."""
    match exc:
        case _Malformed():
            return _SHAPE
        case RecursionError():
            return "sent a response nested too deep to read"
        case UnicodeError():
            return "sent a response that is not valid text"
        case ValueError():
            return "sent a malformed response (a stream chunk is not valid JSON)"
        case ConnectionError() | EOFError():
            return "the connection broke off while the response was streaming"
        case OSError():
            return "the connection failed while the response was streaming"
    if type(exc).__module__.split(".")[0] in _TRANSPORT_PACKAGES:
        return "the connection broke off while the response was streaming"
    return _SHAPE
