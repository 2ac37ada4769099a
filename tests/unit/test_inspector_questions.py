"""A question as the inspector's form, without a server (web/questions.py): fields from a flat
schema, JSON for any other, the content made from what the form sent (checked by the server,
not here), what was sent shown again; the timeline's items of a question (web/views.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from behest.domain import events as ev
from behest.domain.waits import Answer, ElicitAction, PendingCall, Question, WaitKind
from behest.errors import InvalidArgument
from behest.runs.asking import check_answers
from behest.web import chat, questions, views

T0 = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
# The echo MCP server's question (tests/mcp_servers/echo_server.py, pydantic's schema).
STAY = {
    "type": "object",
    "properties": {
        "nights": {
            "description": "How many nights",
            "maximum": 30,
            "minimum": 1,
            "title": "Nights",
            "type": "integer",
        },
        "breakfast": {
            "default": False,
            "description": "With breakfast",
            "title": "Breakfast",
            "type": "boolean",
        },
    },
    "required": ["nights"],
}
ROOM = {
    "type": "object",
    "properties": {
        "view": {"type": "string", "enum": ["sea", "city"], "enumNames": ["Sea", "City"]},
        "floor": {"type": "string", "oneOf": [{"const": "low", "title": "Low"}, {"const": "high"}]},
        "name": {"type": "string", "minLength": 2, "maxLength": 40, "default": "Ana"},
        "budget": {"type": "number", "minimum": 0},
    },
}


def call(schema: dict[str, Any], call_id: str = "call_1~1-abc") -> PendingCall:
    return PendingCall(
        run_id="r",
        call_id=call_id,
        session_id="s",
        tenant="acme",
        kind=WaitKind.ELICITATION,
        tool_name="echo__book",
        arguments="",
        ordinal=0,
        requested_at=T0,
        expires_at=T0,
        question=Question(call_id="call_1", message="How many nights?", schema=schema),
    )


def content(schema: dict[str, Any], form: dict[str, str]) -> dict[str, Any]:
    question = call(schema).question
    assert question is not None
    return dict(json.loads(questions.content_of(question, form)))


def test_a_flat_schema_is_a_field_per_property_with_its_hints_and_defaults() -> None:
    form = questions.form_for(call(STAY))
    assert form.json is None
    nights, breakfast = form.fields
    assert (nights.name, nights.label, nights.input, nights.value) == (
        "field.nights",
        "Nights",
        "number",
        "",
    )
    assert nights.hint == "How many nights · a whole number · 1 to 30 · required"
    assert (breakfast.input, breakfast.value, breakfast.hint) == ("checkbox", "", "With breakfast")
    view, floor, name, budget = questions.form_for(call(ROOM)).fields
    assert (view.input, view.options) == ("select", (('"sea"', "Sea"), ('"city"', "City")))
    assert floor.options == (('"low"', "Low"), ('"high"', "high"))
    assert (name.input, name.value, name.hint) == ("text", "Ana", "2 to 40 characters")
    assert (budget.input, budget.hint) == ("number", "a number · at least 0")


def test_the_content_is_converted_by_type_and_the_schema_checks_the_rest() -> None:
    assert content(STAY, {"field.nights": "2", "field.breakfast": "on"}) == {
        "nights": 2,
        "breakfast": True,
    }
    assert content(STAY, {"field.nights": " 3 "}) == {"nights": 3, "breakfast": False}
    assert content(STAY, {"field.nights": ""}) == {"breakfast": False}  # left out: required
    assert content(STAY, {"field.nights": "2.5"}) == {"nights": 2.5, "breakfast": False}
    assert content(STAY, {"field.nights": "three"}) == {"nights": "three", "breakfast": False}
    assert content(STAY, {"field.nights": "nan"}) == {"nights": "nan", "breakfast": False}
    assert content(ROOM, {"field.view": '"city"', "field.floor": "", "field.budget": "1.5"}) == {
        "view": "city",
        "budget": 1.5,
    }
    pending = [call(STAY)]
    for bad in ({"field.nights": "99"}, {"field.nights": "three"}, {}):
        text = questions.content_of(pending[0].question, bad)  # type: ignore[arg-type]
        answer = Answer(call_id=pending[0].call_id, action=ElicitAction.ACCEPT, text=text)
        try:
            check_answers(pending, [answer])
        except InvalidArgument as exc:
            assert "does not match the question's schema" in str(exc)
        else:
            raise AssertionError(f"{bad} was not refused")


def test_any_other_schema_is_answered_as_json_from_a_skeleton() -> None:
    nested = {
        "type": "object",
        "properties": {
            "guests": {"type": "array", "items": {"type": "string"}},
            "nights": {"type": "integer", "default": 2},
            "note": {"type": ["string", "null"]},
        },
    }
    form = questions.form_for(call(nested))
    assert form.fields == ()
    assert json.loads(form.json or "") == {"guests": [], "nights": 2, "note": None}
    assert content(nested, {"content": '{"guests": ["Ana"]}'}) == {"guests": ["Ana"]}


def test_a_refused_answer_shows_what_was_sent_in_its_own_form_only() -> None:
    sent = questions.sent_values(
        {"csrf": "x", "call_id": "call_1~1-abc", "field.nights": "99", "field.breakfast": "on"}
    )
    assert sent == {"field.nights": "99", "field.breakfast": "on"}
    refused = questions.Refused("call_1~1-abc", "too many", sent)
    nights, breakfast = questions.form_for(call(STAY), refused).fields
    assert (nights.value, breakfast.value) == ("99", "on")
    other = questions.form_for(call(STAY, call_id="call_2~1-def"), refused)
    assert [f.value for f in other.fields] == ["", ""]


def event(payload: ev.Payload) -> ev.Event:
    return ev.Event(run_id="r", sequence=4, payload=payload, timestamp=T0)


def test_the_timeline_says_who_asked_what_and_how_it_was_answered() -> None:
    schema = json.dumps(STAY)
    asked = views.item(
        event(ev.ElicitationRequested("q-1", "call_1", "echo__book", "How many?", schema, T0)),
        views.Context(),
    )
    assert (asked.kind, asked.title, asked.status) == (
        "wait",
        "question asked",
        "WAITING_FOR_INPUT",
    )
    assert asked.summary.startswith("? echo__book asks: How many? (question q-1")
    assert ("question", "How many?") in asked.sections
    assert '"nights"' in dict(asked.sections)["the answer's schema"]

    def answered(**fields: Any) -> views.Item:
        payload = ev.ElicitationAnswered("q-1", "call_1", "echo__book", **fields)
        return views.item(event(payload), views.Context())

    accepted = answered(action=ElicitAction.ACCEPT, answered_by="alice")
    assert (accepted.title, accepted.error, accepted.resolves) == (
        "question answered",
        False,
        "q-1",
    )
    assert accepted.summary == "✓ echo__book's question answered by alice"
    timed_out = answered(action=ElicitAction.CANCEL, answered_by="", timed_out=True)
    assert (timed_out.title, timed_out.error) == ("question timed out", True)
    assert timed_out.summary == "✗ echo__book's question timed out: nobody answered"
    replayed = answered(action=ElicitAction.DECLINE, answered_by="bob", replayed=True)
    assert replayed.title == "question answered (replayed)"
    assert "declined by bob (the stored answer: the tool asked again)" in replayed.summary


def test_a_session_s_transcript_shows_a_question_as_a_line() -> None:
    payload = ev.ElicitationRequested("q-1", "call_1", "echo__book", "How many?", "{}", T0)
    shown = chat.item(event(payload), views.Context())
    assert (shown.shows, shown.status) == ("line", "WAITING_FOR_INPUT")
    assert shown.line.startswith("? echo__book asks: How many?")
