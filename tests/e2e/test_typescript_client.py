"""The TypeScript client (clients/typescript) against a real server (issue 26): its Node
tests (`node --test`) run with the server's URLs and tokens in their environment — every
RunService RPC over the Connect protocol, gRPC-Web and gRPC, streams whose connection is cut
by the server's side resuming with no gap and no duplicate, tokens and tenants, and a question
a running tool asks (the echo MCP server's `book`) answered through the client."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support import Server, start_server, stop_server
from tests.typescript_support import CLIENT, node_tests
from tests.typescript_support import typescript_client as typescript_client  # a fixture
from tests.web_support import ALICE, BOB, inspector_settings

# The MCP server whose `book` tool asks the user a question (test/server/questions.test.ts).
ECHO_SERVER = Path(__file__).parents[1] / "mcp_servers" / "echo_server.py"
ECHO_MCP = {"servers": {"echo": {"command": sys.executable, "args": [str(ECHO_SERVER)]}}}
# Which protocols the server tests cover; narrow it to debug one (e.g. "grpc").
PROTOCOLS = os.environ.get("BEHEST_TEST_PROTOCOLS", "connect,grpc-web,grpc")
# The server tests' suites, one per protocol (they skip without a server: none may).
SUITES = (
    "RunService over",
    "tokens and tenants over",
    "a stream cut by the server's side, over",
    "AgentService over",
    "a session's stream over",
    "a tool's question over",
)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    running = await start_server(inspector_settings(tmp_path, mcp=ECHO_MCP))
    try:
        yield running
    finally:
        await stop_server(running)


def urls(server: Server) -> dict[str, str]:
    web = server.app.web
    assert web is not None
    return {
        "BEHEST_TEST_HTTP_URL": f"http://127.0.0.1:{web.port}",
        "BEHEST_TEST_GRPC_URL": f"http://{server.address}",
        "BEHEST_TEST_TOKEN": ALICE,
        "BEHEST_TEST_OTHER_TOKEN": BOB,
        "BEHEST_TEST_PROTOCOLS": PROTOCOLS,
        "BEHEST_TEST_ECHO_MCP": "1",
    }


@pytest.mark.timeout(300)
async def test_the_typescript_client_against_a_real_server(
    typescript_client: Path, server: Server
) -> None:
    run = await node_tests(typescript_client, urls(server))
    assert run.code == 0, f"node --test failed:\n{run.output}"
    assert run.count("pass") == run.count("tests") > 0, run.output
    for protocol in PROTOCOLS.split(","):
        for suite in SUITES:
            passed = f"\N{HEAVY CHECK MARK} {suite} {protocol} ("
            assert passed in run.output, f"not passed: {suite} {protocol}\n{run.output}"


def test_the_clients_buf_is_the_makefiles() -> None:
    """The client's `npm run generate` uses the buf that `make proto-check` pins."""
    makefile = (CLIENT.parents[1] / "Makefile").read_text()
    pinned = next(
        line.split(":=")[1].strip()
        for line in makefile.splitlines()
        if line.startswith("BUF_VERSION")
    )
    package = json.loads((CLIENT / "package.json").read_text())
    assert package["devDependencies"]["@bufbuild/buf"] == pinned
