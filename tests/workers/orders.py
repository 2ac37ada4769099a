"""A worker as a user writes it (behest.worker), run as a real process by the tests with
`behest worker run tests.workers.orders:worker --address ADDR`. Each task's start is printed
on stdout ("started EXECUTION ATTEMPT KEY TOOL"), so a test knows when to kill it."""

from __future__ import annotations

import asyncio
import os

from behest.worker import TaskContext, Verified, Worker

worker = Worker("127.0.0.1:1", name=os.environ.get("ORDERS_WORKER_NAME", ""))


def _started(context: TaskContext) -> None:
    fields = (context.execution_id, context.attempt, context.idempotency_key, context.tool_name)
    print("started", *fields, flush=True)


@worker.tool(idempotent=True)
async def lookup_order(order_id: str, context: TaskContext, seconds: float = 0) -> str:
    """Look an order up by its id (at the first attempt, waits `seconds` first)."""
    _started(context)
    await asyncio.sleep(seconds if context.attempt == 1 else 0)
    return f"order {order_id}: shipped (attempt {context.attempt})"


@worker.tool()
async def place_order(item: str, context: TaskContext, seconds: float = 0) -> str:
    """Place an order for `item` (not idempotent; at the first attempt, waits `seconds`)."""
    _started(context)
    await asyncio.sleep(seconds if context.attempt == 1 else 0)
    return f"placed an order for {item}"


async def _reserved(item: str, context: TaskContext) -> Verified:
    """reserve's check: the backend (here, the key alone) says the reservation was made."""
    return Verified(ran=True, output=f"{item} reserved (key {context.idempotency_key[:8]})")


@worker.tool(verify=_reserved)
async def reserve(item: str, context: TaskContext, seconds: float = 0) -> str:
    """Reserve `item` (not idempotent; its check tells whether a reservation was made)."""
    _started(context)
    await asyncio.sleep(seconds if context.attempt == 1 else 0)
    return f"{item} reserved"


GUESTS = {
    "type": "object",
    "properties": {"guests": {"type": "integer", "minimum": 1, "maximum": 20}},
    "required": ["guests"],
}


@worker.tool(timeout_s=60)
async def book_table(city: str, context: TaskContext) -> str:
    """Book a table in `city`: the user is asked how many guests."""
    _started(context)
    action, content = await context.ask(f"How many guests in {city}?", GUESTS)
    if action != "accept" or content is None:
        return f"not booked: the user chose {action}"
    return f"booked a table for {content['guests']} in {city}"
