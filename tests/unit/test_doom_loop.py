"""The doom-loop rule: three identical calls, or a 2-4 cycle repeated three times."""

from __future__ import annotations

from behest.domain.messages import ToolCall
from behest.runs.doom_loop import DoomLoopDetector


def feed(*calls: tuple[str, str]) -> list[str | None]:
    detector = DoomLoopDetector()
    return [detector.observe(ToolCall(f"c{i}", name, args)) for i, (name, args) in enumerate(calls)]


def test_three_identical_calls_are_a_loop() -> None:
    results = feed(*[("search", '{"q": "x"}')] * 3)
    assert results[:2] == [None, None]
    assert results[2] is not None
    assert "search" in results[2]


def test_argument_key_order_does_not_matter() -> None:
    results = feed(("f", '{"a": 1, "b": 2}'), ("f", '{"b": 2, "a": 1}'), ("f", '{"a":1,"b":2}'))
    assert results[2] is not None


def test_three_calls_with_different_arguments_are_not_a_loop() -> None:
    results = feed(("f", '{"a": 1}'), ("f", '{"a": 2}'), ("f", '{"a": 3}'))
    assert results == [None, None, None]


def test_a_two_cycle_repeated_three_times_is_a_loop() -> None:
    calls = [("read", "{}"), ("write", "{}")] * 3
    results = feed(*calls)
    assert results[:5] == [None] * 5
    assert results[5] is not None
    assert "cycle" in results[5]


def test_a_four_cycle_repeated_three_times_is_a_loop() -> None:
    cycle = [("a", "{}"), ("b", "{}"), ("c", "{}"), ("d", "{}")]
    results = feed(*(cycle * 3))
    assert results[-1] is not None
    assert all(r is None for r in results[:-1])


def test_a_two_cycle_repeated_twice_is_not_a_loop() -> None:
    assert feed(*([("a", "{}"), ("b", "{}")] * 2 + [("c", "{}")])) == [None] * 5


def test_a_five_cycle_is_not_caught() -> None:
    cycle = [(name, "{}") for name in "abcde"]
    assert feed(*(cycle * 3)) == [None] * 15
