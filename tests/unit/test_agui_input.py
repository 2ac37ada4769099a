"""Reading a RunAgentInput (doors/agui_input.py): what is new in it, how its history compares
with the session's, and the agent.v1 requests (as proto JSON) that carry it."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from ag_ui.core import RunAgentInput

from behest.doors.agui_input import (
    Turn,
    approvals,
    check_prior,
    plan_of,
    read_input,
    run_request,
    tool_results,
)
from behest.errors import FailedPrecondition, InvalidArgument

THREAD = str(uuid.uuid4())


def given(*messages: dict[str, Any], **fields: Any) -> RunAgentInput:
    return RunAgentInput.model_validate(
        {"threadId": THREAD, "runId": "r-1", "messages": list(messages), **fields}
    )


def user(text: Any, id: str = "u") -> dict[str, Any]:
    return {"id": id, "role": "user", "content": text}


def assistant(text: str = "", *calls: str) -> dict[str, Any]:
    tool_calls = [
        {"id": c, "type": "function", "function": {"name": "f", "arguments": "{}"}} for c in calls
    ]
    return {"id": "a", "role": "assistant", "content": text, "toolCalls": tool_calls}


def tool(call: str, text: str = "out", **fields: Any) -> dict[str, Any]:
    return {"id": f"t-{call}", "role": "tool", "toolCallId": call, "content": text, **fields}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{", "the body is not valid JSON"),
        (b'"text"', "must be a JSON object"),
        (b'{"threadId": "t", "runId": "r"}', "not a valid RunAgentInput: messages: Field required"),
        (
            json.dumps({"threadId": "t-1", "runId": "r", "messages": []}).encode(),
            "threadId must be a UUID",
        ),
        (
            json.dumps({"threadId": THREAD, "runId": " ", "messages": []}).encode(),
            "runId is required",
        ),
    ],
)
def test_read_input_refuses_what_is_not_a_run_agent_input(body: bytes, says: str) -> None:
    with pytest.raises(InvalidArgument, match=says):
        read_input(body)


def test_a_new_user_message_starts_a_run_after_the_conversation_before_it() -> None:
    found = given(
        {"id": "s", "role": "system", "content": "be brief"},
        user("hi", "u1"),
        {"id": "r", "role": "reasoning", "content": "thinking"},
        assistant("hello"),
        user([{"type": "text", "text": "and"}, {"type": "text", "text": "now?"}], "u2"),
    )
    plan = plan_of(found)
    assert plan.user is not None and plan.user.id == "u2"
    assert plan.prior == (Turn("user", "hi"), Turn("assistant", "hello"))
    assert plan.turns[-1] == Turn("user", "and\nnow?")
    assert not plan.results and not plan.resume


def test_trailing_tool_messages_answer_calls() -> None:
    plan = plan_of(given(user("hi"), assistant("", "c1", "c2"), tool("c1"), tool("c2")))
    assert plan.user is None
    assert [m.tool_call_id for m in plan.results] == ["c1", "c2"]
    assert plan.prior == (Turn("user", "hi"), Turn("assistant", "", ("c1", "c2")))
    assert plan.answered == {"c1", "c2"}


def test_resume_entries_alone_answer_interrupts() -> None:
    plan = plan_of(
        given(
            user("hi"), assistant("", "c1"), resume=[{"interruptId": "c1", "status": "cancelled"}]
        )
    )
    assert plan.prior == plan.turns and plan.answered == {"c1"}


@pytest.mark.parametrize(
    ("found", "says"),
    [
        (
            given(user("hi"), resume=[{"interruptId": "c", "status": "cancelled"}]),
            "resume answers and a new user",
        ),
        (given(user("hi"), assistant("hello")), "nothing new in the input"),
        (given(), "nothing new in the input"),
    ],
)
def test_an_input_must_ask_one_thing(found: RunAgentInput, says: str) -> None:
    with pytest.raises(InvalidArgument, match=says):
        plan_of(found)


def test_the_conversation_before_must_be_the_sessions_all_of_it() -> None:
    plan = plan_of(given(user("hi"), assistant("hello"), user("next")))
    check_prior(plan, [Turn("user", "hi"), Turn("assistant", "hello")])
    with pytest.raises(FailedPrecondition, match=r"message 1 \(assistant\) is not the thread's"):
        check_prior(plan, [Turn("user", "hi"), Turn("assistant", "bye")])
    with pytest.raises(FailedPrecondition, match="the thread has 3 messages"):
        check_prior(plan, [Turn("user", "hi"), Turn("assistant", "hello"), Turn("user", "more")])


def test_the_run_request_carries_the_input() -> None:
    found = given(
        user(
            [
                {"type": "text", "text": "look"},
                {
                    "type": "image",
                    "source": {
                        "type": "url",
                        "value": "https://x.example/a.png",
                        "mimeType": "image/png",
                    },
                },
                {
                    "type": "document",
                    "source": {"type": "data", "value": "JVBE", "mimeType": "application/pdf"},
                },
                {
                    "type": "audio",
                    "source": {"type": "data", "value": "AAAA", "mimeType": "audio/wav"},
                },
            ]
        ),
        tools=[{"name": "lookup", "description": "Looks up.", "parameters": {"type": "object"}}],
        context=[{"description": "user's city", "value": "Lyon"}],
        forwardedProps={"behest": {"model": "script", "instructions": "Be brief."}, "app": 1},
    )
    request = run_request(found, plan_of(found))

    assert request["provider"] == {"value": "local"} and request["model"] == {"value": "script"}
    assert (request["sessionId"], request["startSession"]) == (THREAD, True)
    assert request["input"] == "look"
    assert request["content"] == [
        {"image": {"url": "https://x.example/a.png", "mimeType": "image/png"}},
        {"file": {"data": "JVBE", "mimeType": "application/pdf"}},
    ]
    assert request["clientTools"] == [
        {"name": "lookup", "description": "Looks up.", "parametersSchema": '{"type":"object"}'}
    ]
    assert (
        request["instructions"] == "Be brief.\n\nContext from the application:\n- user's city: Lyon"
    )
    assert json.loads(request["metadata"]) == {
        "ag_ui": {
            "threadId": THREAD,
            "runId": "r-1",
            "context": [{"description": "user's city", "value": "Lyon"}],
            "forwardedProps": {"app": 1},
        }
    }
    assert request["clientRequestId"] == "ag-ui:r-1"


def test_forwarded_props_may_not_set_what_the_door_does() -> None:
    found = given(user("hi"), forwardedProps={"behest": {"sessionId": THREAD}})
    with pytest.raises(InvalidArgument, match=r"forwardedProps\.behest\.sessionId is set by the"):
        run_request(found, plan_of(found))
    found = given(user("hi"), forwardedProps={"behest": "fast"})
    with pytest.raises(InvalidArgument, match="must be an object"):
        run_request(found, plan_of(found))


def test_tool_messages_are_tool_results() -> None:
    found = given(
        user("hi"), assistant("", "c1", "c2"), tool("c1", "fine"), tool("c2", "", error="boom")
    )
    assert tool_results("run", plan_of(found)) == {
        "runId": "run",
        "results": [
            {"callId": "c1", "output": "fine", "isError": False},
            {"callId": "c2", "output": "boom", "isError": True},
        ],
    }


def test_resume_entries_are_approvals() -> None:
    resume = [
        {"interruptId": "c1", "status": "resolved", "payload": {"decision": "allow_always"}},
        {
            "interruptId": "c2",
            "status": "resolved",
            "payload": {"decision": "deny", "reason": "no"},
        },
        {"interruptId": "c3", "status": "resolved", "payload": True},
        {"interruptId": "c4", "status": "cancelled"},
    ]
    found = given(user("hi"), assistant("", "c1", "c2", "c3", "c4"), resume=resume)
    decided = approvals("run", plan_of(found))["approvals"]
    assert [(a["callId"], a["decision"], a["reason"]) for a in decided] == [
        ("c1", "APPROVAL_DECISION_ALLOW_ALWAYS", ""),
        ("c2", "APPROVAL_DECISION_DENY", "no"),
        ("c3", "APPROVAL_DECISION_ALLOW", ""),
        ("c4", "APPROVAL_DECISION_DENY", "the approval was cancelled"),
    ]


def test_a_resume_payload_that_decides_nothing_is_refused() -> None:
    found = given(
        user("hi"),
        assistant("", "c1"),
        resume=[{"interruptId": "c1", "status": "resolved", "payload": "yes"}],
    )
    with pytest.raises(InvalidArgument, match=r"resume\[0\].payload must be"):
        approvals("run", plan_of(found))
