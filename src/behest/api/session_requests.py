"""CreateRunRequest's session fields checked: the session it continues (or starts, with the
id the client chose), and what a new message does when that session's run is still active
(on_busy, double-texting)."""

from __future__ import annotations

from collections.abc import Sequence

from behest._proto.agent.v1 import run_pb2 as pb
from behest.api.fields import uuid_field
from behest.domain.content import ContentPart
from behest.domain.runs import BusyPolicy
from behest.errors import InvalidArgument


def session_fields(
    request: pb.CreateRunRequest, content: Sequence[ContentPart]
) -> tuple[str | None, BusyPolicy]:
    """The session id (None: a new session) and the busy policy."""
    session_id = uuid_field(request.session_id, "session_id") if request.session_id else None
    if request.start_session and session_id is None:
        raise InvalidArgument("start_session needs session_id: the UUID of the session to start")
    return session_id, busy_policy(request.on_busy, content)


def busy_policy(value: int, content: Sequence[ContentPart]) -> BusyPolicy:
    """CreateRunRequest.on_busy: a known policy; one whose message waits takes no parts."""
    try:
        on_busy = BusyPolicy(value)
    except ValueError:
        raise InvalidArgument(f"on_busy {value} is not a BusyPolicy value") from None
    if on_busy in (BusyPolicy.ENQUEUE, BusyPolicy.STEER) and content:
        raise InvalidArgument(
            f"on_busy {on_busy.name} takes no content parts (a message that waits keeps its "
            "input text only); send them once the session is idle"
        )
    return on_busy
