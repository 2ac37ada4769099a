"""The agent loop of one run, as explicit RunStatus states, talking only to ports.

Each state boundary is one step of the event log: its events, the run's status and the
snapshot commit together. Terminal events are the executor's job, not the loop's. Assembling
a model call's deltas is runs/turn.py's, running a turn's tool calls runs/tool_calls.py's,
retrying a model call providers/retry.py's; what the run has done is in runs/progress.py.
"""

from __future__ import annotations

import json

from behest.domain import events as ev
from behest.domain.agents import AgentVersion
from behest.domain.messages import Message, Role, ToolCall
from behest.domain.runs import Run, RunStatus
from behest.domain.snapshots import Snapshot
from behest.domain.spend import FailureCode, TenantSpend
from behest.errors import RunStopped
from behest.events.run_log import RunLog
from behest.providers.base import Provider
from behest.providers.config import ProviderConfig
from behest.runs import compaction, structured
from behest.runs.agent_tools import AgentTools, HandedOff
from behest.runs.asking import Asking
from behest.runs.budget import Budget
from behest.runs.compactor import Compactor
from behest.runs.doom_loop import DoomLoopDetector
from behest.runs.executions import RunExecutions
from behest.runs.loop_limits import LoopLimits, Outcome
from behest.runs.model_attempts import ModelAttempts
from behest.runs.model_calls import ModelCalls
from behest.runs.progress import RunProgress
from behest.runs.start import run_started, user_message
from behest.runs.steering import Steering
from behest.runs.sub_runs import SubRuns
from behest.runs.tool_calls import ToolRunner, offered
from behest.runs.tool_side import ToolSide
from behest.runs.turn import Turn
from behest.runs.turn_calls import TurnCalls
from behest.runs.waiting import Waiting, Waits
from behest.runs.worker_calls import WorkerCalls
from behest.runs.worker_hub import WorkerHub
from behest.store.base import Store
from behest.store.writes import AppendMessage, SetRunOutput
from behest.tools.base import ToolResult
from behest.tools.registry import ToolRegistry


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
        spend_limits: TenantSpend | None = None,
        sub_runs: SubRuns | None = None,
        workers: WorkerHub | None = None,
        agents: AgentTools | None = None,
    ) -> None:
        """`transcript`: the session's messages, when the caller knows them (a new session);
        `workers`: this process's side of worker tools (runs/worker_hub.py); `agents`: the
        sub-agents and handoffs of the stored agent the run is under (runs/agent_tools.py)."""
        self._run = run
        self._log = log
        self._store = store
        self.progress = RunProgress(run, transcript)
        self._prices = provider_config.model_info(run.model).prices
        self._max_iterations = run.max_iterations or limits.max_iterations
        self._children = sub_runs if sub_runs is not None and sub_runs.may_start(run) else None
        self._sub_runs = sub_runs if self._children and run.allow_sub_agents else None
        self._agents = agents
        self._tools = tools = self._with_agents(tools)
        more = agents.offered if agents else ()
        self._offered = offered(run, tools, sub_agents=self._sub_runs is not None, more=more)
        self._waits = Waits(
            run=run, log=log, store=store, tools=tools, policy=limits.waits, progress=self.progress
        )
        self._executions = RunExecutions(run=run, store=store, tools=tools, node=limits.node)
        self._budget = Budget.of_run(
            run, spend_limits or TenantSpend(), self._prices, self.progress, log, store
        )
        self._asking, self._side = self._tool_side(provider, provider_config, limits)
        self._calls = self._turn_calls(limits, workers)
        self._doom_loop = DoomLoopDetector()
        self._steering = Steering(run=run, log=log, store=store, progress=self.progress)
        self._model = self._model_calls(provider, provider_config, limits, compactor)

    def _tool_side(
        self, provider: Provider, provider_config: ProviderConfig, limits: LoopLimits
    ) -> tuple[Asking, ToolSide]:
        """What the run does for its running tools: their questions (runs/asking.py), their
        progress and their requests for the run's model (runs/tool_side.py)."""
        run, log = self._run, self._log
        asking = Asking(
            run=run,
            log=log,
            store=self._store,
            progress=self.progress,
            notifier=log.notifier,
            policy=limits.asks,
        )
        side = ToolSide.of_run(
            asking,
            run=run,
            log=log,
            progress=self.progress,
            provider=provider,
            provider_config=provider_config,
            budget=self._budget,
        )
        return asking, side

    def _model_calls(
        self,
        provider: Provider,
        provider_config: ProviderConfig,
        limits: LoopLimits,
        compactor: Compactor | None,
    ) -> ModelCalls:
        """The run's model calls: attempts (runs/model_attempts.py) and their retries and
        compaction (runs/model_calls.py)."""
        attempts = ModelAttempts(
            run=self._run,
            log=self._log,
            progress=self.progress,
            provider=provider,
            provider_config=provider_config,
            budget=self._budget,
            tools=self._tools,
            offered=self._offered,
            waits=self._waits,
            coalesce_text=limits.coalesce_text_deltas,
        )
        return ModelCalls(
            attempts=attempts,
            retry=provider_config.retry,
            compactor=compactor,
            progress=self.progress,
            log=self._log,
            budget=self._budget,
        )

    def _with_agents(self, tools: ToolRegistry) -> ToolRegistry:
        """The run's tools and its agent's sub-agents and handoffs (runs/agent_tools.py)."""
        if self._agents is None:
            return tools
        self.progress.child_tools |= self._agents.sub_agents()
        return self._agents.registry(tools, self._spawn if self._children else None)

    def _turn_calls(self, limits: LoopLimits, workers: WorkerHub | None) -> TurnCalls:
        """How the run's tool calls run (runs/tool_calls.py, turn_calls.py)."""
        run, tools, executions = self._run, self._tools, self._executions
        worker_calls = None
        if workers is not None:
            worker_calls = WorkerCalls(run=run, hub=workers, asking=self._asking)
        runner = ToolRunner(
            log=self._log,
            executions=executions,
            tools=tools,
            offered=self._offered,
            progress=self.progress,
            concurrency=limits.tool_concurrency,
            spawn=self._spawn if self._sub_runs is not None else None,
            workers=worker_calls,
            side=self._side,
        )
        waits = self._waits
        return TurnCalls(
            run=run, tools=tools, runner=runner, waits=waits, executions=executions, hub=workers
        )

    async def run(self, snapshot: Snapshot | None = None) -> Outcome | Waiting | HandedOff:
        """Run to the final answer, or until the run waits for answers from outside; with a
        snapshot, go on from where an interrupted or waiting run was."""
        progress = self.progress
        if snapshot is None:
            await self._start()
        else:
            stopped = await self._resume(snapshot)
            if stopped is not None:
                return stopped
        while True:
            if progress.iteration >= self._max_iterations:
                raise RunStopped(
                    structured.out_of_iterations(
                        progress.mine(), self._run.response_format, self._max_iterations
                    ),
                    FailureCode.MAX_ITERATIONS,
                )
            progress.iteration += 1
            await self._steering.take()  # messages sent to the session meanwhile
            await self._model.compact()
            await self._log.emit(
                ev.ContextBuilt(len(compaction.context(progress.transcript))),
                state=progress.state(RunStatus.BUILDING_CONTEXT),
            )
            turn = await self._model.call()
            await self._persist(turn)
            await self._budget.after_usage()
            if not turn.calls:
                outcome = await self._final(turn.text)
                if outcome is not None:
                    return outcome
                continue  # a repair of the answer: the next iteration
            await self._budget.before_tools()
            await self._doom_loop.check(turn.calls, self._log)
            waiting = await self._waits.hold(turn.calls, self._offered)
            if waiting is not None:
                return waiting
            waiting = await self._calls.run(turn.calls, await self._waits.results(turn.calls))
            if waiting is not None:
                return waiting
            handed = await self._handed_off(turn.calls)
            if handed is not None:
                return handed

    async def _start(self) -> None:
        """Start a run created without its first step (CreateRun normally commits it)."""
        await self.progress.load(self._store)
        user = user_message(self._run, self.progress.next_position)
        self.progress.next_position += 1
        await self._log.emit(
            run_started(self._run),
            state=[AppendMessage(user), *self.progress.state(RunStatus.SESSION_LOADED)],
        )
        self.progress.remember(user)

    async def _resume(self, snapshot: Snapshot) -> Outcome | Waiting | HandedOff | None:
        """Pick up after a crash, a shutdown or a wait: repeat an interrupted model call,
        finish the tool calls of the last answer (re-running one that was executing only if
        idempotent; holding those that wait for an answer, until it came).
        """
        progress = self.progress
        await progress.load(self._store)
        progress.restore(snapshot)
        await self._executions.load()
        if self._sub_runs is not None:
            spent = await self._sub_runs.spent_by_children(self._run)
            progress.children_tokens, progress.children_cost = spent
        mine = progress.mine()
        for message in mine:
            for call in message.tool_calls:
                self._doom_loop.observe(call)
        match snapshot.status:
            case RunStatus.BUILDING_CONTEXT | RunStatus.CALLING_MODEL:
                progress.iteration -= 1  # the iteration is done again, its model call repeated
                return None
            case RunStatus.PERSISTING | RunStatus.WAITING_FOR_TOOLS | RunStatus.WAITING_FOR_INPUT:
                pass
            case _:
                return None
        answer = next(m for m in reversed(mine) if m.role == Role.ASSISTANT)
        if not answer.tool_calls:
            return await self._final(answer.text)
        calls = list(answer.tool_calls)
        waiting = None
        if snapshot.status == RunStatus.PERSISTING:  # stopped before its calls were held
            waiting = await self._waits.hold(calls, self._offered)
        elif snapshot.status == RunStatus.WAITING_FOR_INPUT:
            waiting = await self._waits.resolve(calls)
        if waiting is not None:
            return waiting
        return await self._finish_calls(calls, snapshot) or await self._handed_off(calls)

    async def _final(self, answer: str) -> Outcome | None:
        """The model answered without tool calls: how the run ends, unless the answer does not
        fit the run's response format and is to be repaired (None: the repair is asked)."""
        progress = self.progress
        if await self._steering.last_look():
            return None  # messages came: the model answers them first
        outcome = Outcome(progress.finish_reason, progress.iteration, progress.usage)
        response_format = self._run.response_format
        if response_format is None:
            return outcome
        checked = structured.check(answer, response_format)
        if checked.output is not None:
            # Durable before the run ends: RunCompleted never comes without its output.
            await (await self._log.emit(state=[SetRunOutput(self._run.id, checked.output)]))
            return outcome
        mine = progress.mine()
        if mine[-1].role == Role.USER:  # resumed after the repair was asked
            return None
        repairs = sum(1 for m in mine if m.role == Role.USER) - 1  # the first is the input
        if repairs >= structured.MAX_REPAIRS:
            await self._log.emit(ev.OutputRejected(checked.problem, repairing=False))
            raise RunStopped(
                structured.failure(response_format, checked.problem), FailureCode.INVALID_OUTPUT
            )
        repair = progress.message(
            Role.USER, structured.repair_prompt(response_format, checked.problem)
        )
        await self._log.emit(
            ev.OutputRejected(checked.problem, repairing=True), state=[AppendMessage(repair)]
        )
        progress.remember(repair)
        return None

    async def _finish_calls(self, calls: list[ToolCall], snapshot: Snapshot) -> Waiting | None:
        """Run the calls of the last answer that have no result yet (runs/turn_calls.py)."""
        answered = {m.tool_call_id for m in self.progress.mine() if m.role == Role.TOOL}
        pending = [c for c in calls if c.id not in answered]
        return await self._calls.finish(calls, pending, snapshot.pending_tool_calls)

    async def _persist(self, turn: Turn) -> None:
        """The model's answer becomes the session's next message, with its usage."""
        progress = self.progress
        blocks = json.dumps(turn.reasoning_blocks) if turn.reasoning_blocks else ""
        message = progress.message(
            Role.ASSISTANT, turn.text, tool_calls=tuple(turn.calls), reasoning_blocks=blocks
        )
        cost = progress.spend(turn.usage, self._prices)
        progress.tool_calls += len(turn.calls)
        progress.finish_reason = turn.finish_reason
        await self._log.emit(
            ev.AssistantMessageCommitted(message.id),
            ev.UsageRecorded(turn.usage, cost),
            state=[AppendMessage(message), *progress.state(RunStatus.PERSISTING)],
        )
        progress.remember(message)

    # --- model calls ------------------------------------------------------------------

    async def _handed_off(self, calls: list[ToolCall]) -> HandedOff | None:
        """The run goes on under another agent if the turn handed it over."""
        agents = self._agents
        return None if agents is None else await agents.handoff(calls, self.progress, self._log)

    async def _spawn(self, call: ToolCall, agent: AgentVersion | None = None) -> ToolResult:
        """A `spawn_agent` call, or a sub-agent's (`agent`): a child run, waited for; its
        spend counts against ours."""
        assert self._children is not None
        started, left = self.progress.spawn_number(call.id), self._budget.left()
        result, child = await self._children.run_child(
            self._run, call, self._log, started=started, left=left, agent=agent
        )
        if child is not None:
            self.progress.count_child(child)
        return result
