"""Structured output: the final answer a run must give, as a JSON Schema (its response format)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# The name a response format without one gets.
DEFAULT_NAME = "final_answer"


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """The final answer must be JSON that validates against `schema` (draft 2020-12).

    `name` is what providers see: OpenAI's json_schema name, Anthropic's answer tool.
    """

    name: str
    schema: dict[str, Any]

    @property
    def schema_text(self) -> str:
        """The schema as compact JSON text (how it is stored and echoed)."""
        return json.dumps(self.schema, separators=(",", ":"))


def remote_refs(schema: Any) -> list[str]:
    """The `$ref`s of a schema that point outside it (anything not "#…"): behest never fetches
    one. Iterative, so a deep schema costs no recursion."""
    found: list[str] = []
    level = [schema]
    while level:
        children: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                ref = item.get("$ref")
                if isinstance(ref, str) and not ref.startswith("#"):
                    found.append(ref)
                children.extend(item.values())
            elif isinstance(item, list):
                children.extend(item)
        level = children
    return found
