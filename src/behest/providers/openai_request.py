"""The OpenAI adapter's request: behest's ModelRequest as a streamed chat completion's body
(messages, tools, tool_choice, max_tokens, reasoning_effort, response_format)."""

from __future__ import annotations

import base64
from typing import Any

from behest.domain.content import ContentPart, PartKind
from behest.domain.messages import Message, Role
from behest.providers.base import ModelRequest

_CHOICES = ("auto", "none", "required")


def request_body(
    request: ModelRequest, *, completion_tokens: bool = False, json_object: bool = False
) -> dict[str, Any]:
    """The JSON body of a streamed chat completion for `request`; `json_object`: its response
    format in llama-cpp-python's form."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": chat_messages(request),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters_schema,
                },
            }
            for tool in request.tools
        ]
        body["tool_choice"] = tool_choice(request.tool_choice)
    if request.max_output_tokens:
        field_name = "max_completion_tokens" if completion_tokens else "max_tokens"
        body[field_name] = request.max_output_tokens
    if request.reasoning is not None and request.reasoning.effort:
        body["reasoning_effort"] = request.reasoning.effort
    if request.response_format is not None and json_object:
        body["response_format"] = {"type": "json_object", "schema": request.response_format.schema}
    elif request.response_format is not None:
        # Not strict: strict mode refuses most schemas (every property required, no
        # additionalProperties); behest validates the answer itself.
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": request.response_format.name,
                "schema": request.response_format.schema,
            },
        }
    return body


def tool_choice(choice: str) -> str | dict[str, Any]:
    """`auto`, `none`, `required`, or the one tool the model must call."""
    if choice in _CHOICES or not choice:
        return choice or "auto"
    return {"type": "function", "function": {"name": choice}}


def chat_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Instructions as a leading system message, then the transcript."""
    messages = [{"role": "system", "content": request.instructions}] if request.instructions else []
    return messages + [chat_message(m) for m in request.messages]


def chat_message(message: Message) -> dict[str, Any]:
    """One transcript message in Chat Completions form."""
    match message.role:
        case Role.USER if message.parts:
            return {"role": "user", "content": [_content_part(part) for part in message.parts]}
        case Role.SYSTEM | Role.USER:
            return {"role": message.role.value, "content": message.text}
        case Role.ASSISTANT:
            if not message.tool_calls:
                return {"role": "assistant", "content": message.text}
            return {
                "role": "assistant",
                # "" rather than null: OpenAI accepts both, llama.cpp's server only a string.
                "content": message.text,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments or "{}"},
                    }
                    for call in message.tool_calls
                ],
            }
        case Role.TOOL:
            # Chat Completions has no error flag on tool results; say it in the content.
            content = f"Error: {message.text}" if message.is_error else message.text
            return {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
    raise ValueError(f"unknown role {message.role!r}")


def _content_part(part: ContentPart) -> dict[str, Any]:
    """A content part as a Chat Completions user content part (text, image_url, file)."""
    match part.kind:
        case PartKind.TEXT:
            return {"type": "text", "text": part.text}
        case PartKind.IMAGE:
            url = part.url or _data_url(part)
            return {"type": "image_url", "image_url": {"url": url}}
    file: dict[str, str] = {"file_data": _data_url(part)}
    if part.filename:
        file["filename"] = part.filename
    return {"type": "file", "file": file}


def _data_url(part: ContentPart) -> str:
    return f"data:{part.media_type};base64,{base64.b64encode(part.data).decode()}"
