"""The Writer protocol: every write transaction goes through one, per backend
(sqlite_writer.py, postgres_writer.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from sqlalchemy import Connection, Executable, Row

P = ParamSpec("P")
R = TypeVar("R")
WriteFn = Callable[Concatenate[Connection, P], R]


class Writer(Protocol):
    async def write(self, fn: WriteFn[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run `fn(connection, …)` in one write transaction; commit if it returns. `fn` may
        be run twice (AsyncWriter: its connection died before COMMIT), so it keeps nothing
        from one run to the next."""
        ...

    async def write_small(self, fn: WriteFn[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`write` for a transaction of a few rows, where a hop to a thread costs the most."""
        ...

    async def execute_once(
        self, statement: Executable, params: Mapping[str, Any] | None = None
    ) -> Sequence[Row[Any]]:
        """Run one statement as a transaction of its own, and return its rows."""
        ...

    async def dispose(self) -> None: ...
