"""The runs page's filters (status, session, model, agent, a time range), all queried by the
store; newest first, a page at a time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from behest.domain.agents import parse_ref
from behest.domain.callers import Caller
from behest.domain.runs import Run, RunFilter, RunStatus
from behest.errors import InvalidArgument
from behest.runs.operations import Operations

PAGE = 50
STATUSES = [s.name for s in RunStatus]


@dataclass(frozen=True, slots=True)
class RunsForm:
    """The runs page's filter form: all fields optional."""

    status: RunStatus | None = None
    session_id: str = ""
    model: str = ""
    # Runs of this agent, of this version of it (0: any version).
    agent: str = ""
    agent_version: int = 0
    since: datetime | None = None
    until: datetime | None = None

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> RunsForm:
        """From the page's query string; InvalidArgument names a bad field."""
        status = query.get("status", "")
        if status and status not in STATUSES:
            raise InvalidArgument(f"status must be one of {', '.join(STATUSES)}")
        agent, version = _agent(query.get("agent", ""))
        return cls(
            status=RunStatus[status] if status else None,
            session_id=query.get("session", "").strip()[:100],
            model=query.get("model", "").strip()[:200],
            agent=agent,
            agent_version=version,
            since=_moment(query.get("since", ""), "since"),
            until=_moment(query.get("until", ""), "until"),
        )

    def query(self) -> dict[str, str]:
        """The filter as query parameters (for the next page's link)."""
        values = {
            "status": self.status.name if self.status is not None else "",
            "session": self.session_id,
            "model": self.model,
            "agent": self.agent_text,
            "since": _field(self.since),
            "until": _field(self.until),
        }
        return {k: v for k, v in values.items() if v}

    @property
    def agent_text(self) -> str:
        """The agent filter as typed: "NAME" or "NAME@VERSION" ("" for none)."""
        if not self.agent:
            return ""
        return f"{self.agent}@{self.agent_version}" if self.agent_version else self.agent

    def page(self, *, limit: int, offset: int) -> RunFilter:
        """The store's filter for one page of what the form asks."""
        return RunFilter(
            session_id=self.session_id or None,
            status=self.status,
            model=self.model,
            agent=self.agent,
            agent_version=self.agent_version,
            created_from=self.since,
            created_to=self.until,
            limit=limit,
            offset=offset,
        )


@dataclass(slots=True)
class RunPage:
    runs: list[Run] = field(default_factory=list)
    # Where the next page's scan starts (None: no more runs).
    next_start: int | None = None


async def find_runs(
    runs: Operations, caller: Caller, wanted: RunsForm, *, start: int, limit: int = PAGE
) -> RunPage:
    """Up to `limit` runs that fit, newest first, from position `start` of those that fit."""
    found = await runs.list_runs(caller, wanted.page(limit=limit + 1, offset=start))
    more = len(found) > limit
    return RunPage(found[:limit], start + limit if more else None)


def _agent(value: str) -> tuple[str, int]:
    """The agent filter: "NAME" (any version) or "NAME@VERSION"; an alias is refused, as it
    names a version only now, not the one a run used."""
    if not value.strip():
        return "", 0
    try:
        ref = parse_ref(value[:200])
    except ValueError as error:
        raise InvalidArgument(str(error)) from None
    if ref.alias:
        raise InvalidArgument("agent must be NAME or NAME@VERSION (a version's number)")
    return ref.name, ref.version


def _moment(value: str, name: str) -> datetime | None:
    """A time from a datetime-local field (UTC) or ISO 8601."""
    if not value.strip():
        return None
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidArgument(f"{name} must be a time like 2026-01-31T12:00 (UTC)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _field(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M") if moment else ""
