"""A question a running tool asks (an elicitation) as a form of the inspector, and the
content of an answer made from what the form sent.

MCP asks with a flat object schema of primitive properties: each becomes one field — a text
input (string), a number input (number, integer), a checkbox (boolean), a select (an enum:
`enum`, with `enumNames`, or `oneOf` of titled consts). A schema with anything else (a nested
object, an array) is answered as JSON in a textarea, filled with a skeleton of it. The form
checks nothing itself (its Decline and Cancel buttons send it too, and one check is enough):
its hints say what the schema asks, and Operations.answer checks the content against the
schema (runs/asking.py check_answers); its refusal is shown beside the question, with what was
typed (`Refused`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from behest.domain.waits import PendingCall, Question

FIELD_PREFIX = "field."  # a property's form field: field.<property>
JSON_FIELD = "content"  # the textarea of a question answered as JSON
_INPUTS = {"string": "text", "integer": "number", "number": "number", "boolean": "checkbox"}
_SKELETON: dict[str, Any] = {"string": "", "integer": 0, "number": 0, "boolean": False}


@dataclass(frozen=True, slots=True)
class Field:
    """One property of the answer's content, as an input."""

    name: str  # the form field's name
    label: str
    input: str  # text, number, checkbox, select
    value: str  # as the input holds it ("on": a checked box; a select: the option's value)
    hint: str = ""
    options: tuple[tuple[str, str], ...] = ()  # a select's (value, label): JSON text, words


@dataclass(frozen=True, slots=True)
class QuestionForm:
    fields: tuple[Field, ...] = ()
    json: str | None = None  # the textarea's text, when the schema is not one of fields


@dataclass(frozen=True, slots=True)
class Refused:
    """An answer the server refused: to which question, its words, and what the form sent."""

    call_id: str
    message: str
    sent: dict[str, str] = field(default_factory=dict)


def form_for(call: PendingCall, refused: Refused | None = None) -> QuestionForm:
    """The form of the question of `call`, holding what was sent when its answer was refused
    (else the schema's defaults)."""
    assert call.question is not None
    sent = refused.sent if refused is not None and refused.call_id == call.call_id else None
    properties = _flat_properties(call.question)
    if properties is None:
        text = sent.get(JSON_FIELD, "") if sent is not None else _skeleton(call.question)
        return QuestionForm(json=text)
    required = set(call.question.schema.get("required") or ())
    return QuestionForm(
        fields=tuple(
            _field(name, prop, name in required, sent) for name, prop in properties.items()
        )
    )


def content_of(question: Question, form: Mapping[str, Any]) -> str:
    """An accepted answer's content, as JSON text, from the form: each property converted by
    its type as far as it goes (what does not convert goes as typed, for the schema's check
    to say so); an empty input is left out, an unchecked box is false."""
    properties = _flat_properties(question)
    if properties is None:
        return _text(form.get(JSON_FIELD))
    content: dict[str, Any] = {}
    for name, prop in properties.items():
        raw = _text(form.get(FIELD_PREFIX + name))
        if prop.get("type") == "boolean" and not _options(prop):
            content[name] = bool(raw)
        elif raw.strip():
            content[name] = _value(prop, raw)
    return json.dumps(content, ensure_ascii=False)


def sent_values(form: Mapping[str, Any]) -> dict[str, str]:
    """What a question's form sent (its fields, its JSON), to show again."""
    return {
        name: value
        for name, value in form.items()
        if isinstance(value, str) and (name.startswith(FIELD_PREFIX) or name == JSON_FIELD)
    }


# --- the schema ----------------------------------------------------------------------------


def _flat_properties(question: Question) -> dict[str, dict[str, Any]] | None:
    """The schema's properties, if each is one a field shows (else None: JSON)."""
    properties = question.schema.get("properties", {})
    if not isinstance(properties, dict):
        return None
    for prop in properties.values():
        if not isinstance(prop, dict):
            return None
        kind = prop.get("type")
        if not _options(prop) and not (isinstance(kind, str) and kind in _INPUTS):
            return None  # ["string", "null"] too
    return properties


def _options(prop: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A select's options: (the value as JSON text, its words)."""
    enum, one_of = prop.get("enum"), prop.get("oneOf")
    if isinstance(enum, list) and enum:
        names = prop.get("enumNames")
        words = names if isinstance(names, list) and len(names) == len(enum) else enum
        return tuple((json.dumps(v), str(w)) for v, w in zip(enum, words, strict=True))
    if (
        isinstance(one_of, list)
        and one_of
        and all(isinstance(o, dict) and "const" in o for o in one_of)
    ):
        return tuple((json.dumps(o["const"]), str(o.get("title", o["const"]))) for o in one_of)
    return ()


def _field(
    name: str, prop: dict[str, Any], required: bool, sent: Mapping[str, str] | None
) -> Field:
    form_name = FIELD_PREFIX + name
    options = _options(prop)
    kind = "select" if options else _INPUTS[str(prop.get("type"))]
    if sent is not None:
        value = sent.get(form_name, "")
    elif "default" not in prop:
        value = ""
    elif kind == "checkbox":
        value = "on" if prop["default"] is True else ""
    elif kind == "select":
        value = json.dumps(prop["default"])
    else:
        value = str(prop["default"])
    label = str(prop.get("title") or name)
    return Field(form_name, label, kind, value, _hint(prop, required), options)


def _hint(prop: dict[str, Any], required: bool) -> str:
    """What the schema asks of a property, in words."""
    said = [str(prop["description"])] if prop.get("description") else []
    kind = prop.get("type")
    if kind in ("integer", "number") and not _options(prop):
        said.append("a whole number" if kind == "integer" else "a number")
    low, high = prop.get("minimum"), prop.get("maximum")
    if low is not None and high is not None:
        said.append(f"{low} to {high}")
    elif low is not None or high is not None:
        said.append(f"at least {low}" if low is not None else f"at most {high}")
    shortest, longest = prop.get("minLength"), prop.get("maxLength")
    if shortest is not None or longest is not None:
        said.append(
            f"{shortest or 0} to {longest} characters"
            if longest is not None
            else f"at least {shortest} characters"
        )
    if prop.get("format"):
        said.append(f"format {prop['format']}")
    if required:
        said.append("required")
    return " · ".join(said)


def _skeleton(question: Question) -> str:
    """The schema's object with each property's default, or an empty value of its type."""
    properties = question.schema.get("properties")
    skeleton: dict[str, Any] = {}
    if isinstance(properties, dict):
        for name, prop in properties.items():
            kind = prop.get("type") if isinstance(prop, dict) else None
            if isinstance(prop, dict) and "default" in prop:
                skeleton[name] = prop["default"]
            else:
                skeleton[name] = {"array": [], "object": {}}.get(
                    str(kind), _SKELETON.get(str(kind))
                )
    return json.dumps(skeleton, indent=2, ensure_ascii=False)


def _value(prop: dict[str, Any], raw: str) -> Any:
    """A field's text as the value its property's type asks for, as far as it converts."""
    if _options(prop):
        try:
            return json.loads(raw)  # an option's value, as JSON text
        except ValueError:
            return raw
    kind = prop.get("type")
    if kind not in ("integer", "number"):
        return raw
    text = raw.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return raw
    return number if math.isfinite(number) else raw


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
