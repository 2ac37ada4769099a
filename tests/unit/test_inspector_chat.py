"""A session as a chat, without a server (web/chat.py, web/session_live.py): the notes of a
run that interrupted, rolled back or waited for another; turns, and which user messages were
steered; the chat items of the session's live stream; its cursors."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from behest.domain import events as ev
from behest.domain.messages import Message, Role
from behest.domain.runs import BusyPolicy, FinishReason
from behest.errors import InvalidArgument
from behest.web import chat, views
from behest.web.session_live import parse_cursor

T0 = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
A, B = "a" * 8 + "-0000-4000-8000-" + "0" * 12, "b" * 8 + "-0000-4000-8000-" + "0" * 12


def message(id: str, run_id: str, role: Role, text: str = "", position: int = 0) -> Message:
    return Message(
        id=id,
        session_id="s",
        run_id=run_id,
        position=position,
        role=role,
        text=text,
        created_at=T0,
    )


def started(**fields: object) -> ev.RunStarted:
    return ev.RunStarted(session_id="s", provider="local", model="script", **fields)  # type: ignore[arg-type]


def event(payload: ev.Payload, sequence: int = 1, run_id: str = B) -> ev.Event:
    return ev.Event(run_id=run_id, sequence=sequence, payload=payload, timestamp=T0)


def test_a_run_says_which_run_it_interrupted_rolled_back_or_waited_for() -> None:
    assert chat.notes(started()) == []
    interrupted = chat.notes(started(interrupted_run_id=A, on_busy=BusyPolicy.INTERRUPT))
    assert [(n.kind, n.words, n.run_id) for n in interrupted] == [("interrupted", "interrupted", A)]
    [rolled] = chat.notes(started(interrupted_run_id=A, on_busy=BusyPolicy.ROLLBACK))
    assert (rolled.kind, rolled.run_id) == ("rolled_back", A)
    assert "left the session's history" in rolled.after
    [waited] = chat.notes(started(waited_for_run_id=A, on_busy=BusyPolicy.ENQUEUE))
    assert (waited.kind, waited.words, waited.run_id) == ("waited_for", "waited for", A)


def test_turns_group_a_runs_messages_and_mark_the_steered_ones() -> None:
    messages = [
        message("m1", A, Role.USER, "hi"),
        message("m2", A, Role.ASSISTANT, "hello"),
        message("m3", B, Role.USER, "and?"),
        message("m4", B, Role.USER, "in French"),  # steered into B
        message("m5", B, Role.ASSISTANT, "bonjour"),
    ]
    turns = chat.turns(
        messages, runs={}, started={B: started(waited_for_run_id=A, on_busy=BusyPolicy.ENQUEUE)}
    )
    assert [(t.run_id, [(m.id, s) for m, s in t.messages]) for t in turns] == [
        (A, [("m1", False), ("m2", False)]),
        (B, [("m3", False), ("m4", True), ("m5", False)]),
    ]
    assert [n.kind for n in turns[1].notes] == ["waited_for"]
    # A page that begins in the middle of B: its first user message there was steered.
    later = chat.turns(messages[3:], runs={}, started={}, first_input="m3")
    assert [(m.id, s) for m, s in later[0].messages] == [("m4", True), ("m5", False)]


def test_the_live_stream_says_what_the_chat_shows_of_each_event() -> None:
    context = views.Context.of(
        [message("m3", B, Role.USER, "and?"), message("m5", B, Role.ASSISTANT, "ok")]
    )
    start = chat.item(event(started(interrupted_run_id=A, on_busy=BusyPolicy.ROLLBACK)), context)
    assert (start.shows, start.status, start.run, start.sequence) == ("run", "SESSION_LOADED", B, 1)
    assert start.message is not None and (start.message["id"], start.message["text"]) == (
        "m3",
        "and?",
    )
    assert start.as_json()["notes"][0]["kind"] == "rolled_back"
    text = chat.item(event(ev.TextDelta("o"), 2), context)
    assert (text.shows, text.delta) == ("text", "o")
    steered = chat.item(event(ev.UserMessageAdded("m4", "in French"), 3), context)
    assert steered.shows == "message" and steered.message is not None
    assert (steered.message["id"], steered.message["steered"], steered.message["role"]) == (
        "m4",
        True,
        "user",
    )
    answer = chat.item(event(ev.AssistantMessageCommitted("m5"), 4), context)
    assert answer.message is not None and answer.message["text"] == "ok"
    end = chat.item(event(ev.RunCompleted(FinishReason.STOP, 1), 5), context)
    assert (end.shows, end.status) == ("end", "COMPLETED")
    assert end.line.startswith("✓ completed")
    usage_like = chat.item(event(ev.ContextBuilt(3), 6), context)
    assert usage_like.shows == "" and usage_like.line  # sent (its id moves the cursor), not shown


def test_the_run_timeline_shows_steered_messages_and_what_a_run_did_to_the_one_before() -> None:
    context = views.Context()
    plain = views.item(event(started()), context)
    assert (plain.title, plain.link, plain.sections) == ("run started", "", [])
    for on_busy, how in (
        (BusyPolicy.INTERRUPT, "interrupted"),
        (BusyPolicy.ROLLBACK, "rolled back"),
    ):
        it = views.item(event(started(interrupted_run_id=A, on_busy=on_busy)), context)
        assert (it.title, it.link, it.sections) == (
            f"run started ({how} a run)",
            f"/runs/{A}",
            [(how, A)],
        )
    waited = views.item(event(started(waited_for_run_id=A, on_busy=BusyPolicy.ENQUEUE)), context)
    assert (waited.title, waited.link) == ("run started (waited for a run)", f"/runs/{A}")
    steered = views.item(event(ev.UserMessageAdded("m4", "in French"), 9), context)
    assert (steered.kind, steered.title, steered.summary) == (
        "text",
        "user message (steered in)",
        "+ user: in French",
    )
    assert steered.sections == [("text", "in French")]


def test_a_cursor_is_a_run_and_a_sequence() -> None:
    run_id = str(uuid.uuid4())
    assert parse_cursor("") == ("", 0)
    assert parse_cursor(f"{run_id}:7") == (run_id, 7)
    assert parse_cursor(f"{run_id.upper()}:7") == (run_id, 7)
    for bad in (
        "x",
        run_id,
        f"{run_id}:",
        f"{run_id}:0",
        f"{run_id}:-1",
        f"{run_id}:²",
        f"x:{run_id}",
        f"{run_id}:{'9' * 20}",
    ):
        with pytest.raises(InvalidArgument):
            parse_cursor(bad)
