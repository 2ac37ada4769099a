"""Support for the tests of the TypeScript client (clients/typescript): its dependencies,
installed by `make test` (`npm ci`), and its build (`npm run build`: generated code from
proto/, tsc, the browser bundle), once per session."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import CI

CLIENT = Path(__file__).resolve().parents[1] / "clients" / "typescript"
BUNDLE = CLIENT / "dist" / "browser" / "behest.js"


def _missing() -> str:
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH"
    if not (CLIENT / "node_modules" / ".package-lock.json").exists():
        return f"{CLIENT}/node_modules is missing (make test runs `npm ci` there)"
    return ""


@pytest.fixture(scope="session")
def typescript_client() -> Path:
    """clients/typescript, built; a failure under CI (BEHEST_CI), else a skip, without Node or
    the client's dependencies."""
    missing = _missing()
    if missing:
        if CI:
            pytest.fail(f"the TypeScript client's tests need Node: {missing}", pytrace=False)
        pytest.skip(missing)
    built = subprocess.run(
        ["npm", "run", "--silent", "build"],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if built.returncode != 0:
        pytest.fail(f"npm run build failed:\n{built.stdout}\n{built.stderr}", pytrace=False)
    return CLIENT


@dataclass
class NodeRun:
    code: int
    output: str

    def count(self, what: str) -> int:
        """A count from the spec reporter's summary (e.g. "\N{INFORMATION SOURCE} pass 12")."""
        found = re.search(rf"^\N{{INFORMATION SOURCE}} {what} (\d+)$", self.output, re.MULTILINE)
        assert found, f"no `{what}` count in node's output:\n{self.output}"
        return int(found.group(1))


async def node_tests(client: Path, env: dict[str, str]) -> NodeRun:
    """`node --test` of the client's built tests (dist/test/**/*.test.js, in its directory,
    with the spec reporter), to its end."""
    files = sorted(
        str(p.relative_to(client)) for p in (client / "dist" / "test").rglob("*.test.js")
    )
    process = await asyncio.create_subprocess_exec(
        "node",
        "--test",
        "--test-reporter=spec",
        *files,
        cwd=client,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "NO_COLOR": "1", **env},
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), 240)
    except TimeoutError:
        process.kill()
        out, _ = await process.communicate()
        raise AssertionError(f"node --test did not finish in 240 s:\n{out.decode()}") from None
    assert process.returncode is not None
    return NodeRun(process.returncode, out.decode(errors="replace"))
