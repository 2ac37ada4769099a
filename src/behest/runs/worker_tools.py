"""Worker tools as a run sees them: each tool the run's tenant's live workers declare, as a
Tool beside the server's own (ToolRegistry.with_tools, source "worker"). Calling one is not
done here: its execution queues a task (runs/worker_calls.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from behest.domain.workers import WorkerRecord, WorkerToolSpec
from behest.tools.base import ToolResult
from behest.tools.registry import WORKER, ToolRegistry


@dataclass(frozen=True, slots=True)
class WorkerTool:
    """A tool workers serve; `workers`: how many of them do now."""

    spec: WorkerToolSpec
    workers: int = 1

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def description(self) -> str:
        return self.spec.description

    @property
    def parameters_schema(self) -> dict[str, Any]:
        return self.spec.parameters_schema

    @property
    def timeout_s(self) -> float:
        # The registry's own bound of a call: waiting for a worker, then its run.
        return self.spec.schedule_timeout_s + self.spec.timeout_s

    @property
    def read_only(self) -> bool:
        return self.spec.read_only

    @property
    def concurrency_safe(self) -> bool:
        return self.spec.concurrency_safe

    @property
    def idempotent(self) -> bool:
        return self.spec.idempotent

    @property
    def requires_approval(self) -> bool:
        return self.spec.requires_approval

    async def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        raise RuntimeError(f"worker tool {self.name!r} runs as a task, not in this process")


def worker_tools(workers: Sequence[WorkerRecord]) -> list[WorkerTool]:
    """The tools `workers` serve, by name: the latest connection's declaration, and how many
    workers serve each."""
    latest: dict[str, WorkerToolSpec] = {}
    counts: dict[str, int] = {}
    for worker in sorted(workers, key=lambda w: w.connected_at):
        for spec in worker.tools:
            latest[spec.name] = spec
            counts[spec.name] = counts.get(spec.name, 0) + 1
    return [WorkerTool(spec, counts[name]) for name, spec in sorted(latest.items())]


def with_workers(tools: ToolRegistry, workers: Sequence[WorkerRecord]) -> ToolRegistry:
    """The registry a run uses: the server's tools and its tenant's workers' (none: as is)."""
    if not workers:
        return tools
    return tools.with_tools(worker_tools(workers), source=WORKER)
