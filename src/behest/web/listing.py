"""The runs page's filters (status, session, model, a time range), all queried by the store;
newest first, a page at a time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from behest.domain.callers import Caller
from behest.domain.runs import Run, RunFilter, RunStatus
from behest.errors import InvalidArgument
from behest.runs.operations import Operations

PAGE = 50
STATUSES = [s.name for s in RunStatus]


@dataclass(frozen=True, slots=True)
class RunsForm:
    """The runs page's filter form: all five fields optional."""

    status: RunStatus | None = None
    session_id: str = ""
    model: str = ""
    since: datetime | None = None
    until: datetime | None = None

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> RunsForm:
        """From the page's query string; InvalidArgument names a bad field."""
        status = query.get("status", "")
        if status and status not in STATUSES:
            raise InvalidArgument(f"status must be one of {', '.join(STATUSES)}")
        return cls(
            status=RunStatus[status] if status else None,
            session_id=query.get("session", "").strip()[:100],
            model=query.get("model", "").strip()[:200],
            since=_moment(query.get("since", ""), "since"),
            until=_moment(query.get("until", ""), "until"),
        )

    def query(self) -> dict[str, str]:
        """The filter as query parameters (for the next page's link)."""
        values = {
            "status": self.status.name if self.status is not None else "",
            "session": self.session_id,
            "model": self.model,
            "since": _field(self.since),
            "until": _field(self.until),
        }
        return {k: v for k, v in values.items() if v}

    def page(self, *, limit: int, offset: int) -> RunFilter:
        """The store's filter for one page of what the form asks."""
        return RunFilter(
            session_id=self.session_id or None,
            status=self.status,
            model=self.model,
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
