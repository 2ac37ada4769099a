"""One attempt of a model call: announced by its own ModelStarted (the run's budget asked
first), its request built (context, tools offered, tool choice), the stream assembled into a
turn under an idle timeout, and the call traced (GenAI span attributes, metrics). The loop
retries attempts (providers/retry.py) and compacts on overflow."""

from __future__ import annotations

import asyncio
import contextlib
import time

from opentelemetry.trace import Span

from behest.domain import events as ev
from behest.domain.messages import Role, ToolDefinition
from behest.domain.runs import Run, RunStatus, ToolChoice
from behest.errors import TransientProviderError
from behest.events.run_log import RunLog
from behest.observability.metrics import ModelCall
from behest.observability.span_content import messages_content, output_content
from behest.observability.telemetry import current, span
from behest.providers.base import ModelRequest, Provider
from behest.providers.config import ProviderConfig
from behest.providers.guard import guarded_stream
from behest.runs import compaction
from behest.runs.budget import Budget
from behest.runs.progress import RunProgress
from behest.runs.sub_runs import SPAWN_TOOL, SubRuns
from behest.runs.turn import Turn, TurnAssembler
from behest.runs.waiting import Waits
from behest.tools.registry import ToolRegistry


class ModelAttempts:
    """Makes one run's model call attempts."""

    def __init__(
        self,
        *,
        run: Run,
        log: RunLog,
        progress: RunProgress,
        provider: Provider,
        provider_config: ProviderConfig,
        budget: Budget,
        tools: ToolRegistry,
        offered: frozenset[str],
        waits: Waits,
        coalesce_text: bool,
    ) -> None:
        self._run = run
        self._log = log
        self._progress = progress
        self._provider = provider
        self._timeout_s = provider_config.timeout_s
        self._max_output_tokens = provider_config.model_info(run.model).max_output_tokens
        self._system = provider_config.type  # gen_ai.system: openai, anthropic, local
        self._budget = budget
        self._tools = tools
        self._offered = offered
        self._waits = waits
        self._coalesce_text = coalesce_text
        self._telemetry = current()
        self._metrics = self._telemetry.metrics
        self._model_call = ModelCall(self._metrics, run.provider, run.model)
        agent = run.agent.current(run.current_agent) if run.agent else None
        # The agent its calls are made by (ModelStarted), after a handoff the target.
        self._agent = (agent.name, agent.version) if agent else ("", 0)

    async def attempt(self, attempt: int) -> Turn:
        """One attempt of a model call, announced by its own ModelStarted."""
        allowed = await self._budget.before_call(self._max_output_tokens)
        self._progress.model_calls += 1
        await self._log.emit(
            ev.ModelStarted(
                self._run.provider, self._run.model, self._progress.iteration, *self._agent
            ),
            state=self._progress.state(RunStatus.CALLING_MODEL),
        )
        with span("behest.model_call", self._call_attributes(attempt, allowed)) as call_span:
            began = time.perf_counter()
            try:
                turn = await self._stream_turn(allowed)
            except Exception:
                self._metrics.model_call(self._model_call, time.perf_counter() - began, ok=False)
                raise
            self._metrics.model_call(self._model_call, time.perf_counter() - began, ok=True)
            self._trace_turn(call_span, turn)
            return turn

    def _call_attributes(self, attempt: int, max_tokens: int) -> dict[str, str | int]:
        """A model call span's attributes (GenAI semantic conventions), content only when
        trace_content is on."""
        attributes: dict[str, str | int] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": self._system,
            "gen_ai.provider.name": self._system,
            "gen_ai.request.model": self._run.model,
            "gen_ai.request.max_tokens": max_tokens,
            "gen_ai.conversation.id": self._run.session_id,
            "behest.provider": self._run.provider,
            "behest.model": self._run.model,
            "behest.iteration": self._progress.iteration,
            "behest.attempt": attempt,
        }
        if self._telemetry.trace_content:
            context = compaction.context(self._progress.transcript)
            attributes["gen_ai.input.messages"] = messages_content(context)
            if self._run.instructions:
                attributes["gen_ai.system_instructions"] = self._run.instructions
        return attributes

    def _trace_turn(self, call_span: Span, turn: Turn) -> None:
        """What a model call answered, on its span and in the token counts."""
        usage = turn.usage
        prompt = usage.input_tokens + usage.cached_input_tokens + usage.cache_write_tokens
        self._metrics.tokens(self._model_call, prompt, usage.output_tokens)
        call_span.set_attribute("gen_ai.usage.input_tokens", prompt)
        call_span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        if usage.cached_input_tokens:
            call_span.set_attribute(
                "gen_ai.usage.cache_read.input_tokens", usage.cached_input_tokens
            )
        call_span.set_attribute(
            "gen_ai.response.finish_reasons", (turn.finish_reason.name.lower(),)
        )
        if self._telemetry.trace_content:
            call_span.set_attribute("gen_ai.output.messages", output_content(turn.text, turn.calls))

    async def _stream_turn(self, max_output_tokens: int) -> Turn:
        request = ModelRequest(
            model=self._run.model,
            messages=compaction.context(self._progress.transcript),
            tools=self._definitions(),
            tool_choice=self._tool_choice(),
            instructions=self._run.instructions,
            max_output_tokens=max_output_tokens,
            call_number=self._progress.model_calls,
            response_format=self._run.response_format,
            reasoning=self._run.reasoning,
        )
        turn = TurnAssembler(self._log, coalesce_text=self._coalesce_text)
        idle = self._timeout_s
        loop = asyncio.get_running_loop()
        try:
            async with (
                asyncio.timeout(idle) as deadline,
                contextlib.aclosing(guarded_stream(self._provider, request)) as deltas,
            ):
                async for delta in deltas:
                    deadline.reschedule(loop.time() + idle)
                    await turn.take(delta)
        except asyncio.CancelledError:
            turn.discard()
            raise
        except Exception as exc:
            await turn.flush()
            if isinstance(exc, TimeoutError):
                raise TransientProviderError(
                    self._run.provider, f"no output for {idle:g} s (timed out)"
                ) from None
            raise
        return await turn.finish()

    def _definitions(self) -> list[ToolDefinition]:
        """The server's tools this run may use, and its client tools (unless none may)."""
        if self._run.tool_choice == ToolChoice.NONE:
            return []
        spawn = [SubRuns.definition()] if SPAWN_TOOL in self._offered else []
        return (
            self._tools.definitions(sorted(self._offered))
            + spawn
            + self._waits.client_definitions()
        )

    def _tool_choice(self) -> str:
        """A forced choice binds until a tool has run: then "required" becomes "auto", and a
        named tool "none" (call it, then answer from its result)."""
        choice = self._run.tool_choice
        if choice in (ToolChoice.AUTO, ToolChoice.NONE):
            return choice
        if not any(m.role == Role.TOOL for m in self._progress.mine()):
            return choice
        return ToolChoice.AUTO if choice == ToolChoice.REQUIRED else ToolChoice.NONE
