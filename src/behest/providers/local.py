"""The offline, deterministic `local` provider: `echo` and a JSON-scripted `script` model.

`echo` answers with the text of the run's input (its first user message), one word per
chunk. Its summary calls (compaction) answer `summarise(text)`: the count of lines and each
line's first six words; `script` refuses to summarise, which makes a compaction fail on purpose.

`script` reads the run's input as `{"steps": [...]}` and plays `steps[N-1]` on the run's N-th
model call (retries count, so an error step followed by a text step exercises a retry; so does
the repair of a structured answer, so a step of invalid JSON text followed by one of valid JSON
plays a repaired answer); once the steps run out it answers "done". A step's fields, all optional:

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

Otherwise usage is a deterministic estimate: input tokens = (characters of every request
message's text and tool-call arguments) // 4 + 1; output tokens = the number of text chunks
and tool-argument fragments streamed (reasoning chunks included); reasoning tokens = the
number of reasoning chunks; no cache tokens.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field, replace

from behest import bounded_json
from behest.domain.content import PartKind, digest_of
from behest.domain.messages import Message, Role
from behest.domain.runs import FinishReason
from behest.domain.spend import TokenUsage
from behest.errors import (
    ContextOverflowError,
    InvalidArgument,
    PermanentProviderError,
    ProviderAuthError,
    RateLimited,
    TransientProviderError,
    quote,
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

KNOWN_MODELS = ("echo", "script")

# Bounds of a step's numbers (a script is client input).
MAX_DELTAS = 1_000_000
MAX_DELAY_MS = 600_000
MAX_RETRY_AFTER_S = 86_400
MAX_USAGE_TOKENS = 10**9

# Small enough that every tool call streams as several fragments, as real providers do.
ARGUMENT_FRAGMENT_CHARS = 8

_WORD = re.compile(r"\s*\S+\s*")
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


class LocalProvider:
    """Offline provider for tests, demos and benchmarks; never touches the network."""

    def __init__(self, *, name: str = "local", chunk_delay_s: float = 0.0) -> None:
        self.name = name
        # Default pause before each delta; a script step's delay_ms overrides it.
        self._chunk_delay_s = chunk_delay_s

    async def aclose(self) -> None:
        """Nothing to release."""

    def check_model(self, model: str) -> None:
        """Raise InvalidArgument unless `model` is one of KNOWN_MODELS."""
        if model not in KNOWN_MODELS:
            raise InvalidArgument(
                f"model: unknown model {quote(model)} for provider {self.name!r}; "
                f"known models: {', '.join(KNOWN_MODELS)}"
            )

    async def stream(self, request: ModelRequest) -> AsyncGenerator[Delta, None]:
        """Stream one model call's deltas; the last one is `Finished`."""
        self.check_model(request.model)
        last_user = _run_input(request.messages)
        if request.purpose == "summary" and request.model == "script":
            # A deterministic way to make compaction fail (tests of the circuit breaker).
            raise PermanentProviderError(self.name, "model 'script' does not summarise")
        if request.purpose == "summary":
            step = ScriptStep(text=summarise(last_user))
        elif request.model == "echo":
            step = ScriptStep(text=last_user)
        else:
            steps = parse_script(last_user)
            n = request.call_number
            step = steps[n - 1] if 1 <= n <= len(steps) else ScriptStep(text="done")
        if step.say:
            step = replace(step, text=_say(step.say, request))
        async for delta in self._play(step, request):
            yield delta

    async def _play(self, step: ScriptStep, request: ModelRequest) -> AsyncIterator[Delta]:
        delay = self._chunk_delay_s if step.delay_s is None else step.delay_s
        if step.error:
            await _pause(delay)
            raise self._error(step)
        output = reasoning = 0
        for chunk in split_words(step.reasoning):
            await _pause(delay)
            reasoning += 1
            yield ReasoningChunk(chunk)
        output += reasoning
        for chunk in split_words(step.text):
            await _pause(delay)
            output += 1
            yield TextChunk(chunk)
        for i in range(1, step.deltas + 1):
            await _pause(delay)
            output += 1
            yield TextChunk(f"w{i} ")
        for i, (name, arguments) in enumerate(step.tool_calls, start=1):
            call_id = f"call_{request.call_number}_{i}"
            await _pause(delay)
            yield ToolCallBegin(call_id, name)
            for start in range(0, len(arguments), ARGUMENT_FRAGMENT_CHARS):
                await _pause(delay)
                output += 1
                yield ToolCallArguments(call_id, arguments[start : start + ARGUMENT_FRAGMENT_CHARS])
        reason = step.finish
        if reason is None:
            reason = FinishReason.TOOL_CALLS if step.tool_calls else FinishReason.STOP
        usage = step.usage
        if usage is None:
            usage = TokenUsage(
                _estimate_input_tokens(request.messages), output, reasoning_tokens=reasoning
            )
        await _pause(delay)
        yield Finished(reason, usage)

    def _error(self, step: ScriptStep) -> Exception:
        match step.error:
            case "rate_limited":
                return RateLimited(self.name, "rate limited (429)", retry_after=step.retry_after_s)
            case "unavailable":
                return TransientProviderError(self.name, "unavailable (503)")
            case "context_overflow":
                return ContextOverflowError(self.name, "context window exceeded (scripted)")
            case "authentication":
                return ProviderAuthError(self.name, "authentication failed (401, scripted)")
            case _:
                return PermanentProviderError(self.name, "bad request (400, scripted)")


