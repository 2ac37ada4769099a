"""Checking a final answer against a response format (runs/structured.py), pure."""

from __future__ import annotations

import pytest

from behest.domain.output import ResponseFormat, remote_refs
from behest.runs import structured

SUM = ResponseFormat(
    "sum",
    {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]},
)


@pytest.mark.parametrize(
    "text",
    ['{"answer": 4}', '  {"answer":4}\n', '```json\n{"answer": 4}\n```', '```\n{"answer": 4}\n```'],
)
def test_an_answer_that_fits_is_its_compact_json(text: str) -> None:
    assert structured.check(text, SUM) == structured.Checked('{"answer":4}')


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "the answer is empty, not JSON"),
        ("four", "the answer is not valid JSON"),
        ('{"answer": 4} and more', "the answer is not valid JSON"),
        ('{"answer": NaN}', "the answer is not valid JSON (NaN is not a JSON number)"),
        ("[" * 100 + "]" * 100, "the answer is nested 100 levels deep"),
        ('{"answer": "4"}', "the answer does not match the schema at /answer: '4' is not of"),
        ("{}", "the answer does not match the schema at /: 'answer' is a required property"),
    ],
)
def test_an_answer_that_does_not_fit_says_why(text: str, problem: str) -> None:
    checked = structured.check(text, SUM)
    assert checked.output is None
    assert checked.problem.startswith(problem)
    assert len(checked.problem) <= structured.MAX_PROBLEM_CHARS


def test_a_schema_that_cannot_be_applied_is_a_problem_not_a_crash() -> None:
    broken = ResponseFormat("b", {"$ref": "#/$defs/missing"})
    assert structured.check("1", broken).problem.startswith("the schema could not be applied")


def test_the_repair_prompt_names_the_problem_and_the_schema() -> None:
    prompt = structured.repair_prompt(SUM, "the answer is not valid JSON")
    assert "the answer is not valid JSON" in prompt
    assert "'sum'" in prompt and SUM.schema_text in prompt


def test_remote_refs_are_found_at_any_depth() -> None:
    schema = {"$defs": {"a": {"items": [{"$ref": "http://x/y"}]}}, "$ref": "#/$defs/a"}
    assert remote_refs(schema) == ["http://x/y"]
