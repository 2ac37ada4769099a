"""An AG-UI RunAgentInput read for behest: what is new in it (a user message, tool results,
resume answers), how its history compares with the session's, and the requests that carry it.

The conversation is the input's user, assistant and tool messages; system, developer,
reasoning and activity messages are the client's own and compared with nothing (behest's
system messages, its compaction summaries, are skipped on the session's side too). Messages
compare by role and text, assistant messages also by their tool calls' ids, tool messages by
the call they answer (a client tool's output may be stored cut to the server's bound).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ag_ui.core import ResumeEntry, RunAgentInput, ToolMessage, UserMessage
from pydantic import ValidationError

from behest import bounded_json
from behest.doors.agui_wire import DECISIONS, text_of
from behest.errors import FailedPrecondition, InvalidArgument, quote

CONVERSATION = ("user", "assistant", "tool")
# CreateRunRequest fields the door sets from the input; forwardedProps.behest may not.
DOOR_FIELDS = (
    "sessionId",
    "startSession",
    "input",
    "content",
    "clientTools",
    "metadata",
    "clientRequestId",
)
DEFAULT_PROVIDER, DEFAULT_MODEL = "local", "echo"
DECISION = {
    "allow": "APPROVAL_DECISION_ALLOW",
    "deny": "APPROVAL_DECISION_DENY",
    "allow_always": "APPROVAL_DECISION_ALLOW_ALWAYS",
}


@dataclass(frozen=True, slots=True)
class Turn:
    """A conversation message as compared: role, text, the calls it makes or answers."""

    role: str
    text: str = ""
    calls: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    """What an input asks: a new user message (a run to start), or answers to the calls a
    run waits for (tool results, resume entries) — and the conversation before it."""

    prior: tuple[Turn, ...]
    turns: tuple[Turn, ...]  # the whole conversation of the input
    user: UserMessage | None
    results: tuple[ToolMessage, ...]
    resume: tuple[ResumeEntry, ...]

    @property
    def answered(self) -> frozenset[str]:
        """The call ids this input answers."""
        return frozenset(
            [m.tool_call_id for m in self.results] + [e.interrupt_id for e in self.resume]
        )


def read_input(body: bytes, *, max_depth: int = bounded_json.MAX_DEPTH) -> RunAgentInput:
    """The body as a RunAgentInput; InvalidArgument says what is wrong with it."""
    try:
        text = body.decode()
        value = bounded_json.parse(text, max_bytes=len(body) + 1, max_depth=max_depth)
    except UnicodeDecodeError:
        raise InvalidArgument("the body is not UTF-8 JSON") from None
    except bounded_json.JsonRefused as exc:
        raise InvalidArgument(f"the body {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgument("the body must be a JSON object: AG-UI's RunAgentInput")
    try:
        found = RunAgentInput.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the body"
        raise InvalidArgument(f"not a valid RunAgentInput: {where}: {first['msg']}") from None
    try:
        uuid.UUID(found.thread_id)
    except ValueError:
        raise InvalidArgument(
            f"threadId must be a UUID, got {quote(found.thread_id)}: it is the behest session "
            "the thread's runs share"
        ) from None
    if not found.run_id.strip():
        raise InvalidArgument("runId is required")
    return found


def plan_of(found: RunAgentInput) -> Plan:
    """What the input asks, from the end of its conversation."""
    messages = [m for m in found.messages if m.role in CONVERSATION]
    turns = tuple(turn_of(m) for m in messages)
    resume = tuple(found.resume or ())
    last = messages[-1] if messages else None
    if isinstance(last, UserMessage):
        if resume:
            raise InvalidArgument(
                "resume answers and a new user message in one input: the run waits for the "
                "answers; send the message once it has ended"
            )
        return Plan(turns[:-1], turns, last, (), ())
    if isinstance(last, ToolMessage):
        count = next(
            (i for i, m in enumerate(reversed(messages)) if not isinstance(m, ToolMessage)),
            len(messages),
        )
        results = tuple(m for m in messages[-count:] if isinstance(m, ToolMessage))
        return Plan(turns[:-count], turns, None, results, resume)
    if not resume:
        raise InvalidArgument(
            "nothing new in the input: end its messages with a user message or tool results, "
            "or answer interrupts with resume"
        )
    return Plan(turns, turns, None, (), resume)


def turn_of(message: Any) -> Turn:
    """An AG-UI conversation message as compared."""
    match message.role:
        case "user":
            return Turn("user", content_text(message.content))
        case "assistant":
            calls = tuple(c.id for c in message.tool_calls or ())
            return Turn("assistant", message.content or "", calls)
        case _:
            return Turn("tool", calls=(message.tool_call_id,))


def stored_turn(message: Any) -> Turn | None:
    """A stored (agent.v1) message as compared; None for behest's own system messages."""
    match message.role:
        case "user" | "assistant":
            return Turn(message.role, text_of(message), tuple(c.id for c in message.tool_calls))
        case "tool":
            return Turn("tool", calls=(message.tool_call_id,))
        case _:
            return None


def content_text(content: Any) -> str:
    """The text of string-or-parts content: its text parts, in order."""
    if isinstance(content, str):
        return content
    return "\n".join(part.text for part in content if part.type == "text")


def mismatch(mine: Sequence[Turn], stored: Sequence[Turn]) -> str:
    """Where the input's conversation leaves the session's ("" if one starts the other)."""
    for i, (a, b) in enumerate(zip(mine, stored, strict=False)):
        if a != b:
            return (
                f"the input's conversation message {i} ({a.role}) is not the thread's "
                f"message {i} ({b.role}): the thread's history is behest's, send it as it is"
            )
    return ""


