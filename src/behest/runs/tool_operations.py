"""The Operations of tools that run elsewhere: the tools a tenant's runs may use (its
workers' beside the server's), workers' connections, and tool executions (their records and
reconciliation). Mixed into runs/operations.py Operations."""

from __future__ import annotations

from datetime import UTC, datetime

from behest.domain.callers import Caller
from behest.domain.catalog import ToolInfo
from behest.domain.executions import ToolExecution
from behest.domain.runs import Run
from behest.domain.waits import Answer, Submitted
from behest.domain.workers import WorkerHello
from behest.errors import FailedPrecondition, NotFound, PermissionDenied, quote
from behest.runs import catalog
from behest.runs.executor import Executor
from behest.runs.worker_hub import WorkerHub
from behest.runs.worker_session import WorkerSession
from behest.runs.worker_tools import with_workers
from behest.store.base import Store
from behest.tools.registry import ToolRegistry
from behest.tools.server_tools import ServerTools


class ToolOperations:
    """Set by Operations' constructor."""

    _store: Store
    _executor: Executor
    _tools: ServerTools
    _workers: WorkerHub | None
    _worker_role: str
    _reconciler_role: str

    async def get(self, caller: Caller, run_id: str) -> Run:
        raise NotImplementedError  # Operations.get: the caller's tenant's run, or NotFound

    # --- tool executions ----------------------------------------------------------------

    async def tool_executions(self, caller: Caller, run_id: str) -> list[ToolExecution]:
        await self.get(caller, run_id)
        return await self._store.tool_executions(run_id)

    async def tool_execution(self, caller: Caller, execution_id: str) -> ToolExecution:
        found = await self._store.tool_execution(execution_id)
        if found is None or found.tenant != caller.tenant:
            raise NotFound(f"tool execution {quote(execution_id)} not found")
        return found

    async def reconcile(
        self, caller: Caller, execution_id: str, answer: Answer
    ) -> tuple[ToolExecution, Submitted]:
        """Say how an execution whose outcome is unknown ended (the reconciler role, when
        one is configured); once nothing else waits, its run goes on."""
        execution = await self.tool_execution(caller, execution_id)
        role = self._reconciler_role
        if role and role not in caller.roles:
            raise PermissionDenied(
                f"reconciling tool executions needs the role {role!r}, which "
                f"{caller.principal!r} lacks"
            )
        done, submitted = await self._store.reconcile_execution(
            execution_id, answer, by=caller.principal, now=datetime.now(UTC)
        )
        if not submitted.waiting_call_ids:
            await self._executor.wake(execution.run_id)
        return done, submitted

    async def tools(self, caller: Caller) -> list[ToolInfo]:
        """The tools the caller's runs may use: the server's and its tenant's workers'."""
        return catalog.tools(await self._tools_of(caller.tenant))

    async def _tools_of(self, tenant: str) -> ToolRegistry:
        """The server's tools now (MCP servers' as they are: tools/server_tools.py) and the
        tenant's workers'."""
        tools = self._tools.now()
        if self._workers is None:
            return tools
        return with_workers(tools, await self._workers.workers(tenant))

    async def connect_worker(self, caller: Caller, hello: WorkerHello) -> WorkerSession:
        """A worker's connection, registered (the worker role, when one is configured)."""
        role = self._worker_role
        if role and role not in caller.roles:
            raise PermissionDenied(
                f"serving tools as a worker needs the role {role!r}, which "
                f"{caller.principal!r} lacks"
            )
        if self._workers is None:
            raise FailedPrecondition("this server takes no workers")
        worker = await self._workers.connect(
            tenant=caller.tenant, name=hello.name, tools=hello.tools, max_tasks=hello.max_tasks
        )
        return WorkerSession(self._workers, worker)

    @property
    def worker_heartbeat_s(self) -> float:
        return self._workers.settings.heartbeat_s if self._workers is not None else 0.0

    async def know_workers(self, caller: Caller) -> None:
        """Look up the caller's tenant's workers (at most once a poll), for tool_names."""
        if self._workers is not None:
            await self._workers.workers(caller.tenant)
