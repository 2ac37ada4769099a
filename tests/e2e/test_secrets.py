"""Secrets hygiene (issue 12): canaries planted in a real server's settings come out nowhere.

A `behest serve` child process, logging at DEBUG, gets a canary bearer token (its SHA-256 in
`[auth.tokens]`), a second tenant's token, a JWT key, canary provider API keys (one from an
environment variable, one from a file; OpenAI and Anthropic providers pointing at fakes whose
every error message echoes the key it was sent) and a TLS private key (the port speaks TLS
with it). The test drives runs that succeed, runs whose provider fails in every way the fakes
can, bad credentials (among them the canary token with one character changed and JWT-looking
garbage that carries it), every cheap error path, CancelRun, GetRun, WatchRunEvents, a kill -9
and a resume. Then it stops the server and greps for each canary, and for long pieces of each
(a changed or cut echo must not slip through), in every file of the data directory (read as
bytes), in everything the server wrote to stdout and stderr, and in every message, error
detail and metadata the clients received.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest.observability import telemetry
from tests.certs import CertificateAuthority
from tests.fakes import anthropic_fake as anthropic
from tests.fakes import openai_fake as openai
from tests.fakes.sse_server import Reply, Request, SSEServer
from tests.support import fast_settings, start_server, stop_server

pytestmark = pytest.mark.timeout(90)

TERMINAL = {"run_completed", "run_failed", "run_cancelled"}
OPENAI_MODEL = "gpt-test"
ANTHROPIC_MODEL = "claude-test"
KEY_ENV = "BEHEST_TEST_CANARY_OPENAI_KEY"


def _changed(secret: str, at: int) -> str:
    """`secret` with the character at `at` replaced by another of the same alphabet."""
    return secret[:at] + ("A" if secret[at] != "A" else "B") + secret[at + 1 :]


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


# --- the canaries ---------------------------------------------------------------------------


@dataclass
class Canaries:
    """Every secret planted in the settings or minted for clients, and what to grep for."""

    token: str = field(default_factory=lambda: "cnry-tok-" + secrets.token_urlsafe(33))
    other_token: str = field(default_factory=lambda: "cnry-two-" + secrets.token_urlsafe(33))
    env_key: str = field(default_factory=lambda: "sk-cnry-env-" + secrets.token_hex(24))
    file_key: str = field(default_factory=lambda: "sk-cnry-file-" + secrets.token_hex(24))
    anthropic_key: str = field(default_factory=lambda: "sk-ant-cnry-" + secrets.token_hex(24))
    tls_key_pem: bytes = b""
    tls_private_value: int = 0
    jwts: list[str] = field(default_factory=list)

    def needles(self) -> dict[str, bytes]:
        """Name → bytes that must appear nowhere: each secret and long pieces of it."""
        found: dict[str, bytes] = {}
        for name in ("token", "other_token", "env_key", "file_key", "anthropic_key"):
            found.update(_pieces(name, getattr(self, name)))
        for number, token in enumerate(self.jwts):
            signature = token.rsplit(".", 1)[1]
            found.update(_pieces(f"jwt {number} signature", signature))
            found[f"jwt {number}"] = token.encode()
        body = [
            line
            for line in self.tls_key_pem.decode().splitlines()
            if line and not line.startswith("-----")
        ]
        for number, line in enumerate(body):
            found[f"TLS key PEM line {number}"] = line.encode()
        found["TLS key PEM body"] = "".join(body).encode()
        found["TLS key PEM body with newlines"] = "\n".join(body).encode()
        der = base64.b64decode("".join(body))
        found["TLS key DER"] = der
        scalar = self.tls_private_value.to_bytes(32, "big")
        found["TLS private scalar"] = scalar
        found["TLS private scalar, hex"] = scalar.hex().encode()
        found["TLS private scalar, decimal"] = str(self.tls_private_value).encode()
        return found


def _pieces(name: str, secret: str) -> dict[str, bytes]:
    """The secret, and pieces long enough to mean it: cut ends, halves, the middle."""
    half = len(secret) // 2
    return {
        name: secret.encode(),
        f"{name} without its first 4 chars": secret[4:].encode(),
        f"{name} without its last 4 chars": secret[:-4].encode(),
        f"{name}, first half": secret[:half].encode(),
        f"{name}, second half": secret[half:].encode(),
        f"{name}, middle": secret[8:-8].encode(),
    }


LOGS = "server output"


def report(leaks: list[str]) -> str:
    shown = leaks[:24] + ([f"… and {len(leaks) - 24} more"] if len(leaks) > 24 else [])
    return "secrets leaked:\n" + "\n".join(shown)


def haystacks(data_dir: Path, output: bytes, received: bytes) -> dict[str, bytes]:
    """Every file under the data directory, the server's output, what clients received."""
    files = {
        f"data dir: {path.relative_to(data_dir)}": path.read_bytes()
        for path in sorted(data_dir.rglob("*"))
        if path.is_file()
    }
    assert any(name.endswith("behest.db") for name in files), list(files)
    return {**files, LOGS: output, "client received": received}


