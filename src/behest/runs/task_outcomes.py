"""What a worker's task, as read from the store, means for the run that waits for it (runs/
worker_hub.py `outcome`): done (a result, or given up: no worker took it before its
schedule-to-start deadline, or its worker did not answer by its start-to-close deadline), its
worker lost (the lease lapsed), or nothing yet."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from behest.domain.workers import Task, TaskResult, TaskState, WorkerRecord
from behest.store.base import Store

# A task past its start-to-close deadline gets this long for its result to land.
DEADLINE_GRACE_S = 1.0
_GRACE = timedelta(seconds=DEADLINE_GRACE_S)


class Ending(enum.Enum):
    DONE = "done"  # the task has its result (or was given up: `expired`, `timed out`)
    LOST = "lost"  # its worker vanished: the lease lapsed


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    ending: Ending
    task: Task


async def look_at(
    store: Store, execution_id: str, asked: Callable[[Task], None] | None = None
) -> TaskOutcome | None:
    """The task's outcome, if it has one now (giving it up once past a deadline); `asked`
    is given a running task as read (its count of questions)."""
    task = await store.worker_task(execution_id)
    now = datetime.now(UTC)
    if task is None:
        raise LookupError(f"task of execution {execution_id} not found")
    if asked is not None and task.state == TaskState.LEASED:
        asked(task)
    if task.state == TaskState.DONE:
        return TaskOutcome(Ending.DONE, task)
    if task.state == TaskState.QUEUED and now >= task.schedule_deadline:
        why = "no worker serving it took the call in time"
        if await store.give_up_task(execution_id, TaskState.QUEUED, why):
            return TaskOutcome(Ending.DONE, replace(task, state=TaskState.DONE, expired=True))
    if task.state == TaskState.LEASED:
        if task.lease_until is not None and task.lease_until < now:
            return TaskOutcome(Ending.LOST, task)
        late = task.deadline is not None and now > task.deadline + _GRACE
        why = f"the worker did not answer within {task.timeout_s:g} s"
        if late and await store.give_up_task(execution_id, TaskState.LEASED, why):
            done = replace(task, state=TaskState.DONE, is_error=True, output=why)
            return TaskOutcome(Ending.DONE, done)
    return None


def done(task: Task, worker: WorkerRecord, result: TaskResult) -> Task:
    """`task` as the store now holds it, with `worker`'s `result` taken."""
    return replace(
        task,
        state=TaskState.DONE,
        worker_id=worker.id,
        worker_name=worker.name,
        output=result.output,
        is_error=result.is_error,
        retryable=result.retryable,
    )
