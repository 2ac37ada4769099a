"""Event timestamps on the wire: the same instant as protobuf's own conversion gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from behest.api.convert import timestamp

INSTANTS = [
    datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC),
    datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),  # before the epoch
    datetime(2026, 5, 3, 1, 2, 3, 456789, tzinfo=timezone(timedelta(hours=2))),
    datetime(2026, 5, 3, 1, 2, 3, 456789),  # naive: taken as UTC
]


@pytest.mark.parametrize("value", INSTANTS)
def test_timestamp_matches_protobufs_conversion(value: datetime) -> None:
    expected = Timestamp()
    expected.FromDatetime(value)
    assert timestamp(value) == expected
    assert timestamp(value).ToDatetime(tzinfo=UTC) == (
        value if value.tzinfo else value.replace(tzinfo=UTC)
    )
