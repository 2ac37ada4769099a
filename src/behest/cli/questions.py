"""A running tool's question at the terminal: how `behest pending` and the streamed run show it
(its message, the JSON Schema an answer fits, how to reply), and `behest run` asking for the
answer when stdin is a terminal (cli/waits.py has the `reply` command)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from behest.client import ElicitAction, PendingCall, Question, Reply

QUESTION_PROMPT = "reply? (a JSON object; empty: decline) "


def ask_question(question: Question, stdin: TextIO, out: TextIO) -> Reply:
    """Ask at the terminal for the answer to a tool's question (its line is shown already): a
    JSON object that fits the question's schema accepts, an empty line declines, end of input
    cancels; anything else is asked again, saying what is wrong."""
    out.write(f"  {fits(question.schema_json)}\n")
    while True:
        out.write(QUESTION_PROMPT)
        out.flush()
        line = stdin.readline()
        if not line:
            out.write("\n")
            return Reply(ElicitAction.CANCEL)
        if not line.strip():
            return Reply(ElicitAction.DECLINE)
        content, problem = _content(line, question.schema)
        if content is not None:
            return Reply(ElicitAction.ACCEPT, content)
        out.write(f"  {problem}\n")


def terminal_questioner(stdin: TextIO, out: TextIO) -> Callable[[Question], Reply]:
    """A question handler for BehestClient that asks at the terminal (see `ask_question`)."""
    return lambda question: ask_question(question, stdin, out)


def _content(text: str, schema: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The answer typed, if it is a JSON object that fits `schema`; else why not."""
    try:
        content = json.loads(text)
    except ValueError as exc:
        return None, f"not JSON: {exc}"
    if not isinstance(content, dict):
        return None, "the answer must be a JSON object"
    error = best_match(Draft202012Validator(schema).iter_errors(content))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return None, f"does not fit at {where}: {error.message}"
    return content, ""


def fits(schema_json: str) -> str:
    """What an accepted answer to a question must be."""
    return f"the answer is a JSON object that fits: {schema_json}"


def how_to_reply(run_id: str, elicitation_id: str) -> str:
    """The command that answers a question."""
    return f"behest reply {run_id} {elicitation_id} --accept JSON | --decline | --cancel"


def format_questions(run_id: str, calls: Sequence[PendingCall]) -> list[str]:
    """The questions among a run's waiting calls, each with what answers it and how."""
    shown = []
    for call in calls:
        if (q := call.elicitation) is not None:
            shown.append(
                f"\nquestion {q.elicitation_id} of {q.tool_name} (call {q.call_id}): "
                f"{q.message}\n  {fits(q.requested_schema)}\n"
                f"  to reply: {how_to_reply(run_id, q.elicitation_id)}"
            )
    return shown
