"""The transcript: messages in position order, tool calls and results intact (SEMANTICS §1)."""

from __future__ import annotations

import random
from dataclasses import replace

from behest.domain.messages import Role, ToolCall
from behest.store.sql.store import SqlStore
from behest.store.writes import AppendMessage
from tests.store.helpers import create, finish, message, request


async def test_session_messages_are_in_position_order(store: SqlStore) -> None:
    run = await create(store)
    written = [message(run, position, text=f"m{position}") for position in range(12)]
    shuffled = written[:]
    random.Random(3).shuffle(shuffled)

    await store.apply([AppendMessage(m) for m in shuffled])

    assert await store.session_messages(run.session_id) == written


async def test_session_messages_span_the_runs_of_the_session(store: SqlStore) -> None:
    first = await create(store)
    await store.apply([AppendMessage(message(first, 0)), AppendMessage(message(first, 1))])
    await finish(store, first.id)
    second = await create(store, request(session_id=first.session_id))
    await store.apply([AppendMessage(message(second, 2)), AppendMessage(message(second, 3))])
    other = await create(store)
    await store.apply([AppendMessage(message(other, 0))])

    transcript = await store.session_messages(first.session_id)

    assert [(m.run_id, m.position) for m in transcript] == [
        (first.id, 0),
        (first.id, 1),
        (second.id, 2),
        (second.id, 3),
    ]


async def test_run_messages_are_only_that_runs_in_position_order(store: SqlStore) -> None:
    first = await create(store)
    await store.apply([AppendMessage(message(first, 0)), AppendMessage(message(first, 1))])
    await finish(store, first.id)
    second = await create(store, request(session_id=first.session_id))
    mine = [message(second, 4), message(second, 2), message(second, 3)]
    await store.apply([AppendMessage(m) for m in mine])

    read = await store.run_messages(second.id)

    assert [m.position for m in read] == [2, 3, 4]
    assert {m.run_id for m in read} == {second.id}


async def test_messages_of_unknown_session_or_run_are_empty(store: SqlStore) -> None:
    run = await create(store)

    assert await store.session_messages(run.session_id) == []
    assert await store.run_messages(run.id) == []


async def test_assistant_tool_calls_and_tool_results_round_trip(store: SqlStore) -> None:
    run = await create(store)
    calls = (
        ToolCall("call_a", "read_file", '{"path": "/tmp/ä ✓", "lines": [1, 2]}'),
        ToolCall("call_b", "search", "{}"),
    )
    written = [
        message(run, 0, role=Role.USER, text="read it 🚀"),
        message(run, 1, role=Role.ASSISTANT, text="", tool_calls=calls),
        message(
            run, 2, role=Role.TOOL, text="contents", tool_call_id="call_a", tool_name="read_file"
        ),
        message(
            run,
            3,
            role=Role.TOOL,
            text="search crashed: ValueError",
            tool_call_id="call_b",
            tool_name="search",
            is_error=True,
        ),
        message(run, 4, role=Role.SYSTEM, text="Summary of earlier turns:\n…"),
    ]

    await store.apply([AppendMessage(m) for m in written])

    read = await store.run_messages(run.id)
    assert read == written
    assert read[1].tool_calls == calls
    assert (read[2].tool_call_id, read[2].tool_name, read[2].is_error) == (
        "call_a",
        "read_file",
        False,
    )
    assert read[3].is_error is True
    assert [m.role for m in read] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.TOOL, Role.SYSTEM]


async def test_an_assistant_messages_reasoning_blocks_are_kept_exactly(store: SqlStore) -> None:
    run = await create(store)
    blocks = '[{"type": "thinking", "thinking": "hmm ✓", "signature": "Eq+/sig=="}]'
    kept = replace(message(run, 0, role=Role.ASSISTANT, text="4"), reasoning_blocks=blocks)
    await store.apply([AppendMessage(kept), AppendMessage(message(run, 1))])

    read = await store.session_messages(run.session_id)

    assert [m.reasoning_blocks for m in read] == [blocks, ""]
    assert read[0] == kept
