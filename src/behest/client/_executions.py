"""BehestClient's calls of ToolExecutionService: what ran for a run's tool calls, and the
reconciliation of an execution whose outcome is unknown; and RunService's stream tickets."""

from __future__ import annotations

from typing import Any

from behest.client import _wire
from behest.client._enums import Verdict
from behest.client._records import Reconciled, StreamTicket, ToolExecution


class ToolExecutions:
    """Mixed into BehestClient, whose `_unary` and `_s` (the stubs) these use."""

    @property
    def _s(self) -> _wire.Stubs:
        raise NotImplementedError

    async def _unary(self, method: Any, request: Any, *, retry: bool = True) -> Any:
        raise NotImplementedError

    async def list_tool_executions(self, run_id: str) -> list[ToolExecution]:
        """The run's tool executions in the order they started (without transitions)."""
        request = _wire.execution.ListToolExecutionsRequest(run_id=run_id)
        response = await self._unary(self._s.executions.ListToolExecutions, request)
        return [_wire.execution_of(e) for e in response.executions]

    async def get_tool_execution(self, execution_id: str) -> ToolExecution:
        """One execution with its transitions, oldest first."""
        request = _wire.execution.GetToolExecutionRequest(execution_id=execution_id)
        response = await self._unary(self._s.executions.GetToolExecution, request)
        return _wire.execution_of(response.execution)

    async def reconcile(
        self,
        execution_id: str,
        verdict: Verdict,
        *,
        output: str = "",
        is_error: bool = False,
        reason: str = "",
    ) -> Reconciled:
        """Say how an execution whose outcome is unknown ended: Verdict.RAN with its `output`
        (an error when `is_error`), DID_NOT_RUN (it runs again) or GIVE_UP (the model gets an
        error; `reason` says why). Retried: the same verdict again is harmless."""
        request = _wire.execution.ReconcileToolExecutionRequest(
            execution_id=execution_id,
            verdict=verdict.value,  # type: ignore[arg-type]
            output=output,
            is_error=is_error,
            reason=reason,
        )
        response = await self._unary(self._s.executions.ReconcileToolExecution, request)
        return _wire.reconciled_of(response)

    async def stream_ticket(self, run_id: str) -> StreamTicket:
        """A ticket for a browser's EventSource to follow this run over server-sent events
        (`?ticket=` on the HTTP listener) without the token in the URL; it expires soon
        (`stream_ticket_ttl_s`)."""
        request = _wire.run.CreateStreamTicketRequest(run_id=run_id)
        return _wire.ticket_of(await self._unary(self._s.runs.CreateStreamTicket, request))
