"""The Anthropic adapter's request: behest's ModelRequest as `messages.create`'s arguments.

Request mapping (behest's normalised ModelRequest → `POST /v1/messages`, `stream: true`):

- `instructions` and every system-role message → `system` (joined by blank lines).
- user and assistant messages → content blocks: an assistant's text block, then a `tool_use`
  block {id, name, input} per call (`input` is the call's JSON arguments parsed; arguments that
  are not a JSON object are kept as `{"_raw_arguments": text}` so the model sees what it sent).
- tool messages → `tool_result` blocks {tool_use_id, content, is_error} in a user message;
  adjacent messages of one role are merged, since the API wants the roles to alternate, and
  in a user message the `tool_result` blocks come first, as the API requires.
- The API rejects a `tool_use` without a `tool_result` right after it, and a result without its
  call. A transcript can hold both (a run cancelled or failed between the assistant message and
  its tool results), so a missing result becomes an error result ("the tool call did not run")
  and a result without its call becomes a plain text block.
- `tools` → `[{name, description, input_schema}]`; `tool_choice` auto → {"type": "auto"},
  required → {"type": "any"}, none → {"type": "none"}, a tool's name → {"type": "tool", name}.
  With no tools offered, neither is sent, unless the transcript holds tool blocks: the API
  then wants tools defined, so the tools named in it are sent with a bare schema and
  {"type": "none"}, which lets the model call none of them.
- `max_tokens` (required by the API) is the request's `max_output_tokens`, else 4096.
- Structured output: the API has no response_format, so the format becomes a tool named after
  it whose input_schema is its schema (wrapped as {"answer": …} unless an object's), forced
  with {"type": "tool", name} when no other tool is offered (or tool_choice is none), else
  offered beside them. Its call is the final answer: the decoder turns its input into the
  answer's text and never reports it as a tool call (so it is never run, listed or approved).
- Tool-call ids are reduced to the characters the API accepts (letters, digits, `_`, `-`).
- Extended thinking: a run's `reasoning.budget_tokens` → `thinking: {"type": "enabled",
  "budget_tokens"}`, lowered below `max_tokens` when a budget clamps that (left out when that
  leaves less than 1024, or when tool_choice forces a tool, which the API refuses with
  thinking). An assistant message's thinking and redacted_thinking blocks, kept in the
  transcript as the API sent them (signatures included), are sent back first in its content,
  unchanged, as the API requires when tools are used.
- Images and files (a user message's content parts) → `image` blocks (base64 or url source)
  and `document` blocks (a PDF as base64, a text/plain file as a text source; its file name
  as `title`).
- Prompt caching (the provider's `cache_breakpoints`, default all): a `cache_control:
  {"type": "ephemeral"}` breakpoint on the last of the run's tools, on the system prompt (then
  sent as one text block), and on the last block of the transcript, so that the next call of
  the run reads the conversation so far from the cache. Cache reads and writes come back in
  usage (anthropic_stream.py) and are priced apart.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Collection
from typing import Any

from behest import bounded_json
from behest.domain.content import ContentPart, PartKind
from behest.domain.messages import Message, Role
from behest.domain.output import ResponseFormat
from behest.domain.runs import MIN_THINKING_BUDGET
from behest.providers.base import ModelRequest

DEFAULT_MAX_TOKENS = 4096
MISSING_RESULT = "no result: the tool call did not run (the run ended before it did)"

_THINKING_TYPES = ("thinking", "redacted_thinking")
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def build_params(request: ModelRequest, *, cache: Collection[str] = ()) -> dict[str, Any]:
    """The keyword arguments of `messages.create` for one model call (without `stream`);
    `cache`: where prompt-cache breakpoints go (tools, instructions, transcript)."""
    system = [request.instructions] if request.instructions.strip() else []
    system += [m.text for m in request.messages if m.role == Role.SYSTEM and m.text.strip()]
    messages = build_messages(request.messages)
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_output_tokens or DEFAULT_MAX_TOKENS,
        "messages": messages,
    }
    if system:
        params["system"] = "\n\n".join(system)
    answer = request.response_format
    if request.tools:
        params["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters_schema}
            for t in request.tools
        ]
        params["tool_choice"] = tool_choice(request.tool_choice)
    else:
        used = [n for n in _tool_names_used(messages) if answer is None or n != answer.name]
        if used:
            params["tools"] = [
                {
                    "name": name,
                    "description": "Not available now.",
                    "input_schema": {"type": "object"},
                }
                for name in used
            ]
            params["tool_choice"] = {"type": "none"}
    if answer is not None:
        params.setdefault("tools", []).append(answer_tool(answer))
        if not request.tools or request.tool_choice == "none":
            params["tool_choice"] = {"type": "tool", "name": answer.name}
    thinking = _thinking(request, params)
    if thinking is not None:
        params["thinking"] = thinking
    _cache_breakpoints(params, cache, tools=len(request.tools))
    return params


def _cache_breakpoints(params: dict[str, Any], cache: Collection[str], *, tools: int) -> None:
    """Mark the ends of the stable prefixes for Anthropic's prompt cache: the run's tools,
    the system prompt, and the transcript so far (its last block, read back by the next call
    of the run). Prefixes shorter than the model's minimum are just not cached."""
    if "tools" in cache and tools:
        params["tools"][tools - 1]["cache_control"] = dict(EPHEMERAL)
    if "instructions" in cache and "system" in params:
        params["system"] = [
            {"type": "text", "text": params["system"], "cache_control": dict(EPHEMERAL)}
        ]
    if "transcript" in cache and params["messages"]:
        blocks = params["messages"][-1]["content"]
        cacheable = [b for b in blocks if b["type"] not in _THINKING_TYPES]
        if cacheable:
            cacheable[-1]["cache_control"] = dict(EPHEMERAL)


