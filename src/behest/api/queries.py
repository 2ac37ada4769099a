"""The reads' requests checked: ListRuns' filters, GetUsage's days, pages of events,
sessions and messages (limits with their defaults and maxima)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from behest._proto.agent.v1 import common_pb2 as pb_common
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import session_pb2 as pb_session
from behest.api.fields import LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX, page_limit, uuid_field
from behest.domain.agents import NAME as AGENT_NAME
from behest.domain.runs import RunFilter, RunStatus
from behest.errors import InvalidArgument, quote

DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
MAX_USAGE_DAYS = 366
EVENTS_LIMIT_DEFAULT = 1000
EVENTS_LIMIT_MAX = 10_000
MESSAGES_LIMIT_DEFAULT = 100
MESSAGES_LIMIT_MAX = 1000
# Sequences are BIGINT: a cursor past the largest one is past every run's end.
MAX_SEQUENCE = 2**63 - 1


def run_query(request: pb.ListRunsRequest) -> RunFilter:
    """Validate ListRuns filters and pagination (limit defaults to 100, at most 100)."""
    limit, offset = page(request.pagination)
    status: RunStatus | None = None
    if request.status:
        try:
            status = RunStatus(request.status)
        except ValueError:
            raise InvalidArgument(f"status {request.status} is not a RunStatus value") from None
    session_id = uuid_field(request.session_id, "session_id") if request.session_id else None
    if request.agent_version and not request.agent:
        raise InvalidArgument("agent_version needs agent: the name of the agent")
    if request.agent:
        # The name's form only: an unknown agent lists no runs.
        if not AGENT_NAME.fullmatch(request.agent):
            raise InvalidArgument(f"agent must be an agent's name; got {quote(request.agent)}")
    return RunFilter(
        session_id=session_id,
        status=status,
        limit=limit,
        offset=offset,
        agent=request.agent,
        agent_version=request.agent_version,
    )


def page(pagination: pb_common.Pagination) -> tuple[int, int]:
    """A list's limit (default 100, at most 100) and offset."""
    limit = pagination.limit or LIST_LIMIT_DEFAULT
    if limit > LIST_LIMIT_MAX:
        raise InvalidArgument(f"pagination.limit must be at most {LIST_LIMIT_MAX}, got {limit}")
    return limit, pagination.offset


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageQuery:
    session_id: str | None
    from_day: str
    to_day: str


def usage_query(request: pb.GetUsageRequest, today: str) -> UsageQuery:
    """Validate GetUsage: days as YYYY-MM-DD (default today), at most a year apart."""
    days = []
    for field in ("from_day", "to_day"):
        text = getattr(request, field) or today
        if not DAY.match(text):
            raise InvalidArgument(f"{field} must be a day like 2026-12-01; got {quote(text)}")
        try:
            days.append(date.fromisoformat(text))
        except ValueError:
            raise InvalidArgument(f"{field} {quote(text)} is not a day of the calendar") from None
    if days[0] > days[1]:
        raise InvalidArgument("from_day must not be after to_day")
    if (days[1] - days[0]).days >= MAX_USAGE_DAYS:
        raise InvalidArgument(f"ask for at most {MAX_USAGE_DAYS} days at once")
    session_id = uuid_field(request.session_id, "session_id") if request.session_id else None
    return UsageQuery(
        session_id=session_id, from_day=days[0].isoformat(), to_day=days[1].isoformat()
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class EventsQuery:
    run_id: str
    after: int
    limit: int


def events_query(request: pb.ListRunEventsRequest) -> EventsQuery:
    """Validate ListRunEvents: the run id, and limit (default 1000, at most 10000)."""
    run_id = uuid_field(request.run_id, "run_id")
    limit = page_limit(request.limit, "limit", EVENTS_LIMIT_DEFAULT, EVENTS_LIMIT_MAX)
    return EventsQuery(run_id=run_id, after=min(request.after_sequence, MAX_SEQUENCE), limit=limit)


def sessions_page(request: pb_session.ListSessionsRequest) -> tuple[int, int]:
    """ListSessions' (limit, offset): limit defaults to 100, at most 100."""
    page = request.pagination
    limit = page_limit(page.limit, "pagination.limit", LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX)
    return limit, page.offset


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkQuery:
    session_id: str
    through: int | None
    after_run_id: str


def fork_query(request: pb_session.ForkSessionRequest) -> ForkQuery:
    """Validate ForkSession: the session, and where the fork leaves it (one of the two)."""
    session_id = uuid_field(request.session_id, "session_id")
    point = request.WhichOneof("point")
    if point is None:
        raise InvalidArgument("give through_position or after_run_id: where the fork leaves")
    if point == "after_run_id":
        return ForkQuery(
            session_id=session_id,
            through=None,
            after_run_id=uuid_field(request.after_run_id, "after_run_id"),
        )
    return ForkQuery(session_id=session_id, through=request.through_position, after_run_id="")


@dataclass(frozen=True, slots=True, kw_only=True)
class MessagesQuery:
    session_id: str
    from_position: int
    limit: int


def messages_query(request: pb_session.ListSessionMessagesRequest) -> MessagesQuery:
    """Validate ListSessionMessages: the session id, and limit (default 100, at most 1000)."""
    session_id = uuid_field(request.session_id, "session_id")
    limit = page_limit(request.limit, "limit", MESSAGES_LIMIT_DEFAULT, MESSAGES_LIMIT_MAX)
    return MessagesQuery(session_id=session_id, from_position=request.from_position, limit=limit)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionWatch:
    session_id: str
    after_run_id: str
    after_sequence: int


def session_watch_query(request: pb_session.WatchSessionEventsRequest) -> SessionWatch:
    """Validate WatchSessionEvents: the session id, and the cursor (a run id and a sequence,
    or neither)."""
    session_id = uuid_field(request.session_id, "session_id")
    after_run_id = uuid_field(request.after_run_id, "after_run_id") if request.after_run_id else ""
    if request.after_sequence and not after_run_id:
        raise InvalidArgument("after_sequence needs after_run_id: the run of that event")
    if request.after_sequence > MAX_SEQUENCE:
        raise InvalidArgument(f"after_sequence must be at most {MAX_SEQUENCE}")
    return SessionWatch(
        session_id=session_id, after_run_id=after_run_id, after_sequence=request.after_sequence
    )
