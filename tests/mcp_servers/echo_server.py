"""A small MCP server for behest's tests, written with the SDK's MCPServer.

python echo_server.py            # stdio
python echo_server.py --http     # streamable HTTP on 127.0.0.1, ephemeral port;
                                 # prints "PORT <n>" on stdout once listening
python echo_server.py --http N   # the same on port N
"""

from __future__ import annotations

import json
import os
import socket
import sys

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    LoggingLevel,
    SamplingMessage,
    TextContent,
    ToolAnnotations,
)
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

server = MCPServer("echo")


@server.tool(
    description="Add two integers.",
    annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True),
)
def add(a: int, b: int) -> str:
    return str(a + b)


@server.tool(description="Upper-case a text.")
def shout(text: str) -> str:
    return text.upper() + "!"


@server.tool(description="Fail on purpose.")
def fail(reason: str) -> str:
    raise ToolError(reason)


@server.tool(description="Return a tiny image and a caption.", structured_output=False)
def picture() -> list[object]:
    return ["a red dot", Image(data=b"\x89PNG\r\n\x1a\n", format="png")]


@server.tool(description="Sleep for some seconds, then answer.")
async def slow(seconds: float) -> str:
    await anyio.sleep(seconds)
    return "done"


@server.tool(description="This server's process id.")
def pid() -> str:
    return str(os.getpid())


@server.tool(description="The behest keys of the request's _meta, as JSON.")
def meta(ctx: Context) -> str:
    received = dict(ctx.request_context.meta or {})
    return json.dumps({k: v for k, v in received.items() if k.startswith("io.behest/")})


class Stay(BaseModel):
    nights: int = Field(ge=1, le=30, description="How many nights")
    breakfast: bool = Field(default=False, description="With breakfast")


def _stay_question(city: str) -> ElicitRequest:
    schema = Stay.model_json_schema()
    return ElicitRequest(
        params=ElicitRequestFormParams(
            message=f"How many nights in {city}?",
            requested_schema={
                "type": "object",
                "properties": schema["properties"],
                "required": ["nights"],
            },
        )
    )


@server.tool(
    description="Book a hotel in a city: asks the user how many nights (an elicitation).",
    annotations=ToolAnnotations(idempotent_hint=True),
)
async def book(city: str, ctx: Context) -> str | InputRequiredResult:
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:  # asked in the result (SEP-2322)
        responses = ctx.input_responses or {}
        reply = responses.get("stay")
        if not isinstance(reply, ElicitResult):
            return InputRequiredResult(input_requests={"stay": _stay_question(city)})
        action, content = reply.action, reply.content or {}
    else:  # asked on the back-channel
        answer = await ctx.elicit(f"How many nights in {city}?", Stay)
        action, content = answer.action, answer.data.model_dump() if answer.data else {}
    if action != "accept":
        return f"not booked: the user chose {action}"
    extra = " with breakfast" if content.get("breakfast") else ""
    return f"booked {content['nights']} night(s) in {city}{extra} (server pid {os.getpid()})"


@server.tool(description="Reserve a hotel in a city (not idempotent): asks how many nights.")
async def reserve(city: str, ctx: Context) -> str | InputRequiredResult:
    return await book(city, ctx)


@server.tool(description="Count to `steps`, reporting each step as progress at once.")
async def count(steps: int, ctx: Context) -> str:
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
    return f"counted to {steps}"


@server.tool(description="Log `text` at `level` (an MCP log message), then answer.")
async def log(level: LoggingLevel, text: str, ctx: Context) -> str:
    await ctx.log(level, text, logger_name="echo.tests")
    await ctx.log("info", {"said": text, "at": level}, logger_name="echo.tests")
    return f"logged at {level}"


def _sampling(prompt: str, max_tokens: int) -> CreateMessageRequest:
    message = SamplingMessage(role="user", content=TextContent(type="text", text=prompt))
    return CreateMessageRequest(
        params=CreateMessageRequestParams(
            messages=[message], system_prompt="Answer briefly.", max_tokens=max_tokens
        )
    )


@server.tool(description="Ask the client's model `prompt` (MCP sampling); say what it answered.")
async def ask_model(prompt: str, ctx: Context, max_tokens: int = 64) -> str | InputRequiredResult:
    request = _sampling(prompt, max_tokens)
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:  # asked in the result (SEP-2322)
        reply = (ctx.input_responses or {}).get("answer")
        if not isinstance(reply, CreateMessageResult):
            return InputRequiredResult(input_requests={"answer": request})
    else:  # asked on the back-channel
        params = request.params
        reply = await ctx.session.create_message(
            params.messages, max_tokens=params.max_tokens, system_prompt=params.system_prompt
        )
    text = reply.content.text if isinstance(reply.content, TextContent) else "?"
    return f"the model said {text!r} ({reply.model}, {reply.stop_reason})"


@server.tool(description="Kill this server process at once.")
def exit_now() -> str:
    os._exit(3)


async def _serve_http() -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    given = sys.argv[sys.argv.index("--http") + 1 :]
    sock.bind(("127.0.0.1", int(given[0]) if given else 0))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    if "--http" in sys.argv:
        anyio.run(_serve_http)
    else:
        # A line on stderr, as servers print: behest logs it as an entry naming the server.
        print(f"echo MCP server (pid {os.getpid()}) serving over stdio", file=sys.stderr)
        server.run("stdio")
