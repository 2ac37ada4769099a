"""Pages from Jinja2 templates, autoescaped everywhere: every value from outside (model text,
tool arguments and output, ids, reasons) goes into the page as text. No template marks
outside data `|safe`; the timeline's JSON for inspector.js travels over the live tail, never
inline (the CSP allows no inline script)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from behest.domain.callers import Caller
from behest.web import agent_views, formats, questions
from behest.web.auth import CSRF_FIELD, Gate

TEMPLATES = Path(__file__).parent / "templates"


class Renderer:
    def __init__(self, gate: Gate) -> None:
        self._gate = gate
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(TEMPLATES),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.filters.update(
            stamp=formats.stamp,
            tokens=formats.tokens,
            money=formats.money,
            trace_id=formats.trace_id,
            handed_to=agent_views.handed_to,
            question_form=questions.form_for,
        )
        self._templates = Jinja2Templates(env=env)

    def page(
        self,
        request: Request,
        name: str,
        *,
        caller: Caller | None = None,
        status: int = 200,
        **context: Any,
    ) -> Response:
        """The template `name` as a page for `caller` (None: signed out)."""
        values = {
            "caller": caller,
            "csrf": self._gate.csrf_token(request) if caller is not None else "",
            "csrf_field": CSRF_FIELD,
            **context,
        }
        return self._templates.TemplateResponse(request, name, values, status_code=status)
