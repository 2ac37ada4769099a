"""The raw local model server (llama.cpp + SmolLM2-135M) through the official `openai` client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletionNamedToolChoiceParam, ChatCompletionToolParam

MODEL = "smollm2"
GREEDY: dict[str, Any] = {"temperature": 0, "seed": 1, "extra_body": {"top_k": 1}}
CALCULATOR: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}

USE_CALCULATOR: ChatCompletionNamedToolChoiceParam = {
    "type": "function",
    "function": {"name": "calculator"},
}


@pytest.fixture
def client(llm_server: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=llm_server, api_key="unused", timeout=30, max_retries=0) as client:
        yield client


def streamed_text(client: OpenAI, prompt: str) -> str:
    parts: list[str] = []
    with client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=24,
        stream=True,
        **GREEDY,
    ) as stream:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
    return "".join(parts)


def test_streamed_text_is_non_empty_and_repeatable(client: OpenAI) -> None:
    prompt = "Describe the ocean in one sentence."
    first = streamed_text(client, prompt)
    assert first.strip()
    # Same answer with the prompt cached by the server (right after itself) and not cached.
    assert streamed_text(client, prompt) == first
    assert streamed_text(client, "Name a color.").strip()
    assert streamed_text(client, prompt) == first


def test_tool_choice_streams_a_calculator_call(client: OpenAI) -> None:
    ids: set[str] = set()
    names: set[str] = set()
    arguments: list[str] = []
    finish_reasons: list[str] = []
    with client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is 12 times 7?"}],
        tools=[CALCULATOR],
        tool_choice=USE_CALCULATOR,
        max_tokens=64,
        stream=True,
        **GREEDY,
    ) as stream:
        for chunk in stream:
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            if choice.finish_reason:
                finish_reasons.append(choice.finish_reason)
            for call in choice.delta.tool_calls or ():
                assert call.index == 0
                if call.id:
                    ids.add(call.id)
                if call.function and call.function.name:
                    names.add(call.function.name)
                if call.function and call.function.arguments:
                    arguments.append(call.function.arguments)
    assert len(ids) == 1
    assert names == {"calculator"}
    assert len(arguments) > 1, "arguments should arrive in fragments"
    assert "expression" in json.loads("".join(arguments))
    assert finish_reasons == ["tool_calls"]
