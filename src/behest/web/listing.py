"""The runs page's filters: status and session as the store queries them, model and time
over the tenant's runs newest first (a bounded scan per page; the next page goes on from
where it stopped)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from behest.domain.callers import Caller
from behest.domain.runs import Run, RunStatus
from behest.errors import InvalidArgument
from behest.runs.operations import Operations

PAGE = 50
SCAN_PAGE = 200
# Runs read at most for one page of a model or time filter.
MAX_SCAN = 5000
STATUSES = [s.name for s in RunStatus]


@dataclass(frozen=True, slots=True)
class RunFilter:
    """What the runs page shows: all five fields optional."""

    status: RunStatus | None = None
    session_id: str = ""
    model: str = ""
    since: datetime | None = None
    until: datetime | None = None

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> RunFilter:
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

    def matches(self, run: Run) -> bool:
        return (not self.model or run.model == self.model) and (
            self.until is None or run.created_at <= self.until
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


@dataclass(slots=True)
class RunPage:
    runs: list[Run] = field(default_factory=list)
    # Where the next page's scan starts (None: no more runs).
    next_start: int | None = None


async def find_runs(
    runs: Operations, caller: Caller, wanted: RunFilter, *, start: int, limit: int = PAGE
) -> RunPage:
    """Up to `limit` runs that fit, newest first, from position `start` of the tenant's runs
    (by status and session)."""
    page = RunPage()
    offset = start
    while offset - start < MAX_SCAN:
        batch = await runs.list_runs(
            caller,
            session_id=wanted.session_id or None,
            status=wanted.status,
            limit=SCAN_PAGE,
            offset=offset,
        )
        for i, run in enumerate(batch):
            if wanted.since is not None and run.created_at < wanted.since:
                return page  # newest first: nothing older fits
            if wanted.matches(run):
                page.runs.append(run)
                if len(page.runs) == limit:
                    page.next_start = offset + i + 1
                    return page
        if len(batch) < SCAN_PAGE:
            return page
        offset += SCAN_PAGE
    page.next_start = offset
    return page


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