def grep(needles: dict[str, bytes], haystacks: dict[str, bytes]) -> list[str]:
    """Where each needle occurs, with some context; empty when nowhere."""
    found = []
    for name, needle in needles.items():
        for where, haystack in haystacks.items():
            at = haystack.find(needle)
            if at < 0:
                continue
            context = repr(haystack[max(0, at - 80) : at + len(needle) + 40])
            if where == LOGS:  # the start of the log line names its logger
                line = haystack.rfind(b"\n", 0, at) + 1
                context = f"{haystack[line : min(at, line + 120)]!r} … {context}"
            found.append(f"{name} in {where}: {context}")
    return found


# --- the fake providers: every error echoes the key ------------------------------------------


def _command(body: Any) -> str:
    """What the run's input asks the fake for: the word after "please"."""
    match = re.search(r"please (\w+)", json.dumps(body))
    return match.group(1) if match else "answer"


def _echo(key: str, header: str) -> str:
    """An error message that quotes the key three ways, as careless servers and proxies do."""
    return (
        f"Incorrect API key provided: {key}. You sent '{header}'. "
        f"Find your key ({key[:8]}…{key[-4:]}) at https://platform.example/account/api-keys."
    )


class EchoingOpenAI(SSEServer):
    """OpenAI's Chat Completions, answering what the run's input asks for; errors echo the key."""

    def __init__(self, *, echo_in_headers: bool = False) -> None:
        super().__init__(self._answer, path="/v1/chat/completions")
        self.echo_in_headers = echo_in_headers

    def _answer(self, request: Request) -> Reply:
        sent = request.headers.get("authorization", "")
        key = sent.removeprefix("Bearer ")
        echo = _echo(key, f"authorization: {sent}")
        body = request.json()
        if any(m.get("role") == "tool" for m in body["messages"]):
            return openai.text("It is 3.")
        headers = (
            {"www-authenticate": f'Bearer error="invalid_token", error_description="{key}"'}
            if self.echo_in_headers
            else {}
        )
        match _command(body):
            case "fail_auth":
                return openai.error(401, echo, code="invalid_api_key", headers=headers)
            case "fail_forbidden":
                return openai.error(403, echo, type="permission_error")
            case "fail_bad":
                return openai.error(400, echo, param="messages")
            case "fail_quota":
                return openai.error(429, echo, type="insufficient_quota", code="insufficient_quota")
            case "fail_limit":
                return openai.error(429, echo, type="rate_limit", headers={"retry-after": "0"})
            case "fail_down":
                return openai.error(500, echo, type="server_error")
            case "fail_overflow":
                return openai.error(400, echo, code="context_length_exceeded")
            case "fail_stream":
                return openai.stream_error("Partial ", echo)
            case "fail_cut":
                return openai.text("cut short here", cut_after=2)
            case "use_tool":
                return openai.tool_calls(("call_t1", "calculator", '{"expression": "1+2"}'))
            case "go_slowly":
                return openai.text("slow " * 60, delay_s=0.03)
        return openai.text("All is well.")


class EchoingAnthropic(anthropic.FakeAnthropic):
    """Anthropic's Messages API, the same way."""

    def __init__(self, *, echo_in_headers: bool = False) -> None:
        super().__init__()
        self._fallback = self._answer
        self.echo_in_headers = echo_in_headers

    def _answer(self, request: Request) -> Reply:
        # SDK 2.x sends the key as a bearer token; 1.x as x-api-key.
        sent = request.headers.get("authorization", "")
        key = request.headers.get("x-api-key") or sent.removeprefix("Bearer ")
        echo = _echo(key, f"authorization: {sent}")
        headers = {"x-echo": key} if self.echo_in_headers else {}
        match _command(request.json()):
            case "fail_auth":
                return anthropic.error_reply(401, "authentication_error", echo, headers)
            case "fail_forbidden":
                return anthropic.error_reply(403, "permission_error", echo)
            case "fail_bad":
                return anthropic.error_reply(400, "invalid_request_error", echo)
            case "fail_down":
                return anthropic.error_reply(529, "overloaded_error", echo)
        return anthropic.text_reply("All ", "is ", "well.")


# --- the server, a child process -----------------------------------------------------------


@dataclass
class Child:
    """`behest serve` in a child process; everything it writes is kept."""

    process: asyncio.subprocess.Process
    output: bytearray
    drains: list[asyncio.Task[None]]
    address: str = ""

    async def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.returncode is None:
            self.process.send_signal(sig)
            try:
                async with asyncio.timeout(20):
                    await self.process.wait()
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        await asyncio.gather(*self.drains, return_exceptions=True)


