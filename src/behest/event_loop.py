"""Which asyncio event loop the server runs on: uvloop when installed (and not switched off).

grpc.aio spends most of each streamed message in loop wake-ups; on uvloop a stream carries
about a fifth more messages per second here (bench/README.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory(use_uvloop: bool = True) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None for asyncio's default loop."""
    if not use_uvloop:
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], *, use_uvloop: bool = True) -> T:
    """`asyncio.run`, on uvloop when available."""
    with asyncio.Runner(loop_factory=loop_factory(use_uvloop)) as runner:
        return runner.run(main)


def name() -> str:
    """The running loop's kind, for logs and reports: "uvloop" or "asyncio"."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"
