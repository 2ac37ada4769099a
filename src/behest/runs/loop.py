"""The agent loop of one run, as explicit RunStatus states, talking only to ports.

Each state boundary is one step of the event log: its events, the run's status and the
snapshot commit together. Terminal events are the executor's job, not the loop's.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from behest.domain import events as ev
from behest.domain.messages import Message, Role, ToolCall
from behest.domain.runs import FinishReason, Run, RunStatus, TokenUsage, ToolChoice
from behest.domain.snapshots import Snapshot
from behest.errors import (
    ContextOverflowError,
    FailedPrecondition,
    ProviderError,
    TransientProviderError,
)
from behest.events.log import RunLog
from behest.providers.base import (
    Delta,
    Finished,
    ModelRequest,
    Provider,
    TextChunk,
    ToolCallArguments,
    ToolCallBegin,
)
from behest.providers.config import ProviderConfig
from behest.providers.guard import guarded_stream
from behest.runs import compaction
from behest.runs.compactor import Compacted, Compactor
from behest.runs.doom_loop import DoomLoopDetector
from behest.runs.start import run_started, user_message
from behest.runs.text_coalescer import TextCoalescer
from behest.store.base import (
    AppendMessage,
    PutSnapshot,
    Store,
    UpdateRun,
    Write,
)
from behest.telemetry import tracer
from behest.tools.base import ToolResult
from behest.tools.registry import ToolRegistry


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopLimits:
    """The loop's knobs (from Settings); retries and timeouts come from the provider's config."""

    max_iterations: int = 10
    tool_concurrency: int = 4
    compaction_cooldown_s: float = 300.0
    coalesce_text_deltas: bool = True


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run that did not fail ended."""

    finish_reason: FinishReason
    iterations: int
    usage: TokenUsage


@dataclass(slots=True)
class _Answer:
    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    # The tool call whose arguments are streaming: (id, name, fragments so far).
    open_call: tuple[str, str, list[str]] | None = None
    finish_reason: FinishReason = FinishReason.UNKNOWN
    usage: TokenUsage = field(default_factory=TokenUsage)


