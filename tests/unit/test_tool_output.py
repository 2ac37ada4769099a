"""The one truncation of tool output: the bound holds for what the model sees, after NULs and
lone surrogates are replaced."""

from __future__ import annotations

from behest.tools.output import MAX_BYTES, truncate


def kept_and_note(cut: str) -> tuple[str, str]:
    kept, _, note = cut.rpartition("\n")
    return kept, note


def test_nuls_are_replaced_before_the_cut_so_the_bound_holds() -> None:
    kept, note = kept_and_note(truncate("\x00" * 100_000))
    assert set(kept) == {"\ufffd"}
    assert len(kept.encode()) <= MAX_BYTES
    assert note == "[output truncated: showing 1 of 1 lines, 51198 of 300000 bytes]"


def test_a_short_text_with_nuls_is_replaced_without_a_note() -> None:
    assert truncate("a\x00b\x00") == "a\ufffdb\ufffd"


def test_lone_surrogates_become_replacement_characters() -> None:
    cut = truncate("ok \ud800 then \udfff done")
    assert cut == "ok \ufffd then \ufffd done"
    cut.encode()  # valid UTF-8


def test_a_long_text_of_surrogates_stays_within_the_bound() -> None:
    kept, note = kept_and_note(truncate("\udc80" * 60_000))
    assert set(kept) == {"\ufffd"}
    assert len(kept.encode()) <= MAX_BYTES
    assert note.endswith(f"{len(kept.encode())} of 180000 bytes]")


def test_the_cut_never_splits_a_character() -> None:
    kept, note = kept_and_note(truncate("é" * 60_000))
    assert kept == "é" * (MAX_BYTES // 2)
    assert note.endswith("51200 of 120000 bytes]")


def test_the_line_bound_counts_newlines_of_a_huge_text() -> None:
    kept, note = kept_and_note(truncate("\n" * 5_000_000))
    assert kept == "\n" * 2000
    assert note == "[output truncated: showing 2000 of 5000000 lines, 2000 of 5000000 bytes]"


def test_a_text_of_exactly_the_bounds_is_untouched() -> None:
    text = "".join(f"{i:024d}\n" for i in range(2000))
    assert len(text.encode()) == MAX_BYTES - 1200
    assert truncate(text) == text
