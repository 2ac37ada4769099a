"""behest's worker SDK: tools that run where they live, served to behest's runs over
agent.v1.WorkerService (docs/WORKERS.md).

    from behest.worker import Worker

    worker = Worker("127.0.0.1:50051", token=os.environ.get("BEHEST_TOKEN"))

    @worker.tool(idempotent=True)
    async def lookup_order(order_id: str) -> str:
        \"\"\"Look an order up by its id.\"\"\"
        ...

    worker.run()  # blocks; SIGTERM finishes the tasks in hand, then stops

Everything public is imported from here; the modules behind it are private, and only
`_wire.py` speaks the wire.
"""

from behest.worker._context import (
    ElicitAction,
    Reply,
    RetryableError,
    TaskContext,
    Verified,
    WorkerError,
    current_task_context,
)
from behest.worker._tools import WorkerTool
from behest.worker._worker import Worker

__all__ = [
    "ElicitAction",
    "Reply",
    "RetryableError",
    "TaskContext",
    "Verified",
    "Worker",
    "WorkerError",
    "WorkerTool",
    "current_task_context",
]