class AgentLoop:
    """Drives one run from its input to a final answer."""

    def __init__(
        self,
        *,
        run: Run,
        log: RunLog,
        store: Store,
        provider: Provider,
        provider_config: ProviderConfig,
        tools: ToolRegistry,
        limits: LoopLimits,
        compactor: Compactor | None = None,
        transcript: list[Message] | None = None,
    ) -> None:
        """`transcript`: the session's messages, when the caller knows them (a new session)."""
        self._run = run
        self._log = log
        self._store = store
        self._transcript_known = transcript is not None
        self._transcript: list[Message] = list(transcript or ())
        self.next_position = 0
        self._provider = provider
        self.compactor = compactor
        self._retry = provider_config.retry
        self._timeout_s = provider_config.timeout_s
        self._max_output_tokens = provider_config.model_info(run.model).max_output_tokens
        self._tools = tools
        self._limits = limits
        self.iteration = 0
        self.model_calls = 0
        self.usage = TokenUsage()
        self._max_iterations = run.max_iterations or limits.max_iterations
        allowed = list(run.tools) or tools.names()
        # Tools offered to the model; tool_choice "none" offers none, a tool's name all allowed.
        self._offered = set() if run.tool_choice == ToolChoice.NONE else set(allowed)
        self._executing: set[str] = set()
        self._doom_loop = DoomLoopDetector()
        self._finish_reason = FinishReason.UNSPECIFIED

    @property
    def transcript(self) -> list[Message]:
        """The session's messages as this run knows them (committed or being committed)."""
        return self._transcript

    async def run(self, snapshot: Snapshot | None = None) -> Outcome:
        """Run to the final answer; with a snapshot, resume an interrupted run where it was."""
        if snapshot is None:
            await self._start()
        else:
            finished = await self._resume(snapshot)
            if finished is not None:
                return finished
        while True:
            if self.iteration >= self._max_iterations:
                raise FailedPrecondition(
                    f"max iterations reached: the model still wanted tools after "
                    f"{self._max_iterations} iterations"
                )
            self.iteration += 1
            if self.compactor is not None:
                self._adopt(await self.compactor.before_call(self._transcript, self.next_position))
            await self._log.emit(
                ev.ContextBuilt(len(compaction.context(self._transcript))),
                state=self._state(RunStatus.BUILDING_CONTEXT),
            )
            answer = await self._call_model()
            message = self._message(Role.ASSISTANT, answer.text, tool_calls=tuple(answer.calls))
            self.usage += answer.usage
            self._finish_reason = answer.finish_reason
            await self._log.emit(
                ev.AssistantMessageCommitted(message.id),
                ev.UsageRecorded(answer.usage),
                state=[AppendMessage(message), *self._state(RunStatus.PERSISTING)],
            )
            self._remember(message)
            if not answer.calls:
                return Outcome(answer.finish_reason, self.iteration, self.usage)
            await self._check_doom_loop(answer.calls)
            await self._run_tools(answer.calls)

    async def _start(self) -> None:
        """Start a run created without its first step (CreateRun normally commits it)."""
        await self._load_transcript()
        user = user_message(self._run, self.next_position)
        self.next_position += 1
        await self._log.emit(
            run_started(self._run),
            state=[AppendMessage(user), *self._state(RunStatus.SESSION_LOADED)],
        )
        self._remember(user)

    async def _resume(self, snapshot: Snapshot) -> Outcome | None:
        """Pick up after a crash or shutdown: repeat an interrupted model call, finish the
        tool calls of the last answer (re-running one that was executing only if idempotent).
        """
        await self._load_transcript()
        self.iteration, self.model_calls = snapshot.iteration, snapshot.model_calls
        self.usage, self._finish_reason = snapshot.usage, snapshot.finish_reason
        mine = [m for m in self._transcript if m.run_id == self._run.id]
        for message in mine:
            for call in message.tool_calls:
                self._doom_loop.observe(call)
        match snapshot.status:
            case RunStatus.BUILDING_CONTEXT | RunStatus.CALLING_MODEL:
                self.iteration -= 1  # the iteration is done again, its model call repeated
                return None
            case RunStatus.PERSISTING | RunStatus.WAITING_FOR_TOOLS:
                pass
            case _:
                return None
        answer = next(m for m in reversed(mine) if m.role == Role.ASSISTANT)
        if not answer.tool_calls:
            return Outcome(self._finish_reason, self.iteration, self.usage)
        answered = {m.tool_call_id for m in mine if m.role == Role.TOOL}
        pending = [c for c in answer.tool_calls if c.id not in answered]
        for call in pending:
            tool = self._tools.get(call.name)
            if call.id in snapshot.pending_tool_calls and (tool is None or not tool.idempotent):
                raise FailedPrecondition(
                    f"tool {call.name!r} was executing when the server stopped; its outcome "
                    "is unknown and it is not idempotent, so it is not run again"
                )
        await self._run_tools(pending)
        return None

    # --- model calls ------------------------------------------------------------------

    async def _call_model(self) -> _Answer:
        attempt = 0
        overflowed = False
        while True:
            attempt += 1
            self.model_calls += 1
            await self._log.emit(
                ev.ModelStarted(self._run.provider, self._run.model, self.iteration),
                state=self._state(RunStatus.CALLING_MODEL),
            )
            try:
                with tracer().start_as_current_span(
                    "behest.model_call",
                    attributes={
                        "behest.provider": self._run.provider,
                        "behest.model": self._run.model,
                        "behest.iteration": self.iteration,
                        "behest.attempt": attempt,
                    },
                ):
                    return await self._stream_answer()
            except ContextOverflowError as exc:
                if overflowed or self.compactor is None:
                    raise
                overflowed = True  # compact, then one more try
                compacted = await self.compactor.after_overflow(
                    self._transcript, self.next_position
                )
                if compacted is None:
                    raise ContextOverflowError(
                        exc.provider, f"{_reason(exc)}; compacting the context failed"
                    ) from exc
                self._adopt(compacted)
                continue
            except TransientProviderError as exc:
                if (exc.retry_after or 0) > self._retry.max_retry_after_s:
                    raise TransientProviderError(
                        exc.provider,
                        f"{_reason(exc)}; it asks to retry after {exc.retry_after:g} s, longer "
                        f"than behest waits ({self._retry.max_retry_after_s:g} s)",
                    ) from exc
                if attempt >= self._retry.max_attempts:
                    raise TransientProviderError(
                        exc.provider, f"{_reason(exc)}; gave up after {attempt} attempts"
                    ) from exc
                await asyncio.sleep(self._backoff(attempt, exc.retry_after))

    async def _stream_answer(self) -> _Answer:
        request = ModelRequest(
            model=self._run.model,
            messages=compaction.context(self._transcript),
            tools=self._tools.definitions(sorted(self._offered)),
            tool_choice=self._tool_choice(),
            instructions=self._run.instructions,
            max_output_tokens=self._max_output_tokens,
            call_number=self.model_calls,
        )
        answer = _Answer()
        text = TextCoalescer(self._log, enabled=self._limits.coalesce_text_deltas)
        idle = self._timeout_s
        loop = asyncio.get_running_loop()
        try:
            async with (
                asyncio.timeout(idle) as deadline,
                contextlib.aclosing(guarded_stream(self._provider, request)) as deltas,
            ):
                async for delta in deltas:
                    deadline.reschedule(loop.time() + idle)
                    await self._take(delta, answer, text)
        except asyncio.CancelledError:
            text.discard()
            raise
        except Exception as exc:
            # Even a failed attempt's text is shown whole (a retry's ModelStarted voids it).
            await text.flush()
            if isinstance(exc, TimeoutError):
                raise TransientProviderError(
                    self._run.provider, f"no output for {idle:g} s (timed out)"
                ) from None
            raise
        await text.flush()
        await self._complete_call(answer)
        return answer

    def _tool_choice(self) -> str:
        """A forced choice binds until a tool has run: then "required" becomes "auto", and a
        named tool "none" (call it, then answer from its result)."""
        choice = self._run.tool_choice
        if choice in (ToolChoice.AUTO, ToolChoice.NONE):
            return choice
        if not any(m.role == Role.TOOL and m.run_id == self._run.id for m in self._transcript):
            return choice
        return ToolChoice.AUTO if choice == ToolChoice.REQUIRED else ToolChoice.NONE

    async def _take(self, delta: Delta, answer: _Answer, text: TextCoalescer) -> None:
        """One streamed delta: emit its event and add it to the answer."""
        if not isinstance(delta, TextChunk):
            await text.flush()
        match delta:
            case TextChunk(chunk):
                answer.text += chunk
                await text.add(chunk)
            case ToolCallBegin(call_id, name):
                await self._complete_call(answer)
                answer.open_call = (call_id, name, [])
                await self._log.emit(ev.ToolCallStarted(call_id, name))
            case ToolCallArguments(call_id, fragment):
                if answer.open_call is not None and answer.open_call[0] == call_id:
                    answer.open_call[2].append(fragment)
                await self._log.emit(ev.ToolCallDelta(call_id, fragment))
            case Finished(reason, usage):
                answer.finish_reason, answer.usage = reason, usage

    async def _complete_call(self, answer: _Answer) -> None:
        if answer.open_call is None:
            return
        call_id, name, fragments = answer.open_call
        answer.open_call = None
        call = ToolCall(call_id, name, "".join(fragments) or "{}")
        answer.calls.append(call)
        await self._log.emit(ev.ToolCallCompleted(call))

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self._retry.backoff_max_s, self._retry.backoff_initial_s * 2 ** (attempt - 1))
        delay *= random.uniform(0.5, 1.0)
        return max(delay, retry_after or 0.0)

    # --- tools ------------------------------------------------------------------------

    async def _check_doom_loop(self, calls: list[ToolCall]) -> None:
        for call in calls:
            description = self._doom_loop.observe(call)
            if description:
                await self._log.emit(ev.DoomLoopDetected(description))
                raise FailedPrecondition(f"doom loop detected: {description}")

    async def _run_tools(self, calls: list[ToolCall]) -> None:
        """Run a turn's calls: consecutive concurrency-safe ones together, others in order."""
        parallel: list[ToolCall] = []
        for call in calls:
            tool = self._tools.get(call.name)
            if tool is not None and tool.concurrency_safe and call.name in self._offered:
                parallel.append(call)
                continue
            await self._run_parallel(parallel)
            parallel = []
            await self._execute(call)
        await self._run_parallel(parallel)

    async def _run_parallel(self, calls: list[ToolCall]) -> None:
        if len(calls) <= 1:
            for call in calls:
                await self._execute(call)
            return
        slots = asyncio.Semaphore(self._limits.tool_concurrency)

        async def one(call: ToolCall) -> None:
            async with slots:
                await self._execute(call)

        async with asyncio.TaskGroup() as group:
            for call in calls:
                group.create_task(one(call))

    async def _execute(self, call: ToolCall) -> None:
        self._executing.add(call.id)
        started = await self._log.emit(
            ev.ToolExecutionStarted(call.id, call.name),
            state=self._state(RunStatus.WAITING_FOR_TOOLS),
        )
        # A tool may have side effects: it runs only once its start is durable.
        await asyncio.shield(started)
        began = time.monotonic()
        with tracer().start_as_current_span(
            "behest.tool", attributes={"behest.tool": call.name, "behest.call_id": call.id}
        ):
            if call.name in self._offered or self._tools.get(call.name) is None:
                result = await self._tools.execute(call)
            else:
                result = ToolResult(f"tool {call.name!r} is not available in this run", True)
            duration_ms = int((time.monotonic() - began) * 1000)
            self._executing.discard(call.id)
            message = self._message(
                Role.TOOL,
                result.text,
                tool_call_id=call.id,
                tool_name=call.name,
                is_error=result.is_error,
            )
            await self._log.emit(
                ev.ToolExecutionFinished(call.id, call.name, duration_ms),
                ev.ToolMessageCommitted(message.id),
                state=[AppendMessage(message), *self._state(RunStatus.WAITING_FOR_TOOLS)],
            )
            self._remember(message)

    # --- bookkeeping ------------------------------------------------------------------

    def _adopt(self, compacted: Compacted | None) -> None:
        if compacted is not None:
            self._transcript = compacted.transcript
            self.next_position += int(compacted.used_position)

    async def _load_transcript(self) -> None:
        if not self._transcript_known:
            self._transcript = await self._store.session_messages(self._run.session_id)
        self.next_position = self._transcript[-1].position + 1 if self._transcript else 0

    def _remember(self, message: Message) -> None:
        """Add a message to the transcript once it is queued for commit, in position order."""
        self._transcript.append(message)
        if len(self._transcript) > 1 and self._transcript[-2].position > message.position:
            self._transcript.sort(key=lambda m: m.position)  # parallel tools finish any order

    def _message(self, role: Role, text: str, **fields: object) -> Message:
        """A new message of this run, with the next free position of the session."""
        position = self.next_position
        self.next_position += 1
        message = Message(
            id=str(uuid.uuid4()),
            session_id=self._run.session_id,
            run_id=self._run.id,
            position=position,
            role=role,
            # Stored text cannot hold NUL (PostgreSQL); a tool reading a binary file may send one.
            text=text.replace("\x00", "\ufffd"),
            created_at=datetime.now(UTC),
            **fields,  # type: ignore[arg-type]
        )
        return message

    def _state(self, status: RunStatus) -> list[Write]:
        now = datetime.now(UTC)
        return [
            UpdateRun(
                run_id=self._run.id, status=status, iterations=self.iteration, usage=self.usage
            ),
            PutSnapshot(
                Snapshot(
                    run_id=self._run.id,
                    session_id=self._run.session_id,
                    status=status,
                    iteration=self.iteration,
                    usage=self.usage,
                    updated_at=now,
                    model_calls=self.model_calls,
                    pending_tool_calls=tuple(sorted(self._executing)),
                    finish_reason=self._finish_reason,
                )
            ),
        ]


def _reason(exc: ProviderError) -> str:
    prefix = f"provider {exc.provider!r}: "
    text = str(exc)
    return text[len(prefix) :] if text.startswith(prefix) else text
