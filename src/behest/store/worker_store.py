"""The part of the Store protocol for workers (domain/workers.py): their connections, the
tasks they take, lease and complete, and the questions running tasks ask."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from behest.domain.workers import (
    QuestionRefused,
    ResultRefused,
    StoredQuestion,
    Task,
    TaskAnswer,
    TaskQuestion,
    TaskResult,
    TaskState,
    WorkerRecord,
)


class WorkerStore(Protocol):
    async def register_worker(self, worker: WorkerRecord, *, stale_before: datetime) -> int:
        """Store a worker's new connection in place of the same worker's earlier ones (its
        tenant and name) and over their leased tasks; drop workers not seen since
        `stale_before`. How many tasks it took over."""
        ...

    async def worker_heartbeat(
        self, worker_id: str, *, now: datetime, lease_until: datetime
    ) -> None:
        """The worker was seen now; its leased tasks' leases last until `lease_until`."""
        ...

    async def unregister_worker(self, worker_id: str) -> None:
        """The connection ended (its tasks keep their leases until they lapse)."""
        ...

    async def live_workers(self, *, tenant: str, since: datetime) -> list[WorkerRecord]:
        """The tenant's workers seen since `since`, on any replica."""
        ...

    async def claim_task(
        self, worker: WorkerRecord, tools: Sequence[str], *, now: datetime, lease_s: float
    ) -> Task | None:
        """Lease the oldest queued task of the worker's tenant for one of `tools`."""
        ...

    async def complete_task(
        self, worker_id: str, result: TaskResult, *, now: datetime
    ) -> ResultRefused | None:
        """Take the worker's result of a task it holds (None), or say why not."""
        ...

    async def give_up_task(self, execution_id: str, state: TaskState, why: str) -> bool:
        """End a task still in `state` (QUEUED: no worker took it in time; LEASED: its
        worker did not answer in time) as an error saying `why`; False if its state changed."""
        ...

    async def release_task(self, execution_id: str, *, worker_id: str) -> None:
        """A task leased to the worker but never sent to it: queued again."""
        ...

    async def rejoin_task(self, execution_id: str, *, lease_until: datetime) -> Task | None:
        """The task again, a leased one's lease given one more term (a run taken up again)."""
        ...

    async def worker_task(self, execution_id: str) -> Task | None: ...

    async def queued_tasks(self, tenant: str) -> int:
        """How many of the tenant's tasks wait for a worker now."""
        ...

    # --- the questions of running tasks ------------------------------------------------

    async def ask_task_question(
        self, worker_id: str, question: TaskQuestion, *, now: datetime
    ) -> StoredQuestion | QuestionRefused:
        """Store a question of a task the worker holds (its lease live), counted on the task;
        the same question again (its execution and number) is the one stored, answered or
        not. On PostgreSQL the replicas are told (the run's waits for the task)."""
        ...

    async def answer_task_question(self, answer: TaskAnswer, *, now: datetime) -> bool:
        """Store the answer to a task's question, once (False: it had one, or none such is
        stored). On PostgreSQL the replicas are told (the worker's sends it)."""
        ...

    async def task_questions(self, execution_id: str) -> list[StoredQuestion]:
        """The questions the task asked, by number."""
        ...

    async def task_question(self, execution_id: str, number: int) -> StoredQuestion | None: ...
