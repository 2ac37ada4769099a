"""TextCoalescer: deltas join only while the previous one is uncommitted; order and text kept."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from behest.domain import events as ev
from behest.events.run_log import RunLog
from behest.runs.text_coalescer import TextCoalescer


class FakeRunLog:
    """Records emitted payloads; each emit's commit completes when the test says so."""

    def __init__(self) -> None:
        self.emitted: list[str] = []
        self.commits: list[asyncio.Future[None]] = []

    async def emit(self, *payloads: Any, state: Any = ()) -> asyncio.Future[None]:
        for payload in payloads:
            self.emitted.append(payload.delta if isinstance(payload, ev.TextDelta) else "<other>")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.commits.append(done)
        return done

    def commit_all(self) -> None:
        for done in self.commits:
            if not done.done():
                done.set_result(None)


def coalescer(log: FakeRunLog, *, enabled: bool = True) -> TextCoalescer:
    return TextCoalescer(cast(RunLog, cast(Any, log)), enabled=enabled)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_deltas_waiting_for_a_commit_go_out_as_one_once_it_is_done() -> None:
    log = FakeRunLog()
    text = coalescer(log)
    for chunk in ("a", "b", "c", "d"):
        await text.add(chunk)
    assert log.emitted == ["a"]  # b, c, d wait for a's commit
    log.commit_all()
    await settle()
    assert log.emitted == ["a", "bcd"]
    await text.add("e")  # bcd not committed yet: e waits
    assert log.emitted == ["a", "bcd"]
    log.commit_all()
    await settle()
    assert log.emitted == ["a", "bcd", "e"]


async def test_flush_sends_pending_text_before_anything_else() -> None:
    log = FakeRunLog()
    text = coalescer(log)
    await text.add("x")
    await text.add("y")
    await text.flush()
    await log.emit(ev.ToolCallStarted("call_1", "calculator"))
    log.commit_all()
    await settle()
    assert log.emitted == ["x", "y", "<other>"]  # nothing is emitted after the other event


async def test_discard_drops_pending_text_and_nothing_follows() -> None:
    log = FakeRunLog()
    text = coalescer(log)
    await text.add("x")
    await text.add("lost")
    text.discard()
    log.commit_all()
    await settle()
    assert log.emitted == ["x"]


async def test_switched_off_every_delta_is_emitted_at_once() -> None:
    log = FakeRunLog()
    text = coalescer(log, enabled=False)
    for chunk in ("a", "b", "c"):
        await text.add(chunk)
    assert log.emitted == ["a", "b", "c"]
