"""The one model call of a compaction: summarise messages with the configured provider."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from behest.domain.compaction import CompactionConfig
from behest.domain.messages import Message, Role
from behest.domain.runs import Run
from behest.domain.spend import Money, TokenUsage
from behest.observability.telemetry import span
from behest.providers.base import Finished, ModelRequest, TextChunk
from behest.providers.guard import guarded_stream
from behest.providers.registry import ProviderRegistry
from behest.runs.compaction import SUMMARY_INSTRUCTIONS, render


@dataclass(frozen=True, slots=True)
class Summary:
    """A summary call's text and what it spent (a cost only when its model has prices)."""

    text: str
    usage: TokenUsage
    cost: Money | None


class Summariser:
    """Summarises a run's old messages on the compaction provider/model (default: the run's)."""

    def __init__(self, providers: ProviderRegistry, config: CompactionConfig, run: Run) -> None:
        self._providers = providers
        self._provider = config.provider or run.provider
        self._model = config.model or run.model
        self._run = run

    async def __call__(self, messages: Sequence[Message]) -> Summary:
        """The summary; raises ProviderError (or TimeoutError) when the call fails."""
        provider = self._providers.get(self._provider)
        config = self._providers.config(self._provider)
        prompt = Message(
            id=str(uuid.uuid4()),
            session_id=self._run.session_id,
            run_id=self._run.id,
            position=0,
            role=Role.USER,
            text=render(messages),
            created_at=datetime.now(UTC),
        )
        request = ModelRequest(
            model=self._model,
            messages=[prompt],
            instructions=SUMMARY_INSTRUCTIONS,
            tool_choice="none",
            max_output_tokens=config.model_info(self._model).max_output_tokens,
            purpose="summary",
        )
        parts: list[str] = []
        usage = TokenUsage()
        with span(
            "behest.compaction.summary",
            {"behest.provider": self._provider, "behest.model": self._model},
        ):
            async with (
                asyncio.timeout(config.timeout_s),
                contextlib.aclosing(guarded_stream(provider, request)) as deltas,
            ):
                async for delta in deltas:
                    if isinstance(delta, TextChunk):
                        parts.append(delta.text)
                    elif isinstance(delta, Finished):
                        usage = delta.usage
        prices = config.model_info(self._model).prices
        cost = None if prices is None else usage.cost(prices)
        return Summary("".join(parts).strip(), usage, cost)