async def serve(config: Path, data_dir: Path, env: dict[str, str], output: bytearray) -> Child:
    """Start `behest serve --config` and wait for its "behest serving" line."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "behest",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(data_dir),
        "--config",
        str(config),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    grew = asyncio.Event()
    closed: list[asyncio.StreamReader] = []

    async def drain(stream: asyncio.StreamReader | None) -> None:
        assert stream is not None
        while chunk := await stream.read(1 << 16):
            output.extend(chunk)
            grew.set()
        closed.append(stream)
        grew.set()

    child = Child(process, output, [asyncio.create_task(drain(process.stderr))])
    child.drains.append(asyncio.create_task(drain(process.stdout)))
    start = len(output)
    try:
        async with asyncio.timeout(30):
            while not child.address:
                await grew.wait()
                grew.clear()
                for line in bytes(output[start:]).splitlines():
                    entry = json.loads(line) if line.startswith(b"{") else {}
                    if entry.get("msg") == "behest serving":
                        child.address = f"127.0.0.1:{entry['port']}"
                assert child.address or len(closed) < 2, "the server exited before serving:\n" + (
                    output[start:].decode(errors="replace")
                )
    except BaseException:
        await child.stop(signal.SIGKILL)
        raise
    return child


def child_env(**extra: str) -> dict[str, str]:
    """The test's environment without BEHEST_* settings, plus `extra`."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("BEHEST_")}, **extra}


def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def settings_file(
    directory: Path,
    canaries: Canaries,
    *,
    tls: Any,
    jwt_public: Path,
    key_file: Path,
    openai_url: str,
    anthropic_url: str,
) -> Path:
    def sha(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    models = f'[providers.{{name}}.models."{OPENAI_MODEL}"]\ncontext_window = 8000\n'
    text = f"""
log_level = "DEBUG"
log_format = "json"
shutdown_grace_s = 0
provider_backoff_initial_s = 0.01
provider_backoff_max_s = 0.02

[auth]
mode = "bearer"
[auth.tokens.canary]
sha256 = "{sha(canaries.token)}"
principal = "canary"
tenant = "acme"
[auth.tokens.tight]
sha256 = "{sha(canaries.other_token)}"
principal = "tight"
tenant = "tight"
[auth.jwt]
public_key_file = "{jwt_public}"
issuer = "https://id.example.test/"
audience = "behest"
tenant_claim = "org"

[tenants.tight]
max_streams = 1
creates_per_minute = 2
max_input_bytes = 200

[tls]
cert_file = "{tls.cert_file}"
key_file = "{tls.key_file}"

[providers.canary-env]
type = "openai"
base_url = "{openai_url}/v1"
api_key_env = "{KEY_ENV}"
max_attempts = 2
{models.format(name="canary-env")}
[providers.canary-file]
type = "openai"
base_url = "{openai_url}/v1"
api_key_file = "{key_file}"
max_attempts = 2
{models.format(name="canary-file")}
[providers.canary-dead]
type = "openai"
base_url = "http://127.0.0.1:{closed_port()}/v1"
api_key_env = "{KEY_ENV}"
max_attempts = 1

[providers.canary-anthropic]
type = "anthropic"
base_url = "{anthropic_url}"
api_key_file = "{key_file}.anthropic"
max_attempts = 2
"""
    path = directory / "behest.toml"
    path.write_text(text)
    (directory / f"{key_file.name}.anthropic").write_text(canaries.anthropic_key + "\n")
    return path


# --- clients that keep everything they receive ---------------------------------------------


@dataclass
class Received:
    """Every response message (serialized), error detail and metadata the clients got."""

    parts: list[bytes] = field(default_factory=list)
    codes: list[grpc.StatusCode] = field(default_factory=list)

    def keep_error(self, err: grpc.aio.AioRpcError) -> None:
        self.codes.append(err.code())
        self.parts += [
            err.code().name.encode(),
            (err.details() or "").encode(),
            (err.debug_error_string() or "").encode(),
            repr(err.initial_metadata()).encode(),
            repr(err.trailing_metadata()).encode(),
        ]

    async def unary(self, call: Any) -> Any:
        """Await a unary call; its reply (or None on an error), everything kept."""
        try:
            reply = await call
        except grpc.aio.AioRpcError as err:
            self.keep_error(err)
            return None
        self.codes.append(grpc.StatusCode.OK)
        self.parts.append(reply if isinstance(reply, bytes) else reply.SerializeToString())
        self.parts.append(repr(await call.initial_metadata()).encode())
        self.parts.append(repr(await call.trailing_metadata()).encode())
        return reply

    async def stream(self, call: Any, *, stop_after: int | None = None) -> list[Any]:
        """Read a server stream (to its end, or `stop_after` messages, then cancel it)."""
        got: list[Any] = []
        try:
            async for message in call:
                got.append(message)
                self.parts.append(message.SerializeToString())
                if stop_after is not None and len(got) >= stop_after:
                    call.cancel()
                    break
            else:
                self.codes.append(grpc.StatusCode.OK)
                self.parts.append(repr(await call.trailing_metadata()).encode())
        except grpc.aio.AioRpcError as err:
            self.keep_error(err)
        return got

    def blob(self) -> bytes:
        return b"\n".join(self.parts)


def kind(event: pb.AgentEvent) -> str:
    return event.WhichOneof("event") or ""


def request(input_: str, provider: str = "local", model: str = "echo", **fields: Any) -> Any:
    return pb.CreateRunRequest(
        provider=c.ProviderId(value=provider),
        model=c.ModelName(value=model),
        input=input_,
        **fields,
    )


def openai_request(input_: str, provider: str = "canary-env", **fields: Any) -> Any:
    return request(input_, provider, OPENAI_MODEL, **fields)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@dataclass
class Session:
    """Stubs over one TLS channel, the canary token's metadata, and what came back."""

    channel: grpc.aio.Channel
    md: tuple[tuple[str, str], ...]
    tight_md: tuple[tuple[str, str], ...]
    got: Received
    runs: rpc.RunServiceStub = field(init=False)
    compaction: rpc.CompactionServiceStub = field(init=False)
    snapshots: rpc.SnapshotServiceStub = field(init=False)

    def __post_init__(self) -> None:
        self.runs = rpc.RunServiceStub(self.channel)
        self.compaction = rpc.CompactionServiceStub(self.channel)
        self.snapshots = rpc.SnapshotServiceStub(self.channel)

    async def run(self, req: Any, md: Any = None) -> list[pb.AgentEvent]:
        return await self.got.stream(self.runs.CreateRunStream(req, metadata=md or self.md))

    async def replay(self, run_id: str, after: int = 0) -> list[pb.AgentEvent]:
        watch = pb.WatchRunEventsRequest(run_id=run_id, last_event_id=after)
        return await self.got.stream(self.runs.WatchRunEvents(watch, metadata=self.md))

    async def get(self, run_id: str) -> Any:
        return await self.got.unary(
            self.runs.GetRun(pb.GetRunRequest(run_id=run_id), metadata=self.md)
        )

    async def cancel(self, run_id: str) -> Any:
        return await self.got.unary(
            self.runs.CancelRun(pb.CancelRunRequest(run_id=run_id), metadata=self.md)
        )

    async def wait_for(self, run_id: str, wanted: str) -> int:
        """Watch a run until an event of kind `wanted`; its sequence."""
        watch = self.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id), metadata=self.md)
        async for event in watch:
            self.got.parts.append(event.SerializeToString())
            if kind(event) == wanted:
                watch.cancel()
                return int(event.sequence)
        raise AssertionError(f"run {run_id} never had a {wanted} event")


