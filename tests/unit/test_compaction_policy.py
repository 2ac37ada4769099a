"""The pure compaction policy: estimates, the context after summaries, the kept tail, prune."""

from __future__ import annotations

from datetime import UTC, datetime

from behest.domain.content import ContentPart, PartKind
from behest.domain.messages import Message, Role, ToolCall
from behest.runs import compaction


def msg(position: int, role: Role, text: str = "x" * 40, **fields: object) -> Message:
    return Message(
        id=f"m{position}",
        session_id="s",
        run_id="r",
        position=position,
        role=role,
        text=text,
        created_at=datetime.now(UTC),
        **fields,  # type: ignore[arg-type]
    )


def turn(start: int) -> list[Message]:
    call = ToolCall(f"c{start}", "calculator", '{"expression": "1+1"}')
    return [
        msg(start, Role.USER),
        msg(start + 1, Role.ASSISTANT, "", tool_calls=(call,)),
        msg(start + 2, Role.TOOL, "2" * 400, tool_call_id=call.id, tool_name="calculator"),
        msg(start + 3, Role.ASSISTANT),
    ]


def test_estimate_counts_text_and_tool_calls() -> None:
    assert compaction.estimate_tokens([msg(0, Role.USER, "x" * 400)]) == 104
    with_call = msg(0, Role.ASSISTANT, "", tool_calls=(ToolCall("c", "abcd", "x" * 36),))
    assert compaction.estimate_tokens([with_call]) == 14


def test_estimate_counts_images_and_files() -> None:
    image = ContentPart.inline(PartKind.IMAGE, "image/png", b"p" * 50_000)
    by_url = ContentPart(kind=PartKind.IMAGE, url="https://example.com/a.png")
    pdf = ContentPart.inline(PartKind.FILE, "application/pdf", b"%" * 40_000)
    plain = msg(0, Role.USER, "x" * 40)
    with_parts = msg(
        0, Role.USER, "x" * 40, parts=(ContentPart.text_part("x" * 40), image, by_url, pdf)
    )
    extra = compaction.estimate_tokens([with_parts]) - compaction.estimate_tokens([plain])
    assert extra == 2 * compaction.IMAGE_TOKENS + 40_000 // compaction.CHARS_PER_TOKEN


def test_the_context_is_the_latest_summary_and_what_follows_it() -> None:
    messages = turn(0) + turn(4)
    summary = msg(8, Role.SYSTEM, "summary", summary_through=3)
    context = compaction.context([*messages, summary])
    assert [m.position for m in context] == [8, 4, 5, 6, 7]


def test_the_tail_is_the_last_turns_within_keep_tokens() -> None:
    messages = turn(0) + turn(4) + turn(8)
    assert compaction.tail_start(messages, tail_turns=2, keep_tokens=10_000) == 4
    # Two turns are over the budget: keep one.
    one_turn = compaction.estimate_tokens(turn(8))
    assert compaction.tail_start(messages, tail_turns=2, keep_tokens=one_turn) == 8


def test_prune_clears_only_tool_results_before_the_tail() -> None:
    messages = turn(0) + turn(4)
    pruned = compaction.prune(messages, before=4)
    assert pruned[2].text == compaction.PRUNED_TEXT
    assert pruned[6].text == "2" * 400
    assert [m.text for i, m in enumerate(pruned) if i != 2] == [
        m.text for i, m in enumerate(messages) if i != 2
    ]


def test_render_spells_out_calls_and_results() -> None:
    text = compaction.render(turn(0))
    assert 'assistant called calculator({"expression": "1+1"})' in text
    assert "tool calculator result: 222" in text
