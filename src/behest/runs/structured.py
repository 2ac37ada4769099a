"""Structured output: whether a final answer fits the run's response format, and the repair.

A run with a response format ends only with an answer that is JSON (bounded: bounded_json)
and validates against the format's schema. One that does not gets one repair attempt: the
model is told what was wrong and asked again, as a new iteration (runs/loop.py `_final`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from behest import bounded_json
from behest.domain.messages import Message, Role
from behest.domain.output import ResponseFormat
from behest.errors import describe, quote

# Repair attempts a run gets after an answer that does not fit.
MAX_REPAIRS = 1
# The answer as a model gives it; more is refused, not parsed.
MAX_ANSWER_BYTES = 1024 * 1024
# How much of a validation problem is told (to the model, in events and errors).
MAX_PROBLEM_CHARS = 300
# A model may wrap its JSON in one Markdown code fence; that much is forgiven.
_FENCE = re.compile(r"\A```[A-Za-z]*\s*\n(.*)\n\s*```\Z", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Checked:
    """A final answer checked: its value as compact JSON text, or what is wrong with it."""

    output: str | None
    problem: str = ""


def check(text: str, response_format: ResponseFormat) -> Checked:
    """Parse the answer as JSON and validate it against the format's schema."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    if not stripped:
        return Checked(None, "the answer is empty, not JSON")
    try:
        value = bounded_json.parse(stripped, max_bytes=MAX_ANSWER_BYTES)
    except bounded_json.JsonRefused as exc:
        return Checked(None, _short(f"the answer {exc}"))
    problem = _problem(value, response_format.schema)
    if problem:
        return Checked(None, _short(problem))
    return Checked(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def _problem(value: Any, schema: dict[str, Any]) -> str:
    try:
        errors = sorted(Draft202012Validator(schema).iter_errors(value), key=str)
    except Exception as exc:  # a schema that cannot be applied (an unresolvable $ref)
        return f"the schema could not be applied: {describe(exc)}"
    if not errors:
        return ""
    where = "/" + "/".join(str(p) for p in errors[0].absolute_path)
    return f"the answer does not match the schema at {where}: {errors[0].message}"


def repair_prompt(response_format: ResponseFormat, problem: str) -> str:
    """What the model is told when its answer did not fit."""
    return (
        f"Your answer could not be used: {problem}. Answer again with only a JSON value that "
        f"validates against the JSON Schema {response_format.name!r} below, and no other "
        f"text.\n{response_format.schema_text}"
    )


def failure(response_format: ResponseFormat, problem: str) -> str:
    """The error of a run whose answer did not fit, also after its repair attempts."""
    tries = "attempt" if MAX_REPAIRS == 1 else "attempts"
    return (
        f"the final answer does not fit response_format {response_format.name!r} after "
        f"{MAX_REPAIRS} repair {tries}: {problem}"
    )


def out_of_iterations(
    mine: list[Message], response_format: ResponseFormat | None, max_iterations: int
) -> str:
    """Why a run stops at max_iterations (`mine`: its messages): tools still wanted, or a
    repair of its answer not asked."""
    if len(mine) > 1 and mine[-1].role == Role.USER:  # a repair of the answer is next
        name = response_format.name if response_format else ""
        return (
            f"max iterations reached: the final answer did not fit response_format "
            f"{quote(name)} and no iteration of {max_iterations} is left to repair it"
        )
    return f"max iterations reached: the model still wanted tools after {max_iterations} iterations"


def _short(text: str) -> str:
    return text if len(text) <= MAX_PROBLEM_CHARS else text[: MAX_PROBLEM_CHARS - 1] + "…"
