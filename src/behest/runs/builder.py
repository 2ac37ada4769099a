"""What a run's agent loop is made of: its provider, tools, limits and compaction."""

from __future__ import annotations

from collections.abc import Callable

from behest.domain.messages import Message
from behest.domain.runs import Run
from behest.domain.spend import TenantSpend
from behest.events.run_log import RunLog
from behest.providers.registry import ProviderRegistry
from behest.runs.agent_tools import agent_tools
from behest.runs.compaction_settings import CompactionSettings
from behest.runs.compactor import Compactor
from behest.runs.loop import AgentLoop
from behest.runs.loop_limits import LoopLimits
from behest.runs.sub_runs import SubRuns
from behest.runs.summariser import Summariser
from behest.runs.worker_hub import WorkerHub
from behest.runs.worker_tools import with_workers
from behest.store.base import Store
from behest.tools.registry import ToolRegistry
from behest.tools.server_tools import ServerTools


class LoopBuilder:
    """Builds the agent loop of a run that starts or resumes in this process."""

    def __init__(
        self,
        *,
        store: Store,
        providers: ProviderRegistry,
        tools: ServerTools,
        limits: LoopLimits,
        compaction_settings: CompactionSettings,
        spend_limits: Callable[[str], TenantSpend] | None = None,
        sub_runs: SubRuns | None = None,
        workers: WorkerHub | None = None,
    ) -> None:
        self._store = store
        self._providers = providers
        self._tools = tools
        self._limits = limits
        self._compaction_settings = compaction_settings
        self._spend_limits = spend_limits or (lambda tenant: TenantSpend())
        self._sub_runs = sub_runs
        self._workers = workers

    async def loop(self, run: Run, run_log: RunLog, transcript: list[Message] | None) -> AgentLoop:
        """The run's loop, with compaction as configured now (later updates: later runs).
        Raises InvalidArgument if the run's provider is no longer configured. A run of a
        stored agent is under its current agent (after handoffs), with its sub-agents and
        handoffs (runs/agent_tools.py)."""
        run, agents = await agent_tools(self._store, run)
        return AgentLoop(
            run=run,
            log=run_log,
            store=self._store,
            provider=self._providers.get(run.provider),
            provider_config=self._providers.config(run.provider),
            tools=await self._tools_of(run),
            limits=self._limits,
            compactor=await self._compactor(run, run_log),
            transcript=transcript,
            spend_limits=self._spend_limits(run.tenant),
            sub_runs=self._sub_runs,
            workers=self._workers,
            agents=agents,
        )

    async def _tools_of(self, run: Run) -> ToolRegistry:
        """The server's tools as they are now (the MCP servers whose tools it may use
        waited for while they start or restart: tools/server_tools.py), and those the run's
        tenant's live workers serve now."""
        tools = await self._tools.for_run(run.tools)
        if self._workers is None:
            return tools
        return with_workers(tools, await self._workers.workers(run.tenant))

    async def _compactor(self, run: Run, run_log: RunLog) -> Compactor:
        config = await self._compaction_settings.get(run.tenant)
        return Compactor(
            run=run,
            log=run_log,
            store=self._store,
            config=config,
            context_window=self._providers.model_info(run.provider, run.model).context_window,
            summarise=Summariser(self._providers, config, run),
            cooldown_s=self._limits.compaction_cooldown_s,
        )
