"""behest's own admission, per tenant: open streams, run creations per minute, request size.

Separate from grpcio's limits (which know no tenants), so that one tenant at its limits never
locks out another, and unary RPCs (CancelRun, GetRun) and health always get through: only
streams count against the stream limit. Over a limit: RESOURCE_EXHAUSTED naming it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from google.protobuf.message import Message

from behest.api.content import DEFAULT_LIMITS, ContentLimits
from behest.api.requests import RequestLimits
from behest.api.tenancy import Tenancy
from behest.errors import ResourceExhausted


@dataclass(slots=True)
class _Bucket:
    """A token bucket holding one minute's worth of creations."""

    tokens: float
    at: float
    per_minute: float


class Creation:
    """One creation taken from a tenant's bucket for a CreateRun: `created` once it made a
    run, else it is given back."""

    __slots__ = ("created",)

    def __init__(self) -> None:
        self.created = False


class Admission:
    """Counts what each tenant has open and takes what it may do; refuses the rest."""

    def __init__(
        self,
        tenancy: Tenancy,
        *,
        max_request_id_bytes: int,
        max_wait_s: float = 30 * 86_400.0,
        content: ContentLimits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tenancy = tenancy
        self._max_request_id_bytes = max_request_id_bytes
        self._max_wait_s = int(max_wait_s)
        self._content = content
        self._clock = clock
        self._streams: dict[str, int] = {}
        self._buckets: dict[str, _Bucket] = {}

    def check_size(self, tenant: str, request: Message) -> None:
        """Refuse a request bigger than the tenant's max_request_bytes."""
        limit = self._tenancy.limits(tenant).max_request_bytes
        size = request.ByteSize()
        if size > limit:
            raise ResourceExhausted(
                f"max_request_bytes: the request is {size} bytes, this tenant's limit {limit}"
            )

    def request_limits(self, tenant: str) -> RequestLimits:
        limits = self._tenancy.limits(tenant)
        return RequestLimits(
            max_input_bytes=limits.max_input_bytes,
            max_metadata_bytes=limits.max_metadata_bytes,
            max_request_id_bytes=self._max_request_id_bytes,
            max_wait_s=self._max_wait_s,
            content=replace(self._content, max_text_bytes=limits.max_input_bytes),
        )

    def open_streams(self, tenant: str) -> int:
        """The tenant's streams open now (CreateRunStream, WatchRunEvents)."""
        return self._streams.get(tenant, 0)

    @contextlib.contextmanager
    def stream(self, tenant: str) -> Iterator[None]:
        """Hold one of the tenant's stream slots while the stream is open."""
        limit = self._tenancy.limits(tenant).max_streams
        open_now = self._streams.get(tenant, 0)
        if open_now >= limit:
            raise ResourceExhausted(
                f"max_streams: this tenant has {open_now} open streams, its limit; close some "
                "and retry"
            )
        self._streams[tenant] = open_now + 1
        try:
            yield
        finally:
            left = self._streams[tenant] - 1
            if left:
                self._streams[tenant] = left
            else:
                del self._streams[tenant]

    @contextlib.contextmanager
    def creation(self, tenant: str) -> Iterator[Creation]:
        """Take one of the tenant's creations for the CreateRun in the block, and give it back
        unless the block marks a run created: creates_per_minute counts runs created, not
        requests (a refused or failed creation, an idempotent repeat, a message steered into
        an active run count for nothing). A caller that goes away keeps it taken: its
        creation may still commit."""
        bucket = self._take(tenant)
        taken = Creation()
        try:
            yield taken
        except Exception:
            _give_back(bucket)
            raise
        if not taken.created:
            _give_back(bucket)

    def _take(self, tenant: str) -> _Bucket | None:
        """Take one creation from the tenant's bucket (a minute's worth, refilled evenly);
        None when the tenant has no such limit."""
        per_minute = self._tenancy.limits(tenant).creates_per_minute
        if not per_minute:
            return None
        now = self._clock()
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = _Bucket(per_minute, now, per_minute)
        bucket.tokens = min(per_minute, bucket.tokens + (now - bucket.at) * per_minute / 60)
        bucket.at = now
        if bucket.tokens < 1:
            wait_s = (1 - bucket.tokens) * 60 / per_minute
            raise ResourceExhausted(
                f"creates_per_minute: this tenant may create {per_minute:g} runs a minute; "
                f"retry in {wait_s:.1f} s"
            )
        bucket.tokens -= 1
        return bucket


def _give_back(bucket: _Bucket | None) -> None:
    if bucket is not None:
        bucket.tokens = min(bucket.per_minute, bucket.tokens + 1)
