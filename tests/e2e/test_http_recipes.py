"""Runs the curl recipes of docs/HTTP.md for real, against a test server with bearer tokens.

Each ```sh block that calls curl is run by bash as written, with the doc's address replaced by
the test server's HTTP listener, `$BEHEST_TOKEN` set to a real token, and `RUN_ID` replaced by
a finished run of that token's tenant. A recipe passes when curl exits 0 and what it printed
is no error: no Connect error body, no HTTP status line of a refusal."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from tests.http_support import Connect
from tests.support import start_server, stop_server
from tests.web_support import ALICE, inspector_settings

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "HTTP.md"
DOC_BASE = "http://127.0.0.1:8080"


def recipes() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.S)
    return [block for block in blocks if "curl " in block]


def test_the_doc_has_curl_recipes() -> None:
    assert len(recipes()) >= 1


@pytest.mark.parametrize("recipe", recipes(), ids=lambda r: r.split("\n")[0][:60])
async def test_a_curl_recipe_of_the_doc_works(recipe: str, tmp_path: Path) -> None:
    server = await start_server(inspector_settings(tmp_path))
    try:
        assert server.app.web is not None
        base = f"http://127.0.0.1:{server.app.web.port}"
        alice = Connect(base, ALICE)
        created = await alice.ok(
            "RunService/CreateRun",
            {"provider": {"value": "local"}, "model": {"value": "echo"}, "input": "recipes"},
        )
        await alice.stream("RunService/WatchRunEvents", {"runId": created["runId"]})
        script = recipe.replace(DOC_BASE, base).replace("RUN_ID", created["runId"])
        process = await asyncio.create_subprocess_exec(
            "bash",
            "-euo",
            "pipefail",
            "-c",
            script,
            env={"BEHEST_TOKEN": ALICE, "PATH": "/usr/bin:/bin"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 30)
    finally:
        await stop_server(server)
    printed = out.decode()
    assert process.returncode == 0, (printed, err.decode())
    assert printed.strip(), "the recipe printed nothing"
    for answer in _json_objects(printed):
        assert "code" not in answer, answer


def _json_objects(printed: str) -> list[dict[str, object]]:
    """The JSON objects curl printed one after another (each answer ends without a newline)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := printed.find("{", at)) >= 0:
        value, end = decoder.raw_decode(printed, at)
        found.append(value)
        at = end
    return found