def _thinking(request: ModelRequest, params: dict[str, Any]) -> dict[str, Any] | None:
    """Extended thinking as the run asks, within the call's max_tokens; None when not asked
    or not possible (a forced tool, or too few tokens left for the least budget)."""
    if request.reasoning is None or not request.reasoning.budget_tokens:
        return None
    if params.get("tool_choice", {}).get("type") in ("any", "tool"):
        return None
    budget = min(request.reasoning.budget_tokens, params["max_tokens"] - 1)
    if budget < MIN_THINKING_BUDGET:
        return None
    return {"type": "enabled", "budget_tokens": budget}


EPHEMERAL = {"type": "ephemeral"}


def answer_tool(response_format: ResponseFormat) -> dict[str, Any]:
    """The tool whose input is the final answer (Anthropic has no response_format). Its
    input_schema must be an object's: any other schema is wrapped as {"answer": …}."""
    schema: dict[str, Any] = response_format.schema
    if wraps_answer(response_format):
        schema = {"type": "object", "properties": {"answer": schema}, "required": ["answer"]}
    return {
        "name": response_format.name,
        "description": "Give your final answer with this tool: its input is the answer.",
        "input_schema": schema,
    }


def wraps_answer(response_format: ResponseFormat) -> bool:
    """Whether the answer tool wraps the format's schema as {"answer": …} (not an object's)."""
    return response_format.schema.get("type") != "object"


def tool_choice(choice: str) -> dict[str, str]:
    match choice:
        case "auto" | "":
            return {"type": "auto"}
        case "required":
            return {"type": "any"}
        case "none":
            return {"type": "none"}
    return {"type": "tool", "name": choice}