def check_prior(plan: Plan, stored: Sequence[Turn]) -> None:
    """The conversation before what is new must be the session's, all of it."""
    where = mismatch(plan.prior, stored)
    if where:
        raise FailedPrecondition(where)
    if len(plan.prior) < len(stored):
        raise FailedPrecondition(
            f"the thread has {len(stored)} messages and the input's conversation has "
            f"{len(plan.prior)} before its new one: send the thread's whole history"
        )


def run_request(found: RunAgentInput, plan: Plan) -> dict[str, Any]:
    """The CreateRunRequest (as proto JSON) that starts the input's run."""
    assert plan.user is not None
    behest = _behest_options(found.forwarded_props)
    for name in ("provider", "model"):
        if isinstance(behest.get(name), str):
            behest[name] = {"value": behest[name]}
    behest.setdefault("provider", {"value": DEFAULT_PROVIDER})
    behest.setdefault("model", {"value": DEFAULT_MODEL})
    context = [{"description": c.description, "value": c.value} for c in found.context or ()]
    if context:
        grounding = "\n".join(f"- {c['description']}: {c['value']}" for c in context)
        given = behest.get("instructions")
        before = f"{given}\n\n" if isinstance(given, str) and given else ""
        behest["instructions"] = f"{before}Context from the application:\n{grounding}"
    return {
        **behest,
        "sessionId": found.thread_id,
        "startSession": True,
        "input": content_text(plan.user.content),
        "content": media_parts(plan.user.content),
        "clientTools": [_client_tool(t) for t in found.tools or ()],
        "metadata": json.dumps(_metadata(found, context), separators=(",", ":")),
        "clientRequestId": f"ag-ui:{found.run_id}",
    }


def _behest_options(props: Any) -> dict[str, Any]:
    """forwardedProps.behest: the run's options, as CreateRunRequest's proto JSON."""
    if not isinstance(props, dict) or props.get("behest") is None:
        return {}
    options = props["behest"]
    if not isinstance(options, dict):
        raise InvalidArgument("forwardedProps.behest must be an object: the run's options")
    taken = [name for name in DOOR_FIELDS if name in options]
    if taken:
        raise InvalidArgument(
            f"forwardedProps.behest.{taken[0]} is set by the AG-UI door from the input; "
            "leave it out"
        )
    return dict(options)


def _metadata(found: RunAgentInput, context: list[dict[str, str]]) -> dict[str, Any]:
    """What the run's metadata keeps of the input (within max_metadata_bytes)."""
    props = found.forwarded_props
    if isinstance(props, dict):
        props = {k: v for k, v in props.items() if k != "behest"} or None
    kept: dict[str, Any] = {"threadId": found.thread_id, "runId": found.run_id}
    if context:
        kept["context"] = context
    if props is not None:
        kept["forwardedProps"] = props
    return {"ag_ui": kept}


def _client_tool(tool: Any) -> dict[str, str]:
    schema = tool.parameters if tool.parameters is not None else {"type": "object"}
    return {
        "name": tool.name,
        "description": tool.description,
        "parametersSchema": json.dumps(schema, separators=(",", ":")),
    }


def media_parts(content: Any) -> list[dict[str, Any]]:
    """A user message's images and documents as content parts; what behest cannot take as a
    part (audio, video, a provider's file handle, a document by URL) is left out."""
    if isinstance(content, str):
        return []
    parts = []
    for part in content:
        source: Any = getattr(part, "source", None)
        kind = getattr(source, "type", "")
        if part.type == "image" and kind == "url":
            parts.append({"image": {"url": source.value, "mimeType": source.mime_type or ""}})
        elif part.type == "image" and kind == "data":
            parts.append({"image": {"data": source.value, "mimeType": source.mime_type}})
        elif part.type == "document" and kind == "data":
            parts.append({"file": {"data": source.value, "mimeType": source.mime_type}})
    return parts


def tool_results(run_id: str, plan: Plan) -> dict[str, Any]:
    """SubmitToolResults (proto JSON): each tool message answers its call."""
    results = []
    for message in plan.results:
        output = content_text(message.content)
        if message.error is not None and not output:
            output = message.error
        results.append(
            {"callId": message.tool_call_id, "output": output, "isError": message.error is not None}
        )
    return {"runId": run_id, "results": results}


def approvals(run_id: str, plan: Plan) -> dict[str, Any]:
    """SubmitApprovals (proto JSON): each resume entry decides the call its interrupt names."""
    return {"runId": run_id, "approvals": [_approval(i, e) for i, e in enumerate(plan.resume)]}


def _approval(index: int, entry: ResumeEntry) -> dict[str, str]:
    if entry.status == "cancelled":
        decision, reason = "deny", "the approval was cancelled"
    else:
        decision, reason = _decision(index, entry.payload)
    return {"callId": entry.interrupt_id, "decision": DECISION[decision], "reason": reason}


def _decision(index: int, payload: Any) -> tuple[str, str]:
    """A resolved entry's payload: {"decision": "allow" | "deny" | "allow_always",
    "reason": "…"}, or true (allow) / false (deny)."""
    if isinstance(payload, bool):
        return ("allow" if payload else "deny"), ""
    if isinstance(payload, dict) and payload.get("decision") in DECISIONS:
        reason = payload.get("reason", "")
        return str(payload["decision"]), reason if isinstance(reason, str) else ""
    raise InvalidArgument(
        f'resume[{index}].payload must be {{"decision": "allow" | "deny" | '
        f'"allow_always", "reason": "…"}} or true or false'
    )