# --- the exercise --------------------------------------------------------------------------


def bad_credentials(canaries: Canaries, signing: ec.EllipticCurvePrivateKey) -> dict[str, Any]:
    """Metadata that must be refused, many of them close to the canary token."""
    token = canaries.token
    other_key = ec.generate_private_key(ec.SECP256R1())
    claims = {"sub": "mallory", "org": "acme", "iss": "https://id.example.test/", "aud": "behest"}
    expired = jwt.encode({**claims, "exp": int(time.time()) - 3600}, signing, algorithm="ES256")
    wrong_key = jwt.encode(
        {**claims, "sub": _changed(token, 5), "exp": int(time.time()) + 300},
        other_key,
        algorithm="ES256",
    )
    canaries.jwts += [expired, wrong_key]
    header = _b64({"alg": "ES256", "typ": "JWT"})
    return {
        "none": (),
        "random": bearer(secrets.token_urlsafe(32)),
        "one character changed": bearer(_changed(token, len(token) // 2 - 3)),
        "last character changed": bearer(_changed(token, len(token) - 1)),
        "cut short": bearer(token[:-1]),
        "one character more": bearer(token + "x"),
        "no scheme": (("authorization", token),),
        "basic": (("authorization", f"Basic {token}"),),
        "lower-case scheme, changed": (("authorization", f"bearer {_changed(token, 12)}"),),
        "two headers": (*bearer(token), *bearer(_changed(token, 20))),
        "jwt garbage carrying the token": bearer(f"{header}.{_b64({'sub': 'x'})}.{token}"),
        "jwt garbage, bad base64": bearer(f"eyJ!!.{_changed(token, 7)}.e30"),
        "jwt garbage, hs256": bearer(f"{_b64({'alg': 'HS256'})}.{_b64({'sub': token})}.c2ln"),
        "jwt of another key": bearer(wrong_key),
        "expired jwt": bearer(expired),
    }


async def exercise(s: Session, canaries: Canaries, signing: ec.EllipticCurvePrivateKey) -> None:
    """Everything a client can cheaply make the server do, with the canaries in play."""
    got = s.got
    # Refused credentials, on unary and streaming RPCs alike.
    for metadata in bad_credentials(canaries, signing).values():
        await got.unary(s.runs.ListRuns(pb.ListRunsRequest(), metadata=metadata))
        await got.unary(
            s.runs.GetRun(pb.GetRunRequest(run_id=str(uuid.uuid4())), metadata=metadata)
        )
        await got.stream(s.runs.CreateRunStream(request("refused"), metadata=metadata))
        await got.stream(
            s.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id="x"), metadata=metadata)
        )
    assert got.codes.count(grpc.StatusCode.UNAUTHENTICATED) == len(got.codes)

    # A valid JWT is a credential too.
    good_jwt = jwt.encode(
        {
            "sub": "carol",
            "org": "acme",
            "iss": "https://id.example.test/",
            "aud": "behest",
            "exp": int(time.time()) + 300,
        },
        signing,
        algorithm="ES256",
    )
    canaries.jwts.append(good_jwt)
    assert kind((await s.run(request("hello by JWT"), md=bearer(good_jwt)))[-1]) == "run_completed"

    # Runs that succeed: local, both OpenAI keys, a tool call, Anthropic.
    finished: list[str] = []
    for req in (
        request("hello with a canary token"),
        openai_request("please answer"),
        openai_request("please answer", provider="canary-file"),
        openai_request("please use_tool"),
        request("please answer", "canary-anthropic", ANTHROPIC_MODEL),
    ):
        events = await s.run(req)
        assert kind(events[-1]) == "run_completed", events[-1]
        finished.append(events[0].run_id)

    # Runs whose provider fails, every way the fakes can; each error echoes the key.
    failing = [
        openai_request(f"please {what}")
        for what in (
            "fail_auth",
            "fail_forbidden",
            "fail_bad",
            "fail_quota",
            "fail_limit",
            "fail_down",
            "fail_overflow",
            "fail_stream",
            "fail_cut",
        )
    ]
    failing += [
        openai_request("please fail_auth", provider="canary-file"),
        openai_request("please fail_down", provider="canary-file"),
        openai_request("please answer", provider="canary-dead"),
    ]
    failing += [
        request(f"please {what}", "canary-anthropic", ANTHROPIC_MODEL)
        for what in ("fail_auth", "fail_forbidden", "fail_bad", "fail_down")
    ]
    failed = []
    for req in failing:
        events = await s.run(req)
        assert kind(events[-1]) == "run_failed", (req.input, events[-1])
        failed.append(events[0].run_id)

    # GetRun, GetRunOutput and a replay of every run; ListRuns.
    for run_id in finished + failed:
        assert await s.get(run_id) is not None
        await got.unary(s.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=run_id), metadata=s.md))
        events = await s.replay(run_id)
        assert kind(events[-1]) in TERMINAL
        await s.replay(run_id, after=len(events) - 1)
    await got.unary(s.runs.ListRuns(pb.ListRunsRequest(), metadata=s.md))

    # CancelRun: a slow OpenAI call cut mid-stream, a slow local run, then the refusals.
    for req in (
        openai_request("please go_slowly"),
        request(json.dumps({"steps": [{"text": "slow " * 50, "delay_ms": 40}]}), model="script"),
    ):
        created = await got.unary(s.runs.CreateRun(req, metadata=s.md))
        await s.wait_for(created.run_id, "text_delta")
        assert await s.cancel(created.run_id) is not None
        assert got.codes[-1] == grpc.StatusCode.OK
        await s.cancel(created.run_id)  # again: OK, it ended cancelled
        assert got.codes[-1] == grpc.StatusCode.OK
        assert kind((await s.replay(created.run_id))[-1]) == "run_cancelled"
    await s.cancel(finished[0])
    assert got.codes[-1] == grpc.StatusCode.FAILED_PRECONDITION
    await s.cancel(str(uuid.uuid4()))
    assert got.codes[-1] == grpc.StatusCode.NOT_FOUND

    # A client that hangs up mid-stream (its run goes on).
    slow = json.dumps({"steps": [{"text": "on and on " * 10, "delay_ms": 5}]})
    await got.stream(
        s.runs.CreateRunStream(request(slow, model="script"), metadata=s.md), stop_after=3
    )

    # Refused requests.
    await refusals(s)

    # Health and reflection, which need no token.
    health = health_pb2_grpc.HealthStub(s.channel)
    await got.unary(health.Check(health_pb2.HealthCheckRequest()))
    reflect = reflection_pb2_grpc.ServerReflectionStub(s.channel)
    await got.stream(
        reflect.ServerReflectionInfo(
            iter(
                [
                    reflection_pb2.ServerReflectionRequest(list_services=""),
                    reflection_pb2.ServerReflectionRequest(
                        file_containing_symbol="agent.v1.RunService"
                    ),
                ]
            )
        )
    )


