"""Which part of a behest run one AG-UI run is (doors/agui_stream.py): a run's first from its
start, a continuation from the pause it answers, the end at the next pause, the events sent
after Last-Event-ID, and the SSE ids: the last SSE event of behest event N carries `id: N`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ag_ui.core import MessagesSnapshotEvent

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest.doors.agui_events import Translator
from behest.doors.agui_stream import Follow, Segment

RUN = "run-1"


def event(sequence: int, **payload: Any) -> pb.AgentEvent:
    return pb.AgentEvent(sequence=sequence, run_id=RUN, **payload)


def approval(sequence: int, call_id: str) -> pb.AgentEvent:
    asked = pb.ApprovalRequestedEvent(call=c.ToolCall(id=call_id, name="calculator"))
    return event(sequence, approval_requested=asked)


def resolved(sequence: int, call_id: str) -> pb.AgentEvent:
    return event(sequence, approval_resolved=pb.ApprovalResolvedEvent(call_id=call_id))


def model(sequence: int, iteration: int) -> pb.AgentEvent:
    return event(sequence, model_started=pb.ModelStartedEvent(iteration=iteration))


def text(sequence: int, delta: str) -> pb.AgentEvent:
    return event(sequence, text_delta=pb.TextDeltaEvent(delta=delta))


def committed(sequence: int) -> pb.AgentEvent:
    return event(sequence, assistant_message_committed=pb.AssistantMessageCommittedEvent())


# A run that asks for an approval of call_1 at 5, goes on, and completes at 10.
PAUSED_ONCE = [
    event(1, run_started=pb.RunStartedEvent(session_id="s")),
    model(2, 1),
    text(3, "asking"),
    committed(4),
    approval(5, "call_1"),
    resolved(6, "call_1"),
    model(7, 2),
    text(8, "done"),
    committed(9),
    event(10, run_completed=pb.RunCompletedEvent()),
]


class FakeHistory:
    def __init__(self) -> None:
        self.snapshots = 0

    async def find(self, message_id: str) -> Any:
        return None

    async def snapshot(self, kept: Sequence[Any]) -> MessagesSnapshotEvent:
        self.snapshots += 1
        return MessagesSnapshotEvent(messages=[])


async def sent(
    events: list[pb.AgentEvent], segment: Segment, waiting_now: frozenset[str] = frozenset()
) -> list[tuple[str | None, dict[str, Any]]]:
    """The (id, event) pairs the follow sends, and nothing once it is done."""

    async def waiting() -> frozenset[str]:
        return waiting_now

    async def stream() -> AsyncIterator[pb.AgentEvent]:
        for e in events:
            yield e

    follow = Follow(
        Translator(thread_id="t", run_id=segment.run_id),
        segment,
        history=FakeHistory(),  # type: ignore[arg-type]
        kept=[],
        waiting_now=waiting,
    )
    out = []
    async for frames in follow.frames(stream()):
        for frame in frames:
            lines = frame.decode().strip().split("\n")
            found = next((line[4:] for line in lines if line.startswith("id: ")), None)
            data = next(line[6:] for line in lines if line.startswith("data: "))
            out.append((found, json.loads(data)))
    return out


def kinds(frames: list[tuple[str | None, dict[str, Any]]]) -> list[str]:
    return [f"{data['type']}@{id_}" if id_ else data["type"] for id_, data in frames]


async def test_a_runs_first_ag_ui_run_ends_at_its_pause_with_ids_on_the_last_of_each() -> None:
    frames = await sent(PAUSED_ONCE, Segment("agui-1"), waiting_now=frozenset({"call_1"}))
    assert kinds(frames) == [
        "RUN_STARTED@1",
        "STEP_STARTED@2",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT@3",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED@4",
        "RUN_FINISHED@5",
    ]
    assert frames[-1][1]["outcome"]["type"] == "interrupt"


async def test_the_continuation_starts_after_the_pause_it_answers() -> None:
    frames = await sent(PAUSED_ONCE, Segment("agui-2", answered=frozenset({"call_1"})))
    assert kinds(frames) == [
        "RUN_STARTED@5",
        "CUSTOM@6",
        "STEP_STARTED@7",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT@8",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED@9",
        "RUN_FINISHED@10",
    ]
    assert frames[0][1]["runId"] == frames[-1][1]["runId"] == "agui-2"


async def test_last_event_id_sends_only_what_follows_it() -> None:
    whole = await sent(PAUSED_ONCE, Segment("agui-2", answered=frozenset({"call_1"})))
    for after in (5, 7, 8, 9):
        rest = await sent(PAUSED_ONCE, Segment("agui-2", frozenset({"call_1"}), after=after))
        kept = [f for f in whole[: next(i for i, f in enumerate(whole) if f[0] == str(after)) + 1]]
        assert kept + rest == whole
    assert await sent(PAUSED_ONCE, Segment("agui-2", frozenset({"call_1"}), after=10)) == []


async def test_answers_that_leave_calls_waiting_end_the_continuation_at_once() -> None:
    asked_twice = [*PAUSED_ONCE[:5], approval(6, "call_2")]
    segment = Segment("agui-2", answered=frozenset({"call_1"}), waiting=frozenset({"call_2"}))
    frames = await sent(asked_twice, segment)
    assert kinds(frames) == ["RUN_STARTED", "RUN_FINISHED@6"]
    [interrupt] = frames[-1][1]["outcome"]["interrupts"]
    assert interrupt["id"] == "call_2"


async def test_a_pause_someone_else_answered_does_not_end_the_ag_ui_run() -> None:
    frames = await sent(PAUSED_ONCE, Segment("agui-1"), waiting_now=frozenset())
    assert [data["type"] for _, data in frames][-1] == "RUN_FINISHED"
    assert kinds(frames)[6:8] == ["CUSTOM@6", "STEP_STARTED@7"]


async def test_a_repeated_model_call_puts_a_snapshot_before_the_end() -> None:
    retried = [*PAUSED_ONCE[:3], model(4, 1), text(5, "again"), committed(6)]
    retried.append(event(7, run_completed=pb.RunCompletedEvent()))
    frames = await sent(retried, Segment("agui-1"))
    assert kinds(frames)[-2:] == ["MESSAGES_SNAPSHOT", "RUN_FINISHED@7"]
