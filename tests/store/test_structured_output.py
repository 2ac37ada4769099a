"""Structured output in the store: a run's response format, and the answer that fitted it."""

from __future__ import annotations

import dataclasses

from behest.domain.output import ResponseFormat
from behest.domain.runs import RunStatus
from behest.store.sql.store import SqlStore
from behest.store.writes import SetRunOutput
from tests.store.helpers import create, finish, request, update

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


async def test_a_runs_response_format_reads_back_as_given(store: SqlStore) -> None:
    fmt = ResponseFormat("sum", SCHEMA)
    run = await create(store, dataclasses.replace(request(), response_format=fmt))
    assert run.response_format == fmt
    assert run.output is None
    plain = await create(store)
    assert plain.response_format is None


async def test_set_run_output_stores_the_answer_until_the_run_ends(store: SqlStore) -> None:
    fmt = ResponseFormat("sum", SCHEMA)
    run = await create(store, dataclasses.replace(request(), response_format=fmt))
    await store.apply([SetRunOutput(run.id, '{"answer":4}')])
    await finish(store, run.id)
    stored = await store.get_run(run.id)
    assert stored is not None
    assert (stored.status, stored.output) == (RunStatus.COMPLETED, '{"answer":4}')
    # An ended run's output is never changed again.
    await store.apply([SetRunOutput(run.id, '{"answer":5}')])
    again = await store.get_run(run.id)
    assert again is not None and again.output == '{"answer":4}'


async def test_an_output_in_the_step_that_ends_the_run_is_kept(store: SqlStore) -> None:
    fmt = ResponseFormat("a", {})
    run = await create(store, dataclasses.replace(request(), response_format=fmt))
    await store.apply([SetRunOutput(run.id, "[1,2]"), update(run.id, RunStatus.COMPLETED)])
    stored = await store.get_run(run.id)
    assert stored is not None and stored.output == "[1,2]"
