"""An MCP server (the SDK's MCPServer, over stdio) that misbehaves on request, for behest's
fault tests: JSON-RPC errors of any code, bytes on stdout that break the protocol, huge
answers.

python faulty_server.py             # stdio
python faulty_server.py --banner    # first prints a line that is not JSON-RPC, as some do
python faulty_server.py --http      # streamable HTTP on 127.0.0.1, JSON answers;
                                    # prints "PORT <n>" on stdout once listening
"""

from __future__ import annotations

import os
import socket
import sys

import anyio
from mcp import MCPError
from mcp.server.mcpserver import MCPServer

# The SDK points fd 1 at stderr while it serves (stray prints miss the wire); a copy made
# before that still reaches behest, which is what a broken server's output does.
WIRE = os.dup(1)

server = MCPServer("faulty")


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> str:
    return str(a + b)


@server.tool(description="Answer with a JSON-RPC error of this code and message.")
def error(code: int, message: str) -> str:
    raise MCPError(code=code, message=message)


@server.tool(description="Write a line on stdout that breaks the protocol, then answer.")
def garble(kind: str) -> str:
    line = b"\xff\xfe not UTF-8\n" if kind == "utf8" else b"this is not JSON-RPC\n"
    os.write(WIRE, line)
    return "garbled"


@server.tool(description="Answer with this many bytes of the letter x.")
def big(size: int) -> str:
    return "x" * size


@server.tool(description="Answer with this many NUL characters.")
def nuls(count: int) -> str:
    return "\x00" * count


@server.tool(description="This server's process id.")
def pid() -> str:
    return str(os.getpid())


async def _serve_http() -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    app = server.streamable_http_app(json_response=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    if "--http" in sys.argv:
        anyio.run(_serve_http)
    else:
        if "--banner" in sys.argv:
            os.write(WIRE, b"faulty MCP server 1.0 starting\n")
        server.run("stdio")
