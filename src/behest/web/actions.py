"""The inspector's forms (POST): sign in and out, cancel a run, answer a waiting call.

Every POST is checked for its CSRF token first (auth.py; 403 without it), then acts through
`Operations` as the signed-in caller — the approver role, tenants and validation as over
gRPC — and answers with a redirect to the page that shows the outcome. An answer to a question
whose content the server refuses gets the run's page again, saying why beside the question.
"""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from behest.api.answers import MAX_CALL_ID_BYTES, MAX_REASON_BYTES, MAX_RESULT_BYTES
from behest.api.fields import uuid_field
from behest.domain.callers import Caller
from behest.domain.executions import Verdict
from behest.domain.waits import Answer, Decision, ElicitAction, WaitKind
from behest.errors import FailedPrecondition, InvalidArgument, Unauthenticated
from behest.runs.operations import Operations
from behest.web import questions
from behest.web.auth import Gate
from behest.web.pages import Pages

_DECISIONS = {"allow": Decision.ALLOW, "deny": Decision.DENY, "always": Decision.ALLOW_ALWAYS}
_ACTIONS = {
    "accept": ElicitAction.ACCEPT,
    "decline": ElicitAction.DECLINE,
    "cancel": ElicitAction.CANCEL,
}
MAX_TOKEN_CHARS = 4000


class Actions:
    def __init__(self, runs: Operations, gate: Gate, pages: Pages) -> None:
        self._runs = runs
        self._gate = gate
        self._pages = pages

    async def sign_in(self, request: Request) -> Response:
        form = await self._gate.checked_form(request, signing_in=True)
        token = _text(form, "token", MAX_TOKEN_CHARS)
        response = RedirectResponse("/runs", status_code=303)
        try:
            self._gate.sign_in(token, response)
        except Unauthenticated as exc:
            return self._pages.sign_in_form(request, status=401, error=str(exc))
        return response

    async def sign_out(self, request: Request) -> Response:
        await self._gate.checked_form(request)
        response = RedirectResponse("/signin", status_code=303)
        self._gate.sign_out(request, response)
        return response

    async def cancel(self, request: Request) -> Response:
        caller = self._gate.caller(request)
        form = await self._gate.checked_form(request)
        run_id = str(request.path_params["run_id"])
        reason = _text(form, "reason", MAX_REASON_BYTES)
        await self._runs.cancel(caller, run_id, reason=reason)
        return RedirectResponse(f"/runs/{run_id}", status_code=303)

    async def answer(self, request: Request) -> Response:
        """A decision on an approval (allow, deny, always; a reason), a client tool's result
        (its output; whether it is an error), a verdict on an outcome unknown, or an answer to
        a question."""
        caller = self._gate.caller(request)
        form = await self._gate.checked_form(request)
        run_id = str(request.path_params["run_id"])
        call_id = _text(form, "call_id", MAX_CALL_ID_BYTES)
        if not call_id:
            raise InvalidArgument("call_id is required")
        if form.get("kind") == "elicitation":
            return await self._answer_question(request, caller, run_id, call_id, form)
        if form.get("kind") == "reconcile":
            await self._reconcile(caller, form)
        elif form.get("kind") == "client_tool":
            output = _text(form, "output", MAX_RESULT_BYTES)
            answer = Answer(call_id=call_id, text=output, is_error=form.get("is_error") == "on")
            await self._runs.answer(caller, run_id, [answer], WaitKind.CLIENT_TOOL)
        else:
            decision = _DECISIONS.get(str(form.get("decision", "")))
            if decision is None:
                raise InvalidArgument("decision must be allow, deny or always")
            reason = _text(form, "reason", MAX_REASON_BYTES)
            answer = Answer(call_id=call_id, decision=decision, text=reason)
            await self._runs.answer(caller, run_id, [answer], WaitKind.APPROVAL)
        return RedirectResponse(f"/runs/{run_id}", status_code=303)

    async def _answer_question(
        self, request: Request, caller: Caller, run_id: str, call_id: str, form: FormData
    ) -> Response:
        """Accept (the content, from the question's form), decline or cancel, as
        SubmitElicitationAnswers; refused, the run's page again with the server's words."""
        action = _ACTIONS.get(str(form.get("action", "")))
        if action is None:
            raise InvalidArgument("action must be accept, decline or cancel")
        waiting = await self._runs.pending_calls(caller, run_id)
        call = next((c for c in waiting if c.call_id == call_id), None)
        if call is None or call.question is None:
            raise FailedPrecondition(
                f"question {call_id} waits no more: it was answered, it timed out or its run "
                "went on"
            )
        text = ""
        if action == ElicitAction.ACCEPT:
            text = questions.content_of(call.question, form)
            if len(text.encode()) > MAX_RESULT_BYTES:
                raise InvalidArgument(f"the answer is longer than {MAX_RESULT_BYTES} bytes")
        answer = Answer(call_id=call_id, action=action, text=text)
        try:
            await self._runs.answer(caller, run_id, [answer], WaitKind.ELICITATION)
        except InvalidArgument as exc:
            refused = questions.Refused(call_id, str(exc), questions.sent_values(form))
            return await self._pages.run_page(request, caller, run_id, status=400, refused=refused)
        return RedirectResponse(f"/runs/{run_id}", status_code=303)

    async def _reconcile(self, caller: Caller, form: FormData) -> None:
        """A verdict on an execution whose outcome is unknown, as ReconcileToolExecution."""
        verdict = _VERDICTS.get(str(form.get("verdict", "")))
        if verdict is None:
            raise InvalidArgument("verdict must be ran, did_not_run or give_up")
        execution_id = uuid_field(_text(form, "execution_id", MAX_CALL_ID_BYTES), "execution_id")
        ran = verdict == Verdict.RAN
        text = (
            _text(form, "output", MAX_RESULT_BYTES)
            if ran
            else _text(form, "reason", MAX_REASON_BYTES)
        )
        is_error = ran and form.get("is_error") == "on"
        answer = Answer(call_id="", verdict=verdict, text=text, is_error=is_error)
        await self._runs.reconcile(caller, execution_id, answer)


_VERDICTS = {"ran": Verdict.RAN, "did_not_run": Verdict.DID_NOT_RUN, "give_up": Verdict.GIVE_UP}


def _text(form: FormData, name: str, max_bytes: int) -> str:
    value = form.get(name, "")
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be text")
    if len(value.encode()) > max_bytes:
        raise InvalidArgument(f"{name} is longer than {max_bytes} bytes")
    return value.strip() if name != "output" else value