async def refusals(s: Session) -> None:
    """Requests the server refuses: bad fields, unknown ids and names, limits, bad bytes."""
    got, md = s.got, s.md
    run = s.runs
    calls: list[Awaitable[Any]] = [
        run.GetRun(pb.GetRunRequest(run_id=str(uuid.uuid4())), metadata=md),
        run.GetRun(pb.GetRunRequest(run_id="not a uuid"), metadata=md),
        run.CreateRun(request("x", provider="nowhere"), metadata=md),
        run.CreateRun(request("x", "canary-env", "gpt-nope"), metadata=md),
        run.CreateRun(request("x", metadata="{not json"), metadata=md),
        run.CreateRun(request("x", tools=["no_such_tool"]), metadata=md),
        run.CreateRun(request("x", tool_choice="no_such_tool"), metadata=md),
        run.CreateRun(request("x", session_id=str(uuid.uuid4())), metadata=md),
        run.CreateRun(request("x", model="script"), metadata=md),
        run.CreateRun(request(""), metadata=md),
        s.compaction.GetCompactionConfig(pb.GetCompactionConfigRequest(), metadata=md),
        s.compaction.UpdateCompactionConfig(
            pb.UpdateCompactionConfigRequest(model="no-such-model"), metadata=md
        ),
        s.compaction.GetCircuitBreaker(pb.GetCircuitBreakerRequest(), metadata=md),
        s.snapshots.ListSnapshots(pb.ListSnapshotsRequest(), metadata=md),
        s.snapshots.GetSnapshot(pb.GetSnapshotRequest(run_id=str(uuid.uuid4())), metadata=md),
        s.snapshots.DeleteSnapshot(pb.DeleteSnapshotRequest(run_id=str(uuid.uuid4())), metadata=md),
    ]
    for call in calls:
        await got.unary(call)
    # The same idempotency key with another request.
    key = str(uuid.uuid4())
    await got.unary(run.CreateRun(request("first", client_request_id=key), metadata=md))
    await got.unary(run.CreateRun(request("second", client_request_id=key), metadata=md))
    # Undecodable bytes, and a method that does not exist.
    raw = s.channel.unary_unary("/agent.v1.RunService/GetRun")
    await got.unary(raw(b"\xff\xff\xff\xff", metadata=md))
    await got.unary(s.channel.unary_unary("/agent.v1.RunService/Nope")(b"", metadata=md))
    # The tight tenant's limits: input size, one open stream, two creations a minute.
    tight = s.tight_md
    await got.unary(run.CreateRun(request("y" * 300), metadata=tight))
    assert got.codes[-1] == grpc.StatusCode.INVALID_ARGUMENT
    slow = json.dumps({"steps": [{"text": "slow " * 20, "delay_ms": 100}]})  # < 200 bytes
    created = await got.unary(run.CreateRun(request(slow, model="script"), metadata=tight))
    holding = run.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id), metadata=tight)
    await holding.read()
    await got.stream(
        run.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id), metadata=tight)
    )
    assert got.codes[-1] == grpc.StatusCode.RESOURCE_EXHAUSTED  # one stream at a time
    holding.cancel()
    for i in range(2):
        await got.unary(run.CreateRun(request(f"tight {i}"), metadata=tight))
    assert got.codes[-1] == grpc.StatusCode.RESOURCE_EXHAUSTED  # two creations a minute
    await got.unary(run.CancelRun(pb.CancelRunRequest(run_id=created.run_id), metadata=tight))
    seen = {code.name for code in got.codes}
    assert seen >= {"ALREADY_EXISTS", "INVALID_ARGUMENT", "NOT_FOUND", "UNIMPLEMENTED"}, seen


