"""Structured output (issue 17, item 2): a run whose final answer must be JSON that validates
against a JSON Schema, through a real server with the `script` model, on SQLite and
PostgreSQL. An answer that does not fit gets exactly one repair call, then the run fails."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.json_format import MessageToDict

from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest._proto.agent.v1 import session_pb2 as pb_session
from behest._proto.agent.v1 import session_pb2_grpc as session_rpc
from tests.support import (
    Server,
    collect,
    create_request,
    kind,
    script,
    server_process,
)

SUM = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
WORDS = {"type": "array", "items": {"type": "string"}, "minItems": 1}


def structured(
    *steps: dict[str, object], schema: Any = SUM, name: str = "sum", **fields: Any
) -> pb.CreateRunRequest:
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return create_request(
        script(*steps),
        model="script",
        response_format=pb.ResponseFormat(name=name, json_schema=text),
        **fields,
    )


async def output_of(server: Server, run_id: str) -> pb.RunOutput:
    return (await server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=run_id))).output


async def test_a_valid_answer_is_returned_parsed_and_the_record_echoes_the_format(
    served: Server,
) -> None:
    events = await collect(served.runs.CreateRunStream(structured({"text": '{"answer": 4}'})))
    assert kind(events[-1]) == "run_completed"
    assert "output_rejected" not in [kind(e) for e in events]
    output = await output_of(served, events[0].run_id)
    assert output.HasField("structured_output")
    assert MessageToDict(output.structured_output) == {"answer": 4}
    assert [m.content[0].text.text for m in output.messages] == ['{"answer": 4}']
    record = (await served.runs.GetRun(pb.GetRunRequest(run_id=events[0].run_id))).run
    assert record.response_format.name == "sum"
    assert json.loads(record.response_format.json_schema) == SUM


async def test_an_array_answer_is_returned_as_a_list(served: Server) -> None:
    events = await collect(
        served.runs.CreateRunStream(structured({"text": '["sea", "salt"]'}, schema=WORDS))
    )
    assert kind(events[-1]) == "run_completed"
    output = await output_of(served, events[0].run_id)
    assert MessageToDict(output.structured_output) == ["sea", "salt"]


async def test_an_invalid_answer_is_repaired_with_exactly_one_more_model_call(
    served: Server,
) -> None:
    events = await collect(
        served.runs.CreateRunStream(
            structured({"text": "the answer is four"}, {"text": '{"answer": 4}'})
        )
    )
    kinds = [kind(e) for e in events]
    assert kinds[-1] == "run_completed"
    assert kinds.count("model_started") == 2
    assert [e.model_started.iteration for e in events if kind(e) == "model_started"] == [1, 2]
    [rejected] = [e.output_rejected for e in events if kind(e) == "output_rejected"]
    assert rejected.repairing
    assert "not valid JSON" in rejected.error
    # The repair is asked after the first answer is committed, before the second call.
    assert kinds.index("assistant_message_committed") < kinds.index("output_rejected")
    assert kinds.index("output_rejected") < len(kinds) - 1 - kinds[::-1].index("model_started")
    assert events[-1].run_completed.iterations == 2
    run_id = events[0].run_id
    output = await output_of(served, run_id)
    assert MessageToDict(output.structured_output) == {"answer": 4}
    assert output.iterations == 2
    # The model was told what was wrong, in a user message of the session.
    record = (await served.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    sessions = session_rpc.SessionServiceStub(served.channel)
    page = await sessions.ListSessionMessages(
        pb_session.ListSessionMessagesRequest(session_id=record.session_id)
    )
    roles = [m.role for m in page.messages]
    assert roles == ["user", "assistant", "user", "assistant"]
    repair = page.messages[2].content[0].text.text
    assert "not valid JSON" in repair and "sum" in repair


async def test_an_answer_invalid_twice_fails_the_run_naming_the_problem(served: Server) -> None:
    events = await collect(
        served.runs.CreateRunStream(
            structured({"text": '{"answer": "four"}'}, {"text": '{"answer": "still four"}'})
        )
    )
    kinds = [kind(e) for e in events]
    assert kinds[-1] == "run_failed"
    assert kinds.count("model_started") == 2
    rejected = [e.output_rejected for e in events if kind(e) == "output_rejected"]
    assert [r.repairing for r in rejected] == [True, False]
    failed = events[-1].run_failed
    assert failed.code == pb.FAILURE_CODE_INVALID_OUTPUT
    assert "response_format 'sum'" in failed.error
    assert "/answer" in failed.error and "'still four' is not of type 'integer'" in failed.error
    record = (await served.runs.GetRun(pb.GetRunRequest(run_id=events[0].run_id))).run
    assert record.failure_code == pb.FAILURE_CODE_INVALID_OUTPUT
    output = await output_of(served, events[0].run_id)
    assert not output.HasField("structured_output")


async def test_the_repair_counts_against_max_iterations(served: Server) -> None:
    events = await collect(
        served.runs.CreateRunStream(
            structured({"text": "nope"}, {"text": '{"answer": 4}'}, max_iterations=1)
        )
    )
    assert kind(events[-1]) == "run_failed"
    assert events[-1].run_failed.code == pb.FAILURE_CODE_MAX_ITERATIONS
    assert events[-1].run_failed.error == (
        "max iterations reached: the final answer did not fit response_format 'sum' "
        "and no iteration of 1 is left to repair it"
    )


async def test_tool_calls_come_first_and_the_final_answer_is_checked(server: Server) -> None:
    calc = {"name": "calculator", "arguments": {"expression": "2+2"}}
    events = await collect(
        server.runs.CreateRunStream(structured({"tool_calls": [calc]}, {"text": '{"answer": 4}'}))
    )
    assert kind(events[-1]) == "run_completed"
    assert "tool_execution_finished" in [kind(e) for e in events]
    output = await output_of(server, events[0].run_id)
    assert MessageToDict(output.structured_output) == {"answer": 4}


async def test_a_run_without_a_format_has_no_structured_output(server: Server) -> None:
    events = await collect(server.runs.CreateRunStream(create_request('{"answer": 4}')))
    output = await output_of(server, events[0].run_id)
    assert not output.HasField("structured_output")
    record = (await server.runs.GetRun(pb.GetRunRequest(run_id=events[0].run_id))).run
    assert not record.HasField("response_format")


async def test_an_empty_name_is_final_answer(server: Server) -> None:
    created = await server.runs.CreateRun(structured({"text": "{}"}, schema={}, name=""))
    record = (await server.runs.GetRun(pb.GetRunRequest(run_id=created.run_id))).run
    assert record.response_format.name == "final_answer"


BAD_FORMATS = [
    ({"schema": ""}, "response_format.json_schema is required"),
    ({"schema": "{not json"}, "response_format.json_schema: the JSON text is not valid JSON"),
    ({"schema": "[1, 2]"}, "response_format.json_schema must be a JSON Schema object"),
    ({"schema": {"type": "integr"}}, "response_format.json_schema is not a valid JSON Schema"),
    ({"schema": {"minItems": -1}}, "response_format.json_schema is not a valid JSON Schema"),
    ({"schema": "[" * 100 + "]" * 100}, "response_format.json_schema: the JSON text is nested"),
    ({"schema": "x" * 70_000}, "response_format.json_schema: the JSON text is 70000 bytes"),
    ({"schema": {"$ref": "https://example.com/s.json"}}, "response_format.json_schema may only"),
    ({"name": "has space"}, "response_format.name must be 1 to 64 letters"),
    ({"name": "n" * 65}, "response_format.name must be 1 to 64 letters"),
    ({"name": "calculator"}, "response_format.name 'calculator' is the name of a tool"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_FORMATS)
async def test_a_bad_response_format_is_invalid_argument_naming_the_field(
    server: Server, bad: dict[str, Any], message: str
) -> None:
    request = structured({"text": "{}"}, schema=bad.get("schema", SUM), name=bad.get("name", "ok"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.runs.CreateRun(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (err.value.details() or "")


async def test_a_crash_in_the_middle_of_the_repair_resumes_it_and_never_repairs_twice(
    tmp_path: Path,
) -> None:
    # Call 1 answers in words; call 2 (the repair) is cut by a kill -9; after the restart the
    # repair is asked again as call 3. The repair already asked counts: a run whose third
    # answer is invalid too fails, and is not repaired a second time.
    slow = {"text": " ".join(["wait"] * 200), "delay_ms": 20}
    cases = {
        "repaired": structured({"text": "four"}, slow, {"text": '{"answer": 4}'}),
        "invalid again": structured({"text": "four"}, slow, {"text": "still four"}),
    }
    cut: dict[str, list[pb.AgentEvent]] = {}
    async with server_process(tmp_path) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            for name, request in cases.items():
                events: list[pb.AgentEvent] = []
                async for event in stub.CreateRunStream(request):
                    events.append(event)
                    if kind(event) == "text_delta" and events[-2].HasField("model_started"):
                        if events[-2].model_started.iteration == 2:
                            break  # the repair call has begun streaming
                cut[name] = events
            process.send_signal(signal.SIGKILL)
            await process.wait()
    async with server_process(tmp_path) as (_, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            ended = {}
            for name, before in cut.items():
                run_id = before[0].run_id
                events = await collect(stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))
                assert events[: len(before)] == before
                kinds = [kind(e) for e in events]
                assert sum(k in ("run_completed", "run_failed") for k in kinds) == 1
                assert kinds.count("model_started") == 3
                rejected = [
                    e.output_rejected.repairing for e in events if kind(e) == "output_rejected"
                ]
                output = (await stub.GetRunOutput(pb.GetRunOutputRequest(run_id=run_id))).output
                ended[name] = (kinds[-1], rejected, MessageToDict(output).get("structuredOutput"))
    assert ended == {
        "repaired": ("run_completed", [True], {"answer": 4}),
        "invalid again": ("run_failed", [True, False], None),
    }