def build_messages(transcript: list[Message]) -> list[dict[str, Any]]:
    """User/assistant turns with alternating roles, every tool_use paired with its result."""
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    pending: dict[str, None] = {}  # tool_use ids of the last assistant turn still unanswered
    answered: set[str] = set()

    def close_pending() -> None:
        for call_id in pending:
            turns.append(("user", [_tool_result(call_id, MISSING_RESULT, is_error=True)]))
        pending.clear()

    for message in transcript:
        match message.role:
            case Role.ASSISTANT:
                close_pending()
                answered.clear()
                blocks = _reasoning_blocks(message) + _text_blocks(message.text)
                for call in message.tool_calls:
                    call_id = safe_id(call.id)
                    if call_id in pending:
                        continue  # the API wants unique ids; a repeat cannot be answered
                    pending[call_id] = None
                    blocks.append(
                        {
                            "type": "tool_use",
                            "id": call_id,
                            "name": call.name,
                            "input": tool_input(call.arguments),
                        }
                    )
                if blocks:
                    turns.append(("assistant", blocks))
            case Role.TOOL:
                call_id = safe_id(message.tool_call_id)
                if call_id in pending:
                    del pending[call_id]
                    answered.add(call_id)
                    result = _tool_result(call_id, message.text, is_error=message.is_error)
                    turns.append(("user", [result]))
                elif message.text.strip() and call_id not in answered:
                    label = f"[result of tool {message.tool_name or 'call'} {call_id}]"
                    turns.append(("user", [{"type": "text", "text": f"{label}\n{message.text}"}]))
            case Role.USER:
                close_pending()
                blocks = (
                    [_content_block(part) for part in message.parts]
                    if message.parts
                    else _text_blocks(message.text)
                )
                if blocks:
                    turns.append(("user", blocks))
    close_pending()
    return merge_turns(turns)


def _content_block(part: ContentPart) -> dict[str, Any]:
    """A content part as a Messages API block: text, image, or document (PDF, plain text)."""
    match part.kind:
        case PartKind.TEXT:
            return {"type": "text", "text": part.text}
        case PartKind.IMAGE if part.url:
            return {"type": "image", "source": {"type": "url", "url": part.url}}
        case PartKind.IMAGE:
            return {"type": "image", "source": _base64(part)}
    if part.media_type == "text/plain":
        source = {"type": "text", "media_type": "text/plain", "data": part.data.decode()}
    else:
        source = _base64(part)
    block: dict[str, Any] = {"type": "document", "source": source}
    if part.filename:
        block["title"] = part.filename
    return block


def _base64(part: ContentPart) -> dict[str, str]:
    data = base64.b64encode(part.data).decode()
    return {"type": "base64", "media_type": part.media_type, "data": data}


def _reasoning_blocks(message: Message) -> list[dict[str, Any]]:
    """The thinking blocks kept with an assistant message, exactly as the API sent them."""
    if not message.reasoning_blocks:
        return []
    blocks = json.loads(message.reasoning_blocks)
    return [b for b in blocks if isinstance(b, dict) and b.get("type") in _THINKING_TYPES]


def merge_turns(turns: list[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Adjacent turns of one role become one message; a user message's tool results go first."""
    merged: list[dict[str, Any]] = []
    for role, blocks in turns:
        if merged and merged[-1]["role"] == role:
            merged[-1]["content"].extend(blocks)
        else:
            merged.append({"role": role, "content": list(blocks)})
    for message in merged:
        if message["role"] == "user":
            message["content"].sort(key=lambda block: block["type"] != "tool_result")
    return merged


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's JSON arguments as the object `tool_use.input` must be."""
    if not arguments.strip():
        return {}
    try:
        value = bounded_json.parse(arguments)
    except bounded_json.JsonRefused:
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"_raw_arguments": arguments}


def safe_id(call_id: str) -> str:
    """A tool-call id in the characters the API accepts (another provider may have made it)."""
    return _UNSAFE_ID_CHARS.sub("_", call_id) or "call"


def _text_blocks(text: str) -> list[dict[str, Any]]:
    # The API rejects empty and whitespace-only text blocks.
    return [{"type": "text", "text": text}] if text.strip() else []


def _tool_result(call_id: str, text: str, *, is_error: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "is_error": is_error}
    if text:
        block["content"] = text
    return block


def _tool_names_used(messages: list[dict[str, Any]]) -> list[str]:
    names = {
        block["name"]: None
        for message in messages
        for block in message["content"]
        if block["type"] == "tool_use"
    }
    return list(names)