# --- the tests -----------------------------------------------------------------------------


async def test_canaries_in_the_settings_appear_nowhere(tmp_path: Path) -> None:
    canaries = Canaries()
    certs, data_dir = tmp_path / "certs", tmp_path / "data"
    certs.mkdir()
    ca = CertificateAuthority(certs)
    tls = ca.server()
    canaries.tls_key_pem = tls.key
    private = serialization.load_pem_private_key(tls.key, password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    canaries.tls_private_value = private.private_numbers().private_value
    signing = ec.generate_private_key(ec.SECP256R1())
    jwt_public = certs / "jwt-public.pem"
    jwt_public.write_bytes(
        signing.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    key_file = certs / "openai.key"
    key_file.write_text(canaries.file_key + "\n")
    env = child_env(**{KEY_ENV: canaries.env_key})
    output = bytearray()
    got = Received()
    credentials = grpc.ssl_channel_credentials(root_certificates=ca.pem.cert)

    async with EchoingOpenAI() as fake_openai, EchoingAnthropic() as fake_anthropic:
        config = settings_file(
            certs,
            canaries,
            tls=tls,
            jwt_public=jwt_public,
            key_file=key_file,
            openai_url=fake_openai.url,
            anthropic_url=fake_anthropic.url,
        )
        child = await serve(config, data_dir, env, output)
        try:
            async with grpc.aio.secure_channel(child.address, credentials) as channel:
                session = Session(
                    channel, bearer(canaries.token), bearer(canaries.other_token), got
                )
                await exercise(session, canaries, signing)
                # Clients that do not speak TLS to it (the token goes in plain text), or do
                # not trust its certificate.
                strangers = CertificateAuthority(certs, "another CA").pem.cert
                for other in (
                    grpc.aio.insecure_channel(child.address),
                    grpc.aio.secure_channel(child.address, grpc.ssl_channel_credentials(strangers)),
                ):
                    async with other:
                        listing = rpc.RunServiceStub(other).ListRuns(
                            pb.ListRunsRequest(), metadata=session.md, timeout=5
                        )
                        await got.unary(listing)
                        assert got.codes[-1] == grpc.StatusCode.UNAVAILABLE
                # A run cut by kill -9 in the middle of a model call...
                created = await got.unary(
                    session.runs.CreateRun(openai_request("please go_slowly"), metadata=session.md)
                )
                seen = await session.wait_for(created.run_id, "text_delta")
            await child.stop(signal.SIGKILL)
            # ...resumes at the next start, and ends.
            child = await serve(config, data_dir, env, output)
            async with grpc.aio.secure_channel(child.address, credentials) as channel:
                session = Session(
                    channel, bearer(canaries.token), bearer(canaries.other_token), got
                )
                rest = await session.replay(created.run_id, after=seen)
                assert kind(rest[-1]) == "run_completed"
                assert await session.get(created.run_id) is not None
        finally:
            await child.stop()
    assert child.process.returncode == 0, output[-2000:].decode(errors="replace")

    # The canaries were in play: the fakes were sent both keys, runs were created and failed
    # with the fakes' echoes, redacted; the log ran at DEBUG.
    sent = [r.headers.get("authorization", "") for r in fake_openai.requests]
    assert f"Bearer {canaries.env_key}" in sent and f"Bearer {canaries.file_key}" in sent
    assert any(canaries.anthropic_key in str(r.headers) for r in fake_anthropic.requests)
    found = haystacks(data_dir, bytes(output), got.blob())
    database = b"".join(v for k, v in found.items() if k.startswith("data dir"))
    assert created.run_id.encode() in database and b"[redacted]" in database
    assert b'"level": "debug"' in found[LOGS] and created.run_id.encode() in found[LOGS]
    assert b"authentication failed (HTTP 401)" in found["client received"]
    assert b"[redacted]" in found["client received"]

    (tmp_path / "server-output.log").write_bytes(output)  # to read when a leak is found
    leaks = grep(canaries.needles(), found)
    assert not leaks, report(leaks)


# --- leaks found by the canary test, each reproduced on its own (fixed) ---------------------


async def plain_server_leaks(
    tmp_path: Path, config: str, env: dict[str, str], requests: list[Any], secrets_: list[str]
) -> list[str]:
    """Start a plaintext server at DEBUG with `config`, stream each request's run (each must
    fail), stop it, and grep everything for each secret and its pieces."""
    path, data_dir = tmp_path / "behest.toml", tmp_path / "data"
    path.write_text('log_level = "DEBUG"\nlog_format = "json"\n' + config)
    output, got = bytearray(), Received()
    child = await serve(path, data_dir, child_env(**env), output)
    try:
        async with grpc.aio.insecure_channel(child.address) as channel:
            stub = rpc.RunServiceStub(channel)
            for req in requests:
                events = await got.stream(stub.CreateRunStream(req))
                assert kind(events[-1]) == "run_failed", (req.input, events[-1])
    finally:
        await child.stop()
    needles = {
        name: piece
        for n, secret in enumerate(secrets_)
        for name, piece in _pieces(f"secret {n}", secret).items()
    }
    return grep(needles, haystacks(data_dir, bytes(output), got.blob()))


async def test_a_key_echoed_in_a_response_header_stays_out_of_debug_logs(tmp_path: Path) -> None:
    openai_key, anthropic_key = (
        "sk-cnry-" + secrets.token_hex(24),
        "sk-ant-" + secrets.token_hex(24),
    )
    (tmp_path / "anthropic.key").write_text(anthropic_key)
    async with (
        EchoingOpenAI(echo_in_headers=True) as fake_openai,
        EchoingAnthropic(echo_in_headers=True) as fake_anthropic,
    ):
        config = f"""
[providers.canary-env]
type = "openai"
base_url = "{fake_openai.url}/v1"
api_key_env = "{KEY_ENV}"
[providers.canary-anthropic]
type = "anthropic"
base_url = "{fake_anthropic.url}"
api_key_file = "{tmp_path / "anthropic.key"}"
"""
        leaks = await plain_server_leaks(
            tmp_path,
            config,
            {KEY_ENV: openai_key},
            [
                openai_request("please fail_auth"),
                request("please fail_auth", "canary-anthropic", ANTHROPIC_MODEL),
            ],
            [openai_key, anthropic_key],
        )
    assert not leaks, report(leaks)


async def test_an_anthropic_key_the_sdk_finds_itself_is_redacted_too(tmp_path: Path) -> None:
    key = "sk-ant-cnry-" + secrets.token_hex(24)
    async with EchoingAnthropic() as fake:
        config = f"""
[providers.canary-anthropic]
type = "anthropic"
base_url = "{fake.url}"
max_attempts = 1
"""
        leaks = await plain_server_leaks(
            tmp_path,
            config,
            {"ANTHROPIC_API_KEY": key},
            [
                request(f"please {what}", "canary-anthropic", ANTHROPIC_MODEL)
                for what in ("fail_bad", "fail_forbidden")
            ],
            [key],
        )
        assert any(key in str(r.headers) for r in fake.requests)
    assert not leaks, report(leaks)


async def test_spans_carry_no_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    openai_key, anthropic_key = (
        "sk-cnry-" + secrets.token_hex(24),
        "sk-ant-" + secrets.token_hex(24),
    )
    monkeypatch.setenv(KEY_ENV, openai_key)
    (tmp_path / "anthropic.key").write_text(anthropic_key)
    telemetry.setup()
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        async with EchoingOpenAI() as fake_openai, EchoingAnthropic() as fake_anthropic:
            providers = {
                "canary-env": {
                    "type": "openai",
                    "base_url": f"{fake_openai.url}/v1",
                    "api_key_env": KEY_ENV,
                    "max_attempts": 2,
                },
                "canary-anthropic": {
                    "type": "anthropic",
                    "base_url": fake_anthropic.url,
                    "api_key_file": str(tmp_path / "anthropic.key"),
                    "max_attempts": 1,
                },
            }
            settings = fast_settings(tmp_path / "data").with_tables(
                {"providers": providers}, source="test"
            )
            server = await start_server(settings)
            try:
                requests = [
                    openai_request(f"please {what}")
                    for what in (
                        "fail_auth",
                        "fail_forbidden",
                        "fail_bad",
                        "fail_down",
                        "fail_stream",
                    )
                ]
                requests += [
                    request(f"please {what}", "canary-anthropic", ANTHROPIC_MODEL)
                    for what in ("fail_auth", "fail_forbidden", "fail_bad", "fail_down")
                ]
                for req in requests:
                    events = [e async for e in server.runs.CreateRunStream(req)]
                    assert kind(events[-1]) == "run_failed", events[-1]
            finally:
                await stop_server(server)
        spans = {
            f"span {span.name} ({span.context.span_id:016x})": span.to_json().encode()
            for span in exporter.get_finished_spans()
        }
    finally:
        exporter.shutdown()  # the processor stays on the global provider; it exports no more
    assert any(name.startswith("span behest.model_call") for name in spans)
    needles = {**_pieces("openai key", openai_key), **_pieces("anthropic key", anthropic_key)}
    leaks = grep(needles, spans)
    assert not leaks, report(leaks)


MISPLACED = {
    "token-as-its-sha256": (
        '[auth]\nmode = "bearer"\n[auth.tokens.ci]\nsha256 = "{secret}"\n'
        'principal = "ci"\ntenant = "acme"\n'
    ),
    "api-key-as-its-env-name": '[providers.openai]\ntype = "openai"\napi_key_env = "{secret}"\n',
    "tls-key-as-its-path": '[tls]\ncert_file = "{cert}"\nkey_file = """{secret}"""\n',
}


@pytest.mark.parametrize("mistake", sorted(MISPLACED))
def test_a_secret_put_in_the_wrong_setting_is_not_echoed(tmp_path: Path, mistake: str) -> None:
    """A secret pasted where its hash, name or path goes stops the start, without showing it."""
    ca = CertificateAuthority(tmp_path)
    tls = ca.server()
    secret = {
        "token-as-its-sha256": "cnry-tok-" + secrets.token_urlsafe(33),
        "api-key-as-its-env-name": "sk-cnry-" + secrets.token_hex(24),
        "tls-key-as-its-path": tls.key.decode().strip(),
    }[mistake]
    config = tmp_path / "behest.toml"
    config.write_text(MISPLACED[mistake].format(secret=secret, cert=tls.cert_file))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "behest",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(tmp_path / "data"),
            "--config",
            str(config),
        ],
        env=child_env(BEHEST_LOG_FORMAT="json"),
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode != 0, done.stderr.decode()
    needles = _pieces("secret", secret)
    if mistake == "tls-key-as-its-path":
        body = [line for line in secret.splitlines() if not line.startswith("-----")]
        needles = {f"PEM line {n}": line.encode() for n, line in enumerate(body)}
    leaks = grep(needles, {LOGS: done.stdout + done.stderr})
    assert not leaks, report(leaks)
