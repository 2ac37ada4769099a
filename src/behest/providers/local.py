"""The offline, deterministic `local` provider: `echo` and a JSON-scripted `script` model.

`echo` answers with the text of the run's input (its first user message), one word per
chunk. Its summary calls (compaction) answer `summarise(text)`: the count of lines and each
line's first six words; `script` refuses to summarise, which makes a compaction fail on purpose.

A running tool's sampling request (purpose "sampling") gets, from either model, the text of
its last message.

`script` reads the run's input as `{"steps": [...]}` and plays `steps[N-1]` on the run's N-th
model call (retries count, so an error step followed by a text step exercises a retry; so does
the repair of a structured answer, so a step of invalid JSON text followed by one of valid JSON
plays a repaired answer); once the steps run out it answers "done". A step's fields
are listed in local_script.py.

Without a step's `usage`, usage is a deterministic estimate: input tokens = (characters of
every request message's text and tool-call arguments) // 4 + 1; output tokens = the number of
text chunks and tool-argument fragments streamed (reasoning chunks included); reasoning
tokens = the number of reasoning chunks; no cache tokens.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import replace

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
from behest.providers.local_script import ScriptStep, parse_script

KNOWN_MODELS = ("echo", "script")

# Small enough that every tool call streams as several fragments, as real providers do.
ARGUMENT_FRAGMENT_CHARS = 8

_WORD = re.compile(r"\s*\S+\s*")


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
        if request.purpose == "sampling":
            step = ScriptStep(text=request.messages[-1].text if request.messages else "")
        elif request.purpose == "summary":
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
