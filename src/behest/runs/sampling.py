"""A running tool's sampling request answered by its run's own provider and model.

One model call, no tools, no retries, on the run's provider and model (an MCP server's
`sampling/createMessage`: tools/mcp_sampling.py; a plugin tool's ToolContext.sample). The
run's budgets are asked first, without stopping the run (a spent budget refuses the request;
the run's own next check stops it) and clamp the answer's tokens as they clamp the loop's
calls. What it spent is the run's: a UsageRecorded event, committed with the run's usage,
counts toward its budgets and its tenant's. A provider's failure refuses the request with
its words; the tool decides what that means.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from datetime import UTC, datetime

from behest.domain import events as ev
from behest.domain.messages import Message, Role
from behest.domain.runs import FinishReason, Run, RunStatus
from behest.domain.spend import TokenUsage
from behest.errors import BehestError, ProviderError
from behest.events.run_log import RunLog
from behest.observability.metrics import ModelCall
from behest.observability.telemetry import current, span
from behest.providers.base import Finished, ModelRequest, Provider, TextChunk
from behest.providers.config import ProviderConfig
from behest.providers.guard import guarded_stream
from behest.providers.retry import reason
from behest.runs.budget import Budget
from behest.runs.progress import RunProgress
from behest.tools.context import ToolContext
from behest.tools.sampling import SamplingRefused, SamplingReply, SamplingRequest

# MCP's words for why a model stopped.
_STOP_REASONS = {FinishReason.LENGTH: "maxTokens"}


class RunSampling:
    """Answers one run's tools' sampling requests with its provider and model."""

    def __init__(
        self,
        *,
        run: Run,
        log: RunLog,
        progress: RunProgress,
        provider: Provider,
        provider_config: ProviderConfig,
        budget: Budget,
    ) -> None:
        self._run = run
        self._log = log
        self._progress = progress
        self._provider = provider
        self._config = provider_config
        self._budget = budget
        self._model_call = ModelCall(current().metrics, run.provider, run.model)

    async def sample(self, context: ToolContext, request: SamplingRequest) -> SamplingReply:
        """The model's answer to `request` (SamplingRefused: why there is none)."""
        model = self._run.model
        most = min(request.max_tokens, self._config.model_info(model).max_output_tokens)
        allowed = await self._budget.allowance(most)
        if isinstance(allowed, str):
            raise SamplingRefused(allowed)
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": allowed,
            "behest.provider": self._run.provider,
            "behest.model": model,
            "behest.tool": context.tool_name,
            "behest.call_id": context.call_id,
        }
        with span("behest.tool.sampling", attributes):
            text, usage, finish = await self._call(self._request(request, allowed))
        cost = self._progress.spend(usage, self._config.model_info(model).prices)
        await self._log.emit(
            ev.UsageRecorded(usage, cost),
            state=self._progress.state(RunStatus.WAITING_FOR_TOOLS),
        )
        return SamplingReply(text, model, _STOP_REASONS.get(finish, "endTurn"))

    def _request(self, request: SamplingRequest, max_tokens: int) -> ModelRequest:
        now = datetime.now(UTC)
        messages = [
            Message(
                id=str(uuid.uuid4()),
                session_id=self._run.session_id,
                run_id="",  # not the run's: the tool's conversation
                position=position,
                role=Role.USER if turn.role == "user" else Role.ASSISTANT,
                text=turn.text,
                created_at=now,
            )
            for position, turn in enumerate(request.turns)
        ]
        return ModelRequest(
            model=self._run.model,
            messages=messages,
            instructions=request.system_prompt,
            tool_choice="none",
            max_output_tokens=max_tokens,
            call_number=self._progress.model_calls,
            purpose="sampling",
            reasoning=self._run.reasoning,
        )

    async def _call(self, request: ModelRequest) -> tuple[str, TokenUsage, FinishReason]:
        """One model call, no output for the provider's timeout failing it."""
        parts: list[str] = []
        usage, finish = TokenUsage(), FinishReason.STOP
        idle = self._config.timeout_s
        loop = asyncio.get_running_loop()
        metrics, began = current().metrics, time.perf_counter()
        try:
            async with (
                asyncio.timeout(idle) as deadline,
                contextlib.aclosing(guarded_stream(self._provider, request)) as deltas,
            ):
                async for delta in deltas:
                    deadline.reschedule(loop.time() + idle)
                    if isinstance(delta, TextChunk):
                        parts.append(delta.text)
                    elif isinstance(delta, Finished):
                        usage, finish = delta.usage, delta.reason
        except BehestError as exc:  # a ProviderError, or a check such as an unknown model
            metrics.model_call(self._model_call, time.perf_counter() - began, ok=False)
            why = reason(exc) if isinstance(exc, ProviderError) else str(exc)
            raise SamplingRefused(f"the run's model failed: {why}") from None
        except TimeoutError:
            metrics.model_call(self._model_call, time.perf_counter() - began, ok=False)
            raise SamplingRefused(f"the run's model sent nothing for {idle:g} s") from None
        metrics.model_call(self._model_call, time.perf_counter() - began, ok=True)
        prompt = usage.input_tokens + usage.cached_input_tokens + usage.cache_write_tokens
        metrics.tokens(self._model_call, prompt, usage.output_tokens)
        return "".join(parts), usage, finish
