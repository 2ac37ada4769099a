"""The `script` model's scripts: `{"steps": [...]}` read and checked into ScriptSteps.

A step's fields, all optional:

    reasoning     str     the model's reasoning, streamed one word per chunk before the
                          text (ReasoningDelta events, never the answer's text)
    text          str     streamed one word per chunk
    deltas        int     then that many chunks "w1 ", "w2 ", … (long runs, small input);
                          at most 1,000,000
    tool_calls    list    {"name": str, "arguments": object or JSON text}; ids "call_<N>_<i>"
    delay_ms      number  pause before each delta (and before an error); cancellable;
                          at most 600,000 (ten minutes)
    error         str     rate_limited | unavailable | context_overflow | bad_request |
                          authentication,
                          raised before any output of the step
    retry_after_s number  the Retry-After hint of a rate_limited error; at most 86,400
    finish        str     stop | length | tool_calls; default tool_calls if the step has
                          tool calls, else stop
    say           str     answer with what the model was given, so tests can see it:
                          tool_results (this turn's tool messages), tools (offered tools and
                          tool_choice), history (the transcript's roles), instructions,
                          summary (the compaction summary the model was given), limits
                          (the call's max_output_tokens, as budgets clamp it),
                          content (the input's images and files as received: kind,
                          media type, file name, digest and size of the bytes, or URL)
    usage         object  {"input": N, "output": N, "cached_input": N, "cache_write": N,
                          "reasoning": N}:
                          the call's exact usage instead of the estimate (cache tokens, costs
                          and budgets offline); each an integer from 0 to 1,000,000,000,
                          those left out 0
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from behest import bounded_json
from behest.domain.runs import FinishReason
from behest.domain.spend import TokenUsage
from behest.errors import PermanentProviderError

# Bounds of a step's numbers (a script is client input).
MAX_DELTAS = 1_000_000
MAX_DELAY_MS = 600_000
MAX_RETRY_AFTER_S = 86_400
MAX_USAGE_TOKENS = 10**9

_FINISH = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_CALLS,
}
_ERRORS = ("rate_limited", "unavailable", "context_overflow", "bad_request", "authentication")
_SAYINGS = ("tool_results", "tools", "history", "instructions", "summary", "limits", "content")
_STEP_FIELDS = frozenset(
    {
        "reasoning",
        "text",
        "deltas",
        "tool_calls",
        "delay_ms",
        "error",
        "retry_after_s",
        "finish",
        "say",
        "usage",
    }
)
# A step's usage fields → TokenUsage's.
_USAGE_FIELDS = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cached_input": "cached_input_tokens",
    "cache_write": "cache_write_tokens",
    "reasoning": "reasoning_tokens",
}
_SCRIPT_SHAPE = (
    'expected a JSON object {"steps": [{"text": "...", "tool_calls": [{"name": "...", '
    '"arguments": {...}}], "delay_ms": 0, "error": "...", "finish": "stop"}, ...]}'
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptStep:
    """One model call of a script."""

    reasoning: str = ""
    text: str = ""
    deltas: int = 0
    tool_calls: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    delay_s: float | None = None
    error: str = ""
    retry_after_s: float | None = None
    finish: FinishReason | None = None
    say: str = ""
    usage: TokenUsage | None = None  # None: the estimate


def parse_script(text: str) -> list[ScriptStep]:
    """Parse and validate a whole script, so a typo fails on the first call, not the Nth."""
    try:
        data = bounded_json.parse(text)
    except bounded_json.JsonRefused as exc:
        raise _script_error(f"the input {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        raise _script_error('input has no "steps" list')
    return [_parse_step(i, raw) for i, raw in enumerate(data["steps"], start=1)]


def _parse_step(index: int, raw: object) -> ScriptStep:
    where = f"steps[{index - 1}]"
    if not isinstance(raw, dict):
        raise _script_error(f"{where} is not an object")
    unknown = sorted(set(raw) - _STEP_FIELDS)
    if unknown:
        raise _script_error(f"{where} has unknown fields {unknown}")
    reasoning = raw.get("reasoning", "")
    text = raw.get("text", "")
    deltas = raw.get("deltas", 0)
    delay_ms = raw.get("delay_ms")
    error = raw.get("error", "")
    retry_after = raw.get("retry_after_s")
    finish = raw.get("finish")
    say = raw.get("say", "")
    if say and say not in _SAYINGS:
        raise _script_error(f"{where}.say must be one of {', '.join(_SAYINGS)}")
    if not isinstance(text, str):
        raise _script_error(f"{where}.text must be a string")
    if not isinstance(reasoning, str):
        raise _script_error(f"{where}.reasoning must be a string")
    if not _is_int(deltas) or not 0 <= deltas <= MAX_DELTAS:
        raise _script_error(f"{where}.deltas must be an integer from 0 to {MAX_DELTAS}")
    if delay_ms is not None and not _within(delay_ms, MAX_DELAY_MS):
        raise _script_error(f"{where}.delay_ms must be a number from 0 to {MAX_DELAY_MS}")
    if error and error not in _ERRORS:
        raise _script_error(f"{where}.error must be one of {', '.join(_ERRORS)}")
    if retry_after is not None and not _within(retry_after, MAX_RETRY_AFTER_S):
        raise _script_error(f"{where}.retry_after_s must be a number from 0 to {MAX_RETRY_AFTER_S}")
    if finish is not None and finish not in _FINISH:
        raise _script_error(f"{where}.finish must be one of {', '.join(_FINISH)}")
    return ScriptStep(
        reasoning=reasoning,
        text=text,
        deltas=deltas,
        tool_calls=_parse_tool_calls(where, raw.get("tool_calls", [])),
        delay_s=None if delay_ms is None else delay_ms / 1000,
        error=error,
        retry_after_s=None if retry_after is None else float(retry_after),
        finish=None if finish is None else _FINISH[finish],
        say=say,
        usage=_parse_usage(where, raw.get("usage")),
    )


def _parse_tool_calls(where: str, raw: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, list):
        raise _script_error(f"{where}.tool_calls must be a list")
    calls = []
    for i, call in enumerate(raw):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise _script_error(f'{where}.tool_calls[{i}] must be {{"name": str, "arguments": …}}')
        arguments = call.get("arguments", {})
        # A string is sent verbatim, so a script can make the model emit invalid JSON.
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        calls.append((call["name"], arguments))
    return tuple(calls)


def _parse_usage(where: str, raw: object) -> TokenUsage | None:
    if raw is None:
        return None
    shape = ", ".join(f'"{name}": N' for name in _USAGE_FIELDS)
    if not isinstance(raw, dict) or set(raw) - set(_USAGE_FIELDS):
        raise _script_error(f"{where}.usage must be an object {{{shape}}}")
    for name, value in raw.items():
        if not _is_int(value) or not 0 <= value <= MAX_USAGE_TOKENS:
            raise _script_error(
                f"{where}.usage.{name} must be an integer from 0 to {MAX_USAGE_TOKENS}"
            )
    return TokenUsage(**{_USAGE_FIELDS[name]: value for name, value in raw.items()})


def _script_error(problem: str) -> PermanentProviderError:
    return PermanentProviderError("local", f"model 'script': {problem}; {_SCRIPT_SHAPE}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _within(value: object, maximum: float) -> bool:
    """A number (not a bool) from 0 to `maximum`; NaN and infinities are not."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= maximum