def summarise(text: str) -> str:
    """The local model's summary: deterministic, so tests can check where it ends up."""
    lines = [line for line in text.splitlines() if line.strip()]
    gist = " / ".join(" ".join(line.split()[:6]) for line in lines)
    return f"[{len(lines)} earlier lines] {gist}"


def split_words(text: str) -> list[str]:
    """Split text into word chunks that keep their whitespace, so they join back exactly."""
    chunks = _WORD.findall(text)
    if "".join(chunks) != text:
        # Whitespace-only text has no word to hang its spaces on; send it as it is.
        return [text] if text else []
    return chunks


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


def _run_message(messages: list[Message]) -> Message | None:
    """The run's input: the first user message of the run of the last one (a run's later
    user messages are behest's, e.g. the repair of a structured answer)."""
    last = next((m for m in reversed(messages) if m.role == Role.USER), None)
    if last is None:
        return None
    return next(m for m in messages if m.role == Role.USER and m.run_id == last.run_id)


def _run_input(messages: list[Message]) -> str:
    found = _run_message(messages)
    return "" if found is None else found.text


def _say(what: str, request: ModelRequest) -> str:
    """What the model was given, as text (the `say` step field)."""
    messages = request.messages
    match what:
        case "tool_results":
            last = max((i for i, m in enumerate(messages) if m.role == Role.ASSISTANT), default=-1)
            results = [
                f"{m.tool_name}: {'error: ' if m.is_error else ''}{m.text}"
                for m in messages[last + 1 :]
                if m.role == Role.TOOL
            ]
            return "\n".join(results) or "no tool results"
        case "tools":
            names = ", ".join(t.name for t in request.tools) or "none"
            return f"tools: {names} (choice: {request.tool_choice})"
        case "history":
            return " ".join(
                f"{m.role.value}[{','.join(c.name for c in m.tool_calls) or m.tool_name}]"
                if m.tool_calls or m.tool_name
                else m.role.value
                for m in messages
            )
        case "summary":
            summaries = [m.text for m in messages if m.summary_through is not None]
            return summaries[-1] if summaries else "no summary"
        case "limits":
            return f"max_output_tokens: {request.max_output_tokens}"
        case "content":
            return _content_seen(messages)
        case _:
            return request.instructions or "no instructions"


def _content_seen(messages: list[Message]) -> str:
    """The run input's images and files as the model received them: kind, media type,
    file name, and the digest and size of the bytes it was given (or the URL)."""
    first = _run_message(messages)
    parts = [p for p in (first.parts if first else ()) if p.kind != PartKind.TEXT]
    seen = [replace(p, digest=digest_of(p.data), size=len(p.data)) if p.data else p for p in parts]
    return "\n".join(p.describe() for p in seen) or "no content parts"


def _estimate_input_tokens(messages: list[Message]) -> int:
    chars = sum(len(m.text) + sum(len(c.arguments) for c in m.tool_calls) for m in messages)
    return chars // 4 + 1


async def _pause(seconds: float) -> None:
    # No sleep(0) at zero delay: 20,000-delta benchmarks should not pay a loop turn each.
    if seconds > 0:
        await asyncio.sleep(seconds)
