"""A session as a chat (pure): its transcript as turns, one per run, and its events as the
chat items the session page's live stream sends.

A turn is a run's messages — its input, its answers and tool results, and the messages steered
into it while it ran (`user_message_added`) — under a header that names the run, its status,
and what it did to the runs around it: the run it interrupted or rolled back, the run it
waited for (RunStarted's `interrupted_run_id`, `on_busy`, `waited_for_run_id`). A session's
runs never interleave, so a run's messages are consecutive in the transcript.

Chat items are the live side of the same thing: one per event (so that the stream's ids are
every event's), saying what the page shows of it — a new turn, answer text as it streams, a
stored message, a line (a wait, a handoff), the run's end — and the run's status once it
changes. The page drops a message it already shows (the same id), so a page rendered a moment
after its stream's cursor shows nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from behest.domain import events as ev
from behest.domain.messages import Message, Role
from behest.domain.runs import BusyPolicy, Run, RunStatus
from behest.web import formats, views

# Events a turn shows as a line of their own (their words: wording.line).
_LINES = (
    ev.ApprovalRequested,
    ev.ClientToolRequested,
    ev.ElicitationRequested,
    ev.Handoff,
    ev.BudgetExceeded,
    ev.DoomLoopDetected,
    ev.OutputRejected,
    ev.SubRunStarted,
)


@dataclass(frozen=True, slots=True)
class Note:
    """What a run did to another run of its session: `{words} run <link>{after}`."""

    kind: str  # interrupted, rolled_back, waited_for
    words: str
    run_id: str
    after: str = ""


def notes(started: ev.RunStarted) -> list[Note]:
    """What the run's start says of the runs before it."""
    found = []
    interrupted = started.interrupted_run_id
    if interrupted and started.on_busy == BusyPolicy.ROLLBACK:
        after = ": its messages left the session's history"
        found.append(Note("rolled_back", "cancelled and rolled back", interrupted, after))
    elif interrupted:
        found.append(Note("interrupted", "interrupted", interrupted))
    if started.waited_for_run_id:
        found.append(Note("waited_for", "waited for", started.waited_for_run_id))
    return found


@dataclass(slots=True)
class Turn:
    """One run's part of the transcript: (message, steered) in order."""

    run_id: str
    status: RunStatus | None = None
    notes: list[Note] = field(default_factory=list)
    messages: list[tuple[Message, bool]] = field(default_factory=list)


def turns(
    messages: Iterable[Message],
    *,
    runs: Mapping[str, Run],
    started: Mapping[str, ev.RunStarted],
    first_input: str = "",
) -> list[Turn]:
    """The messages as turns. A run's user message after its first message was steered into
    it; `first_input`: the id of the first turn's run's first message, when the messages begin
    in the middle of that run ("": they begin with it)."""
    found: list[Turn] = []
    input_id = ""
    for message in messages:
        if not found or found[-1].run_id != message.run_id:
            run = runs.get(message.run_id)
            start = started.get(message.run_id)
            found.append(
                Turn(
                    message.run_id,
                    status=run.status if run is not None else None,
                    notes=notes(start) if start is not None else [],
                )
            )
            input_id = first_input if len(found) == 1 and first_input else message.id
        steered = message.role == Role.USER and message.id != input_id
        found[-1].messages.append((message, steered))
    return found


# --- the live stream ----------------------------------------------------------------------


@dataclass(slots=True)
class ChatItem:
    """What the page shows of one event of the session's stream."""

    run: str
    sequence: int
    name: str  # the event kind's stable name
    # run (a turn begins), text (answer text streams), message, line, end, or "" (nothing)
    shows: str = ""
    line: str = ""  # what the event says (wording.line)
    status: str = ""  # the run's status once this event happened, when it changes it
    error: bool = False
    delta: str | None = None
    message: dict[str, Any] | None = None
    notes: list[Note] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def item(event: ev.Event, context: views.Context) -> ChatItem:
    """The chat item of `event`; `context` holds the run's messages read so far."""
    shown = views.item(event, context)
    it = ChatItem(
        run=event.run_id,
        sequence=event.sequence,
        name=shown.name,
        line=shown.summary,
        status=shown.status,
        error=shown.error,
    )
    p = event.payload
    if isinstance(p, ev.RunStarted):
        it.shows, it.status, it.notes = "run", RunStatus.SESSION_LOADED.name, notes(p)
        first = next(iter(context.messages.values()), None)
        if first is not None and first.role == Role.USER:
            it.message = message_json(first, steered=False)
    elif isinstance(p, ev.TextDelta):
        it.shows, it.delta = "text", p.delta
    elif isinstance(p, ev.AssistantMessageCommitted | ev.ToolMessageCommitted):
        message = context.messages.get(p.message_id)
        if message is not None:
            it.shows, it.message = "message", message_json(message, steered=False)
    elif isinstance(p, ev.UserMessageAdded):
        it.shows = "message"
        it.message = {
            **_EMPTY,
            "id": p.message_id,
            "run": event.run_id,
            "role": Role.USER.value,
            "text": formats.clip(p.text),
            "time": formats.stamp(event.timestamp),
            "steered": True,
        }
    elif event.is_terminal:
        it.shows = "end"
    elif isinstance(p, _LINES):
        it.shows = "line"
    return it


_EMPTY: dict[str, Any] = {
    "tool_name": "",
    "tool_call_id": "",
    "is_error": False,
    "summary_through": None,
    "position": None,
    "calls": [],
}


def message_json(message: Message, *, steered: bool) -> dict[str, Any]:
    """A message as the page's script draws it (as text, like the template)."""
    return {
        "id": message.id,
        "run": message.run_id,
        "role": message.role.value,
        "text": formats.clip(message.text),
        "time": formats.stamp(message.created_at),
        "position": message.position,
        "tool_name": message.tool_name,
        "tool_call_id": message.tool_call_id,
        "is_error": message.is_error,
        "summary_through": message.summary_through,
        "calls": [
            {"id": c.id, "name": c.name, "arguments": formats.clip(c.arguments)}
            for c in message.tool_calls
        ],
        "steered": steered,
    }
