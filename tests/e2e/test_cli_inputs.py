"""`behest run` with what a run is given beside its text: --attach and --image-url (content
parts), --response-format (structured output), --reasoning-effort / --thinking-budget."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from behest._proto.agent.v1 import run_pb2 as pb
from tests.support import Server, behest, script

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


async def test_attachments_and_image_urls_reach_the_model(server: Server, tmp_path: Path) -> None:
    (tmp_path / "dot.png").write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("hello")
    result = await behest(
        "run",
        script({"say": "content"}),
        "--model",
        "script",
        "--attach",
        str(tmp_path / "dot.png"),
        "--attach",
        str(tmp_path / "notes.txt"),
        "--image-url",
        "https://example.com/cat.jpg",
        "--server",
        server.address,
    )
    assert result.code == 0, result.err
    *answer, status = result.out.splitlines()
    assert status.endswith("completed (stop, 1 iteration)")
    assert answer == [
        f"image image/png {sha(PNG)} ({len(PNG)} bytes)",
        f"file text/plain notes.txt {sha(b'hello')} (5 bytes)",
        "image ? https://example.com/cat.jpg",
    ]


async def test_a_response_format_and_a_reasoning_setting_go_with_the_run(
    server: Server, tmp_path: Path
) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    steps = script({"reasoning": "two and two", "text": '{"answer": 4}'})
    result = await behest(
        "run",
        steps,
        "--model",
        "script",
        "--response-format",
        f"@{tmp_path / 'schema.json'}",
        "--response-format-name",
        "sum",
        "--reasoning-effort",
        "low",
        "--server",
        server.address,
    )
    assert result.code == 0, result.err
    assert json.loads(result.out.splitlines()[0]) == {"answer": 4}
    assert "thinking: two and two" in result.err
    [run] = (await server.runs.ListRuns(pb.ListRunsRequest())).runs
    assert run.response_format.name == "sum"
    assert json.loads(run.response_format.json_schema) == schema
    assert run.reasoning == pb.Reasoning(effort="low")


async def test_bad_inputs_exit_2_saying_what_to_fix(server: Server, tmp_path: Path) -> None:
    (tmp_path / "data.bin").write_bytes(b"\x00")
    cases = [
        (["--attach", str(tmp_path / "data.bin")], "--attach: data.bin: attach images, PDFs"),
        (["--attach", str(tmp_path / "missing.png")], "--attach: [Errno 2]"),
        (["--response-format", "{not json"], "--response-format: the JSON text is not valid"),
        (["--image-url", "http://example.com/a.png"], "content[0].image.url must be an https"),
    ]
    for extra, says in cases:
        result = await behest("run", "hi", *extra, "--server", server.address)
        assert result.code == 2, (extra, result.err)
        assert says in result.err, result.err
