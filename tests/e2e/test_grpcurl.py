"""Runs the recipes of docs/GRPCURL.md for real, with grpcurl, against a test server.

Each ```sh block of the doc is one grpcurl command. A recipe is known by its target (what
follows the address: `list`, `describe X`, or `pkg.Service/Method`, plus the `service` of a
health check and the names of the waiting options a CreateRun sets). Each test declares the
recipes it runs with `@runs(...)`; a test checks that the declared recipes are exactly the
doc's, and a fixture checks that each test ran what it declared, so the doc and these tests
cannot drift apart. The address is replaced by the test server's, `RUN_ID` by a run the test
made, `SESSION_ID` by a session it made (the recipe's `session_id` given to `run`), `CALL_ID` by
one of its waiting calls, `ELICITATION_ID` by one of its questions, and `input` by a unique
one (except where the doc's script is the point).

Recipes with `-cacert ca.crt` instead of `-plaintext` run against a TLS server started for
them (certificates made by tests/certs.py): with `-cert client.crt -key client.key` one that
wants client certificates (auth mode mtls), else one that wants bearer tokens, whose `TOKEN`
the test made. Their keys start with `tls` (and `token` when they send one) or `mtls`.

grpcurl runs as an asyncio subprocess: the server shares the test's event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import secrets
import shlex
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from google.protobuf.json_format import MessageToDict

from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as run_grpc
from behest._proto.agent.v1 import session_pb2 as spb
from behest._proto.agent.v1 import session_pb2_grpc as session_rpc
from behest.domain.callers import Caller
from behest.errors import Unauthenticated
from tests.certs import CertificateAuthority, Pem
from tests.e2e.test_elicitation import BOOK, echo_servers
from tests.e2e.test_outcome_unknown import cut_unsafe_call, until_unknown
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    start_server,
    stop_server,
)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "GRPCURL.md"
README = ROOT / "README.md"
DOC_ADDRESS = "127.0.0.1:50051"
GRPCURL = Path(sys.executable).parent / "grpcurl"
TIMEOUT_S = 30.0

TERMINAL = {"run_completed", "run_failed", "run_cancelled"}
ENVELOPE = {"sequence", "run_id", "timestamp", "trace_id", "span_id"}
AGENT_SERVICES = (
    "agent.v1.RunService",
    "agent.v1.CompactionService",
    "agent.v1.SnapshotService",
    "agent.v1.UsageService",
    "agent.v1.SessionService",
    "agent.v1.ToolService",
    "agent.v1.ProviderService",
    "agent.v1.ToolExecutionService",
    "agent.v1.WorkerService",
    "agent.v1.AgentService",
)
RUN_RPCS = (
    "CreateRun",
    "CreateRunStream",
    "ListRuns",
    "GetRun",
    "GetRunOutput",
    "CancelRun",
    "WatchRunEvents",
    "SubmitApprovals",
    "SubmitToolResults",
    "SubmitElicitationAnswers",
    "ListPendingCalls",
    "ListRunEvents",
    "CreateStreamTicket",
)
# CreateRun fields that make a run wait (or, response_format, want a structured answer;
# reasoning, a reasoning model's setting; content, images and files; agent, a stored agent's
# run), which name their recipes.
WAIT_OPTIONS = (
    "agent",
    "approval_required_tools",
    "client_tools",
    "response_format",
    "reasoning",
    "content",
)
WAIT_EVENTS = (
    "approval_requested",
    "approval_resolved",
    "client_tool_requested",
    "client_tool_answered",
    "elicitation_requested",
    "elicitation_answered",
)

CALCULATOR = {"name": "calculator", "arguments": {"expression": "2+2"}}

# FailedPrecondition, NotFound, OutOfRange: grpcurl exits with 64 + the gRPC code.
EXIT_FAILED_PRECONDITION = 64 + 9
EXIT_NOT_FOUND = 64 + 5
EXIT_OUT_OF_RANGE = 64 + 11
EXIT_INVALID_ARGUMENT = 64 + 3


# --- the doc's recipes ------------------------------------------------------------------------


# What the TLS recipes name: the CA's certificate, a client's, its key, and a bearer token.
DOC_CA, DOC_CLIENT_CERT, DOC_CLIENT_KEY = "ca.crt", "client.crt", "client.key"
DOC_AUTHORIZATION = "authorization: Bearer TOKEN"


@dataclass(frozen=True)
class Recipe:
    key: str
    argv: tuple[str, ...]
    data: dict[str, Any] | None
    source: str
    # "plaintext", or the TLS server it needs: "tls" (bearer tokens) or "mtls".
    security: str = "plaintext"


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def parse_recipe(block: str) -> Recipe:
    lines = [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    assert len(lines) == 1, f"expected exactly one command in the block:\n{block}"
    argv = shlex.split(lines[0])
    assert argv[0] == "grpcurl", f"not a grpcurl command: {lines[0]}"
    security, prefix = tls_of(argv, lines[0])
    for flag in ("-proto", "-protoset", "-import-path"):
        assert not any(a == flag or a.startswith(flag + "=") for a in argv), lines[0]
    assert argv.count(DOC_ADDRESS) == 1, f"expected the address {DOC_ADDRESS}: {lines[0]}"
    data = None
    if "-d" in argv:
        data = json.loads(argv[argv.index("-d") + 1])
        assert isinstance(data, dict)
    target = argv[argv.index(DOC_ADDRESS) + 1 :]
    assert target, f"nothing after the address: {lines[0]}"
    key = " ".join([*prefix, *target])
    if data and "service" in data:
        key += f" {data['service']}"
    # Recipes of one RPC told apart by the waiting options they show.
    key += "".join(f" {name}" for name in WAIT_OPTIONS if data and name in data)
    return Recipe(key=key, argv=tuple(argv), data=data, source=lines[0], security=security)


def tls_of(argv: list[str], source: str) -> tuple[str, list[str]]:
    """How a recipe connects, and the words its key starts with: plaintext (none), `-cacert
    ca.crt` (tls), and `-cert client.crt -key client.key` (mtls); `token` if it sends TOKEN."""
    if "-cacert" not in argv:
        assert "-plaintext" in argv, f"neither plaintext nor -cacert: {source}"
        assert not {"-cert", "-key", "-H"} & set(argv), f"credentials without TLS: {source}"
        return "plaintext", []
    assert "-plaintext" not in argv, source
    assert argv[argv.index("-cacert") + 1] == DOC_CA, f"-cacert {DOC_CA} expected: {source}"
    prefix = ["tls"]
    if "-cert" in argv or "-key" in argv:
        assert argv[argv.index("-cert") + 1] == DOC_CLIENT_CERT, source
        assert argv[argv.index("-key") + 1] == DOC_CLIENT_KEY, source
        prefix = ["mtls"]
    if "-H" in argv:
        assert argv[argv.index("-H") + 1] == DOC_AUTHORIZATION, source
        assert prefix == ["tls"], f"a token to the mtls server: {source}"
        prefix.append("token")
    return prefix[0], prefix


def doc_recipes() -> dict[str, Recipe]:
    recipes = [parse_recipe(block) for block in sh_blocks(DOC.read_text())]
    keys = [r.key for r in recipes]
    assert len(keys) == len(set(keys)), f"recipes with the same target: {keys}"
    return {r.key: r for r in recipes}


# Recipe keys declared by each test function, filled by @runs at import.
DECLARED: dict[str, tuple[str, ...]] = {}
F = TypeVar("F", bound=Callable[..., Any])


def runs(*keys: str) -> Callable[[F], F]:
    def mark(fn: F) -> F:
        DECLARED[fn.__name__] = keys
        return fn

    return mark


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """The one JSON document on stdout."""
        docs = self.documents()
        assert len(docs) == 1, self.stdout
        return docs[0]

    def documents(self) -> list[Any]:
        """The JSON documents on stdout, in order (a stream prints one per message)."""
        decoder = json.JSONDecoder()
        text, pos = self.stdout, 0
        out: list[Any] = []
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos == len(text):
                return out
            value, pos = decoder.raw_decode(text, pos)
            out.append(value)

    def error(self) -> tuple[str, str]:
        """(Code, Message) of grpcurl's error report on stderr."""
        code = re.search(r"^\s*Code: (\S+)", self.stderr, flags=re.MULTILINE)
        message = re.search(r"^\s*Message: (.*)$", self.stderr, flags=re.MULTILINE)
        assert code and message, self.stderr
        return code.group(1), message.group(1)


class TlsServers:
    """The TLS servers of the `-cacert` recipes, started when a test first needs one: "tls"
    wants bearer tokens (`tokens`: principal → (tenant, token)), "mtls" client certificates."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir()
        self.ca = CertificateAuthority(directory)
        self.server_pem = self.ca.server()
        self.client_pem = self.ca.client("client", principal="erin", tenant="acme")
        self.tokens = {
            "alice": ("acme", secrets.token_urlsafe(32)),
            "bob": ("globex", secrets.token_urlsafe(32)),
        }
        self.running: dict[str, Server] = {}

    async def get(self, security: str) -> Server:
        if security not in self.running:
            tls = {"cert_file": str(self.server_pem.cert_file)}
            tls["key_file"] = str(self.server_pem.key_file)
            if security == "mtls":
                auth: dict[str, Any] = {"mode": "mtls"}
                tls["client_ca_file"] = str(self.ca.pem.cert_file)
            else:
                auth = {"mode": "bearer", "tokens": self.token_tables()}
            settings = fast_settings(self.directory / security)
            tables = {"auth": auth, "tls": tls}
            self.running[security] = await start_server(settings.with_tables(tables, source="t"))
        return self.running[security]

    def token_tables(self) -> dict[str, Any]:
        return {
            name: {
                "sha256": hashlib.sha256(token.encode()).hexdigest(),
                "principal": name,
                "tenant": tenant,
            }
            for name, (tenant, token) in self.tokens.items()
        }

    def files(self, client: Pem | None = None) -> dict[str, str]:
        """What replaces the doc's file names."""
        client = client or self.client_pem
        return {
            DOC_CA: str(self.ca.pem.cert_file),
            DOC_CLIENT_CERT: str(client.cert_file),
            DOC_CLIENT_KEY: str(client.key_file),
        }

    async def stop(self) -> None:
        for server in self.running.values():
            await stop_server(server)


class Recipes:
    """The doc's recipes, run against one test server; records which ones ran."""

    def __init__(self, server: Server, tls: TlsServers) -> None:
        self.server = server
        self.tls = tls
        self.by_key = doc_recipes()
        self.ran: set[str] = set()
        self.channels: list[grpc.aio.Channel] = []  # the test's own, closed after it

    async def run(
        self,
        key: str,
        *,
        run_id: str = "",
        call_id: str = "",
        execution_id: str = "",
        elicitation_id: str = "",
        token: str = "",
        client: Pem | None = None,
        **data: Any,
    ) -> Result:
        """Run recipe `key`; `data` replaces top-level fields of its `-d` JSON. A TLS recipe
        sends alice's token unless `token` is given, and `client`'s certificate if given."""
        assert GRPCURL.exists(), f"grpcurl not found at {GRPCURL} (pip install -e '.[dev]')"
        recipe = self.by_key.get(key)
        assert recipe is not None, f"docs/GRPCURL.md has no recipe {key!r}"
        server, files = self.server, {}
        if recipe.security != "plaintext":
            server, files = await self.tls.get(recipe.security), self.tls.files(client)
        argv = [str(GRPCURL)]
        for arg in recipe.argv[1:]:
            if arg == DOC_ADDRESS:
                arg = server.address
            elif arg in files:
                arg = files[arg]
            elif arg == DOC_AUTHORIZATION:
                arg = arg.replace("TOKEN", token or self.tls.tokens["alice"][1])
            argv.append(arg)
        if data:
            assert recipe.data is not None, f"recipe {key!r} sends no request body"
            unknown = set(data) - set(recipe.data)
            assert not unknown, f"recipe {key!r} does not set {unknown}"
            body = {**recipe.data, **data}
            argv[argv.index("-d") + 1] = json.dumps(body)
        if "RUN_ID" in " ".join(argv):
            assert run_id, f"recipe {key!r} needs a run id"
            argv = [a.replace("RUN_ID", run_id) for a in argv]
        if "CALL_ID" in " ".join(argv):
            assert call_id, f"recipe {key!r} needs a call id"
            argv = [a.replace("CALL_ID", call_id) for a in argv]
        if "EXECUTION_ID" in " ".join(argv):
            assert execution_id, f"recipe {key!r} needs an execution id"
            argv = [a.replace("EXECUTION_ID", execution_id) for a in argv]
        if "ELICITATION_ID" in " ".join(argv):
            assert elicitation_id, f"recipe {key!r} needs an elicitation id"
            argv = [a.replace("ELICITATION_ID", elicitation_id) for a in argv]
        assert "SESSION_ID" not in " ".join(argv), f"recipe {key!r} needs a session_id"
        self.ran.add(key)
        return await grpcurl(argv)


async def grpcurl(argv: list[str]) -> Result:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"grpcurl did not finish in {TIMEOUT_S}s: {argv}") from None
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


@pytest.fixture
async def recipes(
    server: Server, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Recipes]:
    book = Recipes(server, TlsServers(tmp_path / "tls"))
    try:
        yield book
    finally:
        for channel in book.channels:
            await channel.close()
        await book.tls.stop()
    declared = set(DECLARED.get(request.function.__name__, ()))
    assert book.ran == declared, (
        f"{request.function.__name__} declares recipes {sorted(declared)} "
        f"but ran {sorted(book.ran)}"
    )


# --- helpers ----------------------------------------------------------------------------------


def unique(label: str) -> str:
    return f"{label} {uuid.uuid4().hex[:12]} via grpcurl"


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def event_kind(event: dict[str, Any]) -> str:
    kinds = [snake(k) for k in event if snake(k) not in ENVELOPE]
    assert len(kinds) == 1, event
    return kinds[0]


def payload(event: dict[str, Any]) -> dict[str, Any]:
    return next(v for k, v in event.items() if snake(k) not in ENVELOPE)


def field(message: dict[str, Any], name: str) -> Any:
    """A field by its proto name, whether grpcurl printed it snake_case or camelCase."""
    for key, value in message.items():
        if snake(key) == name:
            return value
    return None


def sequences(events: list[dict[str, Any]]) -> list[int]:
    return [int(field(e, "sequence")) for e in events]


def assert_whole_run(events: list[dict[str, Any]], run_id: str) -> None:
    """Sequences 1..N in order, run_started first, one terminal event, last."""
    assert events, "no events"
    assert sequences(events) == list(range(1, len(events) + 1))
    kinds = [event_kind(e) for e in events]
    assert kinds[0] == "run_started"
    assert [k for k in kinds if k in TERMINAL] == [kinds[-1]], kinds
    for event in events:
        assert field(event, "run_id") == run_id
        assert re.fullmatch(r"[0-9a-f]{32}", field(event, "trace_id") or ""), event
        assert re.fullmatch(r"[0-9a-f]{16}", field(event, "span_id") or ""), event


async def finished(server: Server, run_id: str) -> list[pb.AgentEvent]:
    """Wait for a run to end (through the stub); its events."""
    return await collect(server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))


async def streaming(server: Server, run_id: str) -> None:
    """Wait until the run streams its answer (its first text delta is committed)."""
    watch = server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id))
    async for event in watch:
        if kind(event) == "text_delta":
            watch.cancel()
            return
    raise AssertionError(f"run {run_id} ended without streaming text")


async def slow_run(server: Server, *, deltas: int = 40, delay_ms: int = 25) -> str:
    """Start a `script` run that takes about deltas * delay_ms; its id."""
    text = unique("slow")
    steps = script({"text": text, "deltas": deltas, "delay_ms": delay_ms})
    created = await server.runs.CreateRun(create_request(steps, model="script"))
    return created.run_id


async def create_run(recipes: Recipes, text: str) -> str:
    """CreateRun (the doc's recipe) with `text`; waits for the run to end; its id."""
    created = await recipes.run("agent.v1.RunService/CreateRun", input=text)
    assert created.code == 0, created.stderr
    run_id = field(created.json(), "run_id")
    await finished(recipes.server, run_id)
    return run_id


# --- the doc itself ---------------------------------------------------------------------------


def test_every_recipe_in_the_doc_is_exercised() -> None:
    recipes = doc_recipes()
    assert recipes, "docs/GRPCURL.md has no ```sh recipes"
    in_doc = set(recipes)
    in_tests = {key for keys in DECLARED.values() for key in keys}
    assert in_doc - in_tests == set(), "recipes in docs/GRPCURL.md that no test runs"
    assert in_tests - in_doc == set(), "tests run recipes that docs/GRPCURL.md does not have"
    tests = {name for name in globals() if name.startswith("test_")}
    assert set(DECLARED) <= tests


def test_the_readme_recipes_are_in_the_doc() -> None:
    """README.md says the tests run its grpcurl recipes: they are the doc's, verbatim."""
    if not README.exists():
        pytest.skip("no README.md")
    in_doc = {r.source for r in doc_recipes().values()}
    for block in sh_blocks(README.read_text()):
        command = block.strip()
        if command.startswith("grpcurl "):
            assert command in in_doc, f"README recipe not in docs/GRPCURL.md: {command}"


def test_the_doc_explains_sequences_and_resuming() -> None:
    text = DOC.read_text()
    assert "sequence" in text and "last_event_id" in text
    assert "RUN_ID" in text


# --- discovery and health ---------------------------------------------------------------------


@runs("list")
async def test_list_shows_our_services_health_and_reflection(recipes: Recipes) -> None:
    result = await recipes.run("list")
    assert result.code == 0, result.stderr
    assert result.stdout.split() == sorted(
        [
            *AGENT_SERVICES,
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
        ]
    )


@runs("describe agent.v1.RunService", "describe agent.v1.AgentEvent")
async def test_describe_shows_the_rpcs_and_the_event(recipes: Recipes) -> None:
    service = await recipes.run("describe agent.v1.RunService")
    assert service.code == 0, service.stderr
    assert "agent.v1.RunService is a service" in service.stdout
    # With the proto's comments (proto/agent/v1/run.proto).
    assert "// Creates, observes and cancels agent runs." in service.stdout
    assert "// Returns one run.\n  rpc GetRun (" in service.stdout
    for rpc in RUN_RPCS:
        assert re.search(rf"\brpc {rpc} \(", service.stdout), rpc
    assert re.search(
        r"rpc CreateRunStream \(.*\) returns \( stream \.agent\.v1\.AgentEvent", service.stdout
    )
    assert re.search(
        r"rpc WatchRunEvents \(.*\) returns \( stream \.agent\.v1\.AgentEvent", service.stdout
    )

    event = await recipes.run("describe agent.v1.AgentEvent")
    assert event.code == 0, event.stderr
    assert "agent.v1.AgentEvent is a message" in event.stdout
    assert "// One numbered step of a run, as stored in its event log" in event.stdout
    assert "uint64 sequence = 1;" in event.stdout
    assert "oneof event" in event.stdout
    for name in ("run_started", "text_delta", *sorted(TERMINAL), *WAIT_EVENTS):
        assert re.search(rf"\b{name} = \d+;", event.stdout), name


@runs("grpc.health.v1.Health/Check", "grpc.health.v1.Health/Check agent.v1.RunService")
async def test_health_is_serving(recipes: Recipes) -> None:
    for key in ("grpc.health.v1.Health/Check", "grpc.health.v1.Health/Check agent.v1.RunService"):
        result = await recipes.run(key)
        assert result.code == 0, result.stderr
        assert result.json() == {"status": "SERVING"}


@runs("describe agent.v1.RunService.WatchRunEvents")
async def test_describe_a_method_shows_its_comment_and_types(recipes: Recipes) -> None:
    result = await recipes.run("describe agent.v1.RunService.WatchRunEvents")
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines()[:3] == [
        "agent.v1.RunService.WatchRunEvents is a method:",
        "// Streams a run's events after last_event_id: stored ones first, then live.",
        "rpc WatchRunEvents ( .agent.v1.WatchRunEventsRequest ) returns"
        " ( stream .agent.v1.AgentEvent );",
    ]


@runs("grpc.health.v1.Health/List", "grpc.health.v1.Health/Check agent.v1.RunService")
async def test_health_lists_every_service_and_names_an_unknown_one(recipes: Recipes) -> None:
    listed = await recipes.run("grpc.health.v1.Health/List")
    assert listed.code == 0, listed.stderr
    serving = {"status": "SERVING"}
    assert listed.json() == {"statuses": {name: serving for name in ("", *AGENT_SERVICES)}}

    key = "grpc.health.v1.Health/Check agent.v1.RunService"
    unknown = await recipes.run(key, service="agent.v1.RunServce")
    assert unknown.code == EXIT_NOT_FOUND, unknown.stderr
    code, message = unknown.error()
    assert code == "NotFound"
    known = ", ".join(sorted(AGENT_SERVICES))
    assert message == (
        'health knows no service "agent.v1.RunServce"; '
        f'it knows "" (the server as a whole), {known}'
    )


# --- runs ---------------------------------------------------------------------------------------


@runs("agent.v1.RunService/CreateRun", "agent.v1.RunService/GetRun")
async def test_create_run_then_get_run(recipes: Recipes) -> None:
    text = unique("create")
    created = await recipes.run("agent.v1.RunService/CreateRun", input=text)
    assert created.code == 0, created.stderr
    body = created.json()
    run_id, session_id = field(body, "run_id"), field(body, "session_id")
    uuid.UUID(run_id)
    uuid.UUID(session_id)
    await finished(recipes.server, run_id)

    got = await recipes.run("agent.v1.RunService/GetRun", run_id=run_id)
    assert got.code == 0, got.stderr
    run = field(got.json(), "run")
    assert field(run, "id") == run_id
    assert field(run, "session_id") == session_id
    assert field(run, "status") == "RUN_STATUS_COMPLETED"
    assert field(run, "provider") == {"value": "local"}
    assert field(run, "model") == {"value": "echo"}


@runs("agent.v1.RunService/CreateRunStream")
async def test_create_run_stream_prints_the_whole_run(recipes: Recipes) -> None:
    text = unique("stream these words")
    result = await recipes.run("agent.v1.RunService/CreateRunStream", input=text)
    assert result.code == 0, result.stderr
    events = result.documents()
    run_id = field(events[0], "run_id")
    assert_whole_run(events, run_id)
    kinds = [event_kind(e) for e in events]
    assert kinds[-1] == "run_completed"
    assert field(payload(events[-1]), "finish_reason") == "FINISH_REASON_STOP"
    deltas = [field(payload(e), "delta") for e in events if event_kind(e) == "text_delta"]
    assert "".join(deltas) == text
    assert 1 <= len(deltas) <= len(text.split())  # one per word, unless joined
    assert kinds[:3] == ["run_started", "context_built", "model_started"]
    # What grpcurl printed is what the stub sees in the log.
    stored = await finished(recipes.server, run_id)
    assert [kind(e) for e in stored] == kinds


@runs("agent.v1.RunService/CreateRunStream", "agent.v1.RunService/WatchRunEvents")
async def test_watch_run_events_resumes_after_the_last_sequence(recipes: Recipes) -> None:
    streamed = await recipes.run(
        "agent.v1.RunService/CreateRunStream", input=unique("resume after a cursor")
    )
    assert streamed.code == 0, streamed.stderr
    whole = streamed.documents()
    run_id = field(whole[0], "run_id")
    n = len(whole)
    assert n >= 7

    # As written in the doc (last_event_id 3), then other cursors.
    for cursor in (None, 0, 1, n - 1, n):
        extra = {} if cursor is None else {"last_event_id": cursor}
        k = 3 if cursor is None else cursor
        result = await recipes.run("agent.v1.RunService/WatchRunEvents", run_id=run_id, **extra)
        assert result.code == 0, (cursor, result.stderr)
        events = result.documents()
        assert sequences(events) == list(range(k + 1, n + 1)), cursor
        assert events == whole[k:], cursor

    beyond = await recipes.run(
        "agent.v1.RunService/WatchRunEvents", run_id=run_id, last_event_id=n + 1
    )
    assert beyond.code == EXIT_OUT_OF_RANGE, beyond.stderr
    assert beyond.error()[0] == "OutOfRange"


@runs("agent.v1.RunService/WatchRunEvents")
async def test_watch_run_events_follows_a_live_run_to_its_end(recipes: Recipes) -> None:
    run_id = await slow_run(recipes.server, deltas=40, delay_ms=25)
    result = await recipes.run("agent.v1.RunService/WatchRunEvents", run_id=run_id)
    assert result.code == 0, result.stderr
    events = result.documents()
    assert sequences(events) == list(range(4, len(events) + 4))
    assert event_kind(events[-1]) == "run_completed"
    stored = await finished(recipes.server, run_id)
    assert len(stored) == len(events) + 3


@runs("agent.v1.RunService/WatchRunEvents")
async def test_watch_run_events_of_an_unknown_run_is_not_found(recipes: Recipes) -> None:
    result = await recipes.run("agent.v1.RunService/WatchRunEvents", run_id=str(uuid.uuid4()))
    assert result.code == EXIT_NOT_FOUND, result.stderr
    assert result.error()[0] == "NotFound"


@runs("agent.v1.RunService/ListRunEvents")
async def test_list_run_events_pages_what_watch_run_events_sends(recipes: Recipes) -> None:
    steps = script({"text": unique("page these words"), "deltas": 12})
    watched = await collect(
        recipes.server.runs.CreateRunStream(create_request(steps, model="script"))
    )
    run_id, n = watched[0].run_id, len(watched)
    expected = [MessageToDict(e, preserving_proto_field_name=True) for e in watched]

    # As written in the doc: the events after sequence 3, all of them (fewer than 100).
    result = await recipes.run("agent.v1.RunService/ListRunEvents", run_id=run_id)
    assert result.code == 0, result.stderr
    page = result.json()
    assert field(page, "events") == expected[3:]
    assert int(field(page, "last_sequence")) == n
    assert not field(page, "more")

    # Pages of 4 from the start: gapless, and together the whole run.
    pages, after, more = [], 0, True
    while more:
        result = await recipes.run(
            "agent.v1.RunService/ListRunEvents", run_id=run_id, after_sequence=after, limit=4
        )
        assert result.code == 0, result.stderr
        page = result.json()
        pages += field(page, "events")
        after, more = int(field(page, "last_sequence")), bool(field(page, "more"))
    assert pages == expected
    assert_whole_run(pages, run_id)

    beyond = await recipes.run(
        "agent.v1.RunService/ListRunEvents", run_id=run_id, after_sequence=n + 5
    )
    assert beyond.code == 0, beyond.stderr
    assert beyond.json() == {"last_sequence": str(n + 5)}
    unknown = await recipes.run("agent.v1.RunService/ListRunEvents", run_id=str(uuid.uuid4()))
    assert unknown.code == EXIT_NOT_FOUND, unknown.stderr
    too_many = await recipes.run("agent.v1.RunService/ListRunEvents", run_id=run_id, limit=10_001)
    assert too_many.code == 64 + 3, too_many.stderr  # INVALID_ARGUMENT
    assert too_many.error() == ("InvalidArgument", "limit must be at most 10000, got 10001")


@runs("agent.v1.RunService/CreateRun", "agent.v1.RunService/ListRuns")
async def test_list_runs_with_a_limit_is_newest_first(recipes: Recipes) -> None:
    limit = recipes.by_key["agent.v1.RunService/ListRuns"].data["pagination"]["limit"]  # type: ignore[index]
    made = [await create_run(recipes, unique(f"list {i}")) for i in range(limit + 1)]

    result = await recipes.run("agent.v1.RunService/ListRuns")
    assert result.code == 0, result.stderr
    listed = field(result.json(), "runs")
    assert [field(r, "id") for r in listed] == made[::-1][:limit]
    assert {field(r, "status") for r in listed} == {"RUN_STATUS_COMPLETED"}


@runs("agent.v1.RunService/CreateRun", "agent.v1.RunService/GetRunOutput")
async def test_get_run_output_shows_the_answer(recipes: Recipes) -> None:
    text = unique("output")
    run_id = await create_run(recipes, text)
    result = await recipes.run("agent.v1.RunService/GetRunOutput", run_id=run_id)
    assert result.code == 0, result.stderr
    output = field(result.json(), "output")
    assert field(output, "run_id") == run_id
    assert field(output, "iterations") == 1
    assert field(output, "finish_reason") == "FINISH_REASON_STOP"
    usage = field(output, "total_usage")
    assert int(field(usage, "total_tokens")) > 0
    messages = field(output, "messages")
    assert len(messages) == 1
    assert field(messages[0], "role") == "assistant"
    assert field(messages[0], "content") == [{"text": {"text": text}}]


STRUCTURED_RECIPE = "agent.v1.RunService/CreateRunStream response_format"


async def whole_run(recipes: Recipes, key: str) -> list[dict[str, Any]]:
    """The events of a CreateRunStream recipe, checked whole (1..N, one terminal event)."""
    result = await recipes.run(key)
    assert result.code == 0, result.stderr
    events = result.documents()
    assert_whole_run(events, field(events[0], "run_id"))
    return events


@runs(STRUCTURED_RECIPE, "agent.v1.RunService/GetRunOutput")
async def test_a_structured_output_run_is_repaired_once_and_returns_the_parsed_answer(
    recipes: Recipes,
) -> None:
    events = await whole_run(recipes, STRUCTURED_RECIPE)  # the doc's script is the point
    run_id = field(events[0], "run_id")
    kinds = [event_kind(e) for e in events]
    assert kinds[-1] == "run_completed"
    assert kinds.count("model_started") == 2
    [rejected] = [payload(e) for e in events if event_kind(e) == "output_rejected"]
    assert field(rejected, "repairing") is True
    assert "not valid JSON" in field(rejected, "error")
    output = await recipes.run("agent.v1.RunService/GetRunOutput", run_id=run_id)
    assert output.code == 0, output.stderr
    assert field(field(output.json(), "output"), "structured_output") == {"answer": 4}


REASONING_RECIPE = "agent.v1.RunService/CreateRunStream reasoning"


@runs(REASONING_RECIPE)
async def test_a_reasoning_run_streams_its_reasoning_apart_from_its_answer(
    recipes: Recipes,
) -> None:
    events = await whole_run(recipes, REASONING_RECIPE)  # the doc's script is the point
    kinds = [event_kind(e) for e in events]
    assert kinds[-1] == "run_completed"
    thoughts = "".join(
        field(payload(e), "delta") for e in events if event_kind(e) == "reasoning_delta"
    )
    answer = "".join(field(payload(e), "delta") for e in events if event_kind(e) == "text_delta")
    assert (thoughts, answer) == ("two and two make four", "4")
    assert kinds.index("text_delta") > max(i for i, k in enumerate(kinds) if k == "reasoning_delta")
    [usage] = [field(payload(e), "usage") for e in events if event_kind(e) == "usage_recorded"]
    assert field(usage, "reasoning_tokens") == "5"


IMAGE_RECIPE = "agent.v1.RunService/CreateRunStream content"


@runs(IMAGE_RECIPE)
async def test_an_image_input_reaches_the_model_and_the_log_keeps_its_digest(
    recipes: Recipes,
) -> None:
    events = await whole_run(recipes, IMAGE_RECIPE)  # the doc's image is the point
    assert event_kind(events[-1]) == "run_completed"
    digest = f"sha256:{PNG_SHA256}"
    [part] = field(payload(events[0]), "content")
    image = field(part, "image")
    assert (field(image, "digest"), field(image, "size_bytes")) == (digest, "70")
    assert "data" not in image
    answer = "".join(field(payload(e), "delta") for e in events if event_kind(e) == "text_delta")
    assert answer == f"image image/png {digest} (70 bytes)"


# The SHA-256 of the 1x1 PNG of the doc's image recipe.
PNG_SHA256 = "c414cd0e204de974f73753c7e28d7638e7b3691bb8b1a2bab6b25bb7fed7ce77"


@runs("agent.v1.RunService/CreateRun", "agent.v1.RunService/CancelRun")
async def test_cancel_of_a_finished_run_is_failed_precondition(recipes: Recipes) -> None:
    run_id = await create_run(recipes, unique("cancel too late"))
    result = await recipes.run("agent.v1.RunService/CancelRun", run_id=run_id)
    assert result.code == EXIT_FAILED_PRECONDITION, result.stderr
    code, message = result.error()
    assert code == "FailedPrecondition"
    assert run_id in message
    assert "Traceback" not in result.stderr


@runs("agent.v1.RunService/CancelRun")
async def test_cancel_of_an_unknown_run_is_not_found(recipes: Recipes) -> None:
    result = await recipes.run("agent.v1.RunService/CancelRun", run_id=str(uuid.uuid4()))
    assert result.code == EXIT_NOT_FOUND, result.stderr
    assert result.error()[0] == "NotFound"


@runs("agent.v1.RunService/CancelRun", "agent.v1.RunService/GetRun")
async def test_cancel_of_a_live_run_ends_it_with_run_cancelled(recipes: Recipes) -> None:
    run_id = await slow_run(recipes.server, deltas=400, delay_ms=25)
    watch = asyncio.ensure_future(finished(recipes.server, run_id))
    await streaming(recipes.server, run_id)
    assert not watch.done()

    result = await recipes.run("agent.v1.RunService/CancelRun", run_id=run_id)
    assert result.code == 0, result.stderr
    assert result.json() == {"status": "RUN_STATUS_CANCELLED"}
    events = await asyncio.wait_for(watch, TIMEOUT_S)
    assert kind(events[-1]) == "run_cancelled"
    assert events[-1].run_cancelled.reason == "not needed any more"
    assert [kind(e) for e in events].count("run_cancelled") == 1

    got = await recipes.run("agent.v1.RunService/GetRun", run_id=run_id)
    assert field(field(got.json(), "run"), "status") == "RUN_STATUS_CANCELLED"


@runs("agent.v1.UsageService/GetUsage")
async def test_usage_totals_todays_runs(recipes: Recipes) -> None:
    events = await collect(recipes.server.runs.CreateRunStream(create_request("count me")))
    assert kind(events[-1]) == "run_completed"
    today = datetime.now(UTC).date().isoformat()
    result = await recipes.run("agent.v1.UsageService/GetUsage", from_day=today, to_day=today)
    assert result.code == 0, result.stderr
    days = field(result.json(), "days")
    assert [field(d, "day") for d in days] == [today]
    assert int(field(days[0], "runs")) >= 1
    assert int(field(field(result.json(), "total_usage"), "total_tokens")) > 0
    bad = await recipes.run("agent.v1.UsageService/GetUsage", from_day="someday", to_day=today)
    assert bad.code == 64 + 3, bad.stderr  # INVALID_ARGUMENT


# --- sessions, tools and providers ---------------------------------------------------------------


async def session_with_runs(recipes: Recipes, *texts: str) -> str:
    """A session with an echo run of each text, one after the other; its id."""
    session_id = ""
    for text in texts:
        events = await collect(
            recipes.server.runs.CreateRunStream(create_request(text, session_id=session_id))
        )
        assert kind(events[-1]) == "run_completed"
        session_id = events[0].run_started.session_id
    return session_id


@runs(
    "agent.v1.SessionService/ListSessions",
    "agent.v1.SessionService/GetSession",
    "agent.v1.SessionService/ListSessionMessages",
)
async def test_sessions_are_listed_shown_and_read_a_page_at_a_time(recipes: Recipes) -> None:
    older = await session_with_runs(recipes, unique("older"))
    texts = [unique("first"), unique("second")]
    newer = await session_with_runs(recipes, *texts)

    listed = await recipes.run("agent.v1.SessionService/ListSessions")
    assert listed.code == 0, listed.stderr
    sessions = field(listed.json(), "sessions")
    assert [field(s, "id") for s in sessions] == [newer, older]
    assert [(field(s, "run_count"), field(s, "message_count")) for s in sessions] == [
        (2, 4),
        (1, 2),
    ]
    assert all(field(s, "active_run_id") is None for s in sessions)

    got = await recipes.run("agent.v1.SessionService/GetSession", session_id=newer)
    assert got.code == 0, got.stderr
    assert field(got.json(), "session") == sessions[0]

    # As written in the doc (2 from position 0), then the rest from where it said.
    first = await recipes.run("agent.v1.SessionService/ListSessionMessages", session_id=newer)
    assert first.code == 0, first.stderr
    page = first.json()
    messages = field(page, "messages")
    assert [field(m, "role") for m in messages] == ["user", "assistant"]
    assert field(messages[0], "content") == [{"text": {"text": texts[0]}}]
    assert (field(page, "next_position"), field(page, "more")) == (2, True)
    rest = await recipes.run(
        "agent.v1.SessionService/ListSessionMessages",
        session_id=newer,
        from_position=2,
        limit=100,
    )
    assert rest.code == 0, rest.stderr
    page = rest.json()
    assert [field(field(m, "content")[0], "text") for m in field(page, "messages")] == [
        {"text": texts[1]},
        {"text": texts[1]},
    ]
    assert (field(page, "next_position"), field(page, "more")) == (4, None)

    unknown = await recipes.run("agent.v1.SessionService/GetSession", session_id=str(uuid.uuid4()))
    assert unknown.code == EXIT_NOT_FOUND, unknown.stderr
    bad = await recipes.run("agent.v1.SessionService/GetSession", session_id="not-a-uuid")
    assert bad.code == 64 + 3, bad.stderr  # INVALID_ARGUMENT
    assert bad.error() == ("InvalidArgument", "session_id must be a UUID, got 'not-a-uuid'")


@runs("agent.v1.SessionService/DeleteSession", "agent.v1.SessionService/GetSession")
async def test_delete_session_erases_it_with_its_runs(recipes: Recipes) -> None:
    session_id = await session_with_runs(recipes, unique("forget"), unique("this too"))
    deleted = await recipes.run("agent.v1.SessionService/DeleteSession", session_id=session_id)
    assert deleted.code == 0, deleted.stderr
    assert deleted.json() == {"runs_deleted": 2}
    for key in ("agent.v1.SessionService/GetSession", "agent.v1.SessionService/DeleteSession"):
        gone = await recipes.run(key, session_id=session_id)
        assert gone.code == EXIT_NOT_FOUND, gone.stderr
        code, message = gone.error()
        assert code == "NotFound" and session_id in message, message

    busy = await slow_run(recipes.server, deltas=400, delay_ms=25)
    await streaming(recipes.server, busy)
    got = await recipes.server.runs.GetRun(pb.GetRunRequest(run_id=busy))
    refused = await recipes.run(
        "agent.v1.SessionService/DeleteSession", session_id=got.run.session_id
    )
    assert refused.code == EXIT_FAILED_PRECONDITION, refused.stderr
    assert busy in refused.error()[1]
    await recipes.server.runs.CancelRun(pb.CancelRunRequest(run_id=busy))


# --- agents ---------------------------------------------------------------------------------

CREATE_AGENT = "agent.v1.AgentService/CreateAgent"
UPDATE_AGENT = "agent.v1.AgentService/UpdateAgent"
GET_AGENT = "agent.v1.AgentService/GetAgent agent"  # its `agent` names the key, as a run's
LIST_AGENTS = "agent.v1.AgentService/ListAgents"
AGENT_VERSIONS = "agent.v1.AgentService/ListAgentVersions"
SET_ALIAS = "agent.v1.AgentService/SetAgentAlias"
ARCHIVE_AGENT = "agent.v1.AgentService/ArchiveAgent"
RUN_AGENT = "agent.v1.RunService/CreateRunStream agent"
EXIT_ALREADY_EXISTS = 64 + 6
EXIT_INVALID_ARGUMENT = 64 + 3


def version_of(result: Result) -> tuple[int, dict[str, Any]]:
    """The number and definition of the version a reply holds."""
    version = field(result.json(), "version")
    return field(version, "version"), field(version, "definition")


@runs(CREATE_AGENT, UPDATE_AGENT, SET_ALIAS, GET_AGENT, AGENT_VERSIONS)
async def test_an_agent_gets_a_version_per_change_and_an_alias_picks_one(
    recipes: Recipes,
) -> None:
    created = await recipes.run(CREATE_AGENT)
    assert created.code == 0, created.stderr
    assert field(field(created.json(), "agent"), "latest_version") == 1
    number, first = version_of(created)
    assert number == 1 and field(first, "tool_choice") == "auto"  # stored normalised
    taken = await recipes.run(CREATE_AGENT)
    assert taken.code == EXIT_ALREADY_EXISTS, taken.stderr

    changed = await recipes.run(UPDATE_AGENT)  # the doc's: other instructions
    assert changed.code == 0, changed.stderr
    assert field(changed.json(), "changed") is True
    number, second = version_of(changed)
    assert number == 2 and "kind" in field(second, "instructions")
    # The same definition again, and the one read back (defaults filled in): no new version.
    for definition in (None, second):
        again = await recipes.run(
            UPDATE_AGENT, **({"definition": definition} if definition else {})
        )
        assert again.code == 0, again.stderr
        assert field(again.json(), "changed") is None and version_of(again)[0] == 2

    aliased = await recipes.run(SET_ALIAS)  # production → 1
    assert aliased.code == 0, aliased.stderr
    assert field(field(aliased.json(), "agent"), "aliases") == {"production": 1}
    got = await recipes.run(GET_AGENT)
    assert got.code == 0, got.stderr
    assert version_of(got) == (1, first)
    latest = await recipes.run(GET_AGENT, agent="support")
    assert version_of(latest) == (2, second)
    for unknown in ("support@staging", "support@9", "nobody"):
        missing = await recipes.run(GET_AGENT, agent=unknown)
        assert missing.code == EXIT_NOT_FOUND, (unknown, missing.stderr)

    versions = await recipes.run(AGENT_VERSIONS)
    assert versions.code == 0, versions.stderr
    listed = field(versions.json(), "versions")
    assert [(field(v, "version"), field(v, "definition")) for v in listed] == [
        (2, second),
        (1, first),
    ]

    bad = await recipes.run(
        CREATE_AGENT, name="other", definition={"provider": "local", "model": "no-such-model"}
    )
    assert bad.code == EXIT_INVALID_ARGUMENT, bad.stderr
    assert "definition.model" in bad.error()[1]
    absent = await recipes.run(GET_AGENT, agent="other")
    assert absent.code == EXIT_NOT_FOUND, absent.stderr  # nothing was written


@runs(CREATE_AGENT, SET_ALIAS, RUN_AGENT)
async def test_a_run_of_an_agent_takes_its_definition_and_records_the_version(
    recipes: Recipes,
) -> None:
    assert (await recipes.run(CREATE_AGENT)).code == 0
    assert (await recipes.run(SET_ALIAS)).code == 0
    text = unique("hello support")
    streamed = await recipes.run(RUN_AGENT, input=text)
    assert streamed.code == 0, streamed.stderr
    events = streamed.documents()
    run_id = field(events[0], "run_id")
    assert_whole_run(events, run_id)
    assert event_kind(events[-1]) == "run_completed"
    started = payload(events[0])
    assert (field(started, "agent_name"), field(started, "agent_version")) == ("support", 1)
    assert (field(started, "provider"), field(started, "model")) == ("local", "echo")
    deltas = [payload(e) for e in events if event_kind(e) == "text_delta"]
    assert "".join(field(d, "delta") for d in deltas) == text

    run = (await recipes.server.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    assert (run.agent_name, run.agent_version, run.instructions) == (
        "support",
        1,
        "You are support. Be brief.",
    )
    listed = await recipes.server.runs.ListRuns(pb.ListRunsRequest(agent="support"))
    assert [r.id for r in listed.runs] == [run_id]
    other = await recipes.server.runs.ListRuns(pb.ListRunsRequest(agent="support", agent_version=2))
    assert list(other.runs) == []


@runs(CREATE_AGENT, LIST_AGENTS, ARCHIVE_AGENT, RUN_AGENT)
async def test_an_archived_agent_is_listed_only_when_asked_and_starts_no_run(
    recipes: Recipes,
) -> None:
    for name in ("support", "billing"):
        assert (await recipes.run(CREATE_AGENT, name=name)).code == 0
    listed = await recipes.run(LIST_AGENTS)
    assert listed.code == 0, listed.stderr
    agents = field(listed.json(), "agents")
    assert [field(a, "name") for a in agents] == ["billing", "support"]
    assert field(agents[1], "description") == "Answers customers"

    archived = await recipes.run(ARCHIVE_AGENT)
    assert archived.code == 0, archived.stderr
    assert field(field(archived.json(), "agent"), "archived") is True
    every = await recipes.run(LIST_AGENTS)
    assert [(field(a, "name"), field(a, "archived")) for a in field(every.json(), "agents")] == [
        ("billing", None),
        ("support", True),
    ]
    live = await recipes.run(LIST_AGENTS, include_archived=False)
    assert [field(a, "name") for a in field(live.json(), "agents")] == ["billing"]

    refused = await recipes.run(RUN_AGENT, agent="support")
    assert refused.code == EXIT_FAILED_PRECONDITION, refused.stderr


@runs("agent.v1.ToolService/ListTools")
async def test_list_tools_shows_each_tools_source_and_flags(recipes: Recipes) -> None:
    result = await recipes.run("agent.v1.ToolService/ListTools")
    assert result.code == 0, result.stderr
    tools = {field(field(t, "spec"), "name"): t for t in field(result.json(), "tools")}
    assert list(tools) == sorted(tools)
    assert set(tools) == {*recipes.server.app.tools.names(), "spawn_agent"}
    calculator = tools["calculator"]
    assert field(calculator, "source") == "builtin"
    assert all(field(calculator, f) for f in ("read_only", "concurrency_safe", "idempotent"))
    assert field(calculator, "timeout_s") == 30
    schema = json.loads(field(field(calculator, "spec"), "parameters_schema"))
    assert schema["required"] == ["expression"]
    spawn = tools["spawn_agent"]
    assert (field(spawn, "idempotent"), field(spawn, "read_only")) == (True, None)
    assert "allow_sub_agents" in field(field(spawn, "spec"), "description")


@runs("agent.v1.ProviderService/ListProviders")
async def test_list_providers_shows_the_models(recipes: Recipes) -> None:
    result = await recipes.run("agent.v1.ProviderService/ListProviders")
    assert result.code == 0, result.stderr
    [local] = field(result.json(), "providers")
    assert (field(local, "id"), field(local, "type")) == ({"value": "local"}, "local")
    models = field(local, "models")
    assert [field(m, "name") for m in models] == [{"value": "echo"}, {"value": "script"}]
    assert int(field(models[0], "context_window")) == 128_000
    assert "api_key" not in result.stdout


# --- runs that wait ---------------------------------------------------------------------------

APPROVAL_RECIPE = "agent.v1.RunService/CreateRun approval_required_tools"
CLIENT_TOOL_RECIPE = "agent.v1.RunService/CreateRun client_tools"


async def waiting_run(recipes: Recipes, key: str, **data: Any) -> str:
    """Create a run with recipe `key` and wait until it waits; its id."""
    created = await recipes.run(key, **data)
    assert created.code == 0, created.stderr
    run_id: str = field(created.json(), "run_id")
    watch = recipes.server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id))
    async for event in watch:
        if kind(event) in ("approval_requested", "client_tool_requested"):
            watch.cancel()
            return run_id
    raise AssertionError(f"run {run_id} ended without waiting")


def text_of(events: list[pb.AgentEvent]) -> str:
    return "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")


@runs(
    APPROVAL_RECIPE,
    "agent.v1.RunService/ListPendingCalls",
    "agent.v1.RunService/SubmitApprovals",
    "agent.v1.RunService/GetRun",
)
async def test_a_run_that_waits_for_an_approval_goes_on_once_allowed(recipes: Recipes) -> None:
    run_id = await waiting_run(recipes, APPROVAL_RECIPE)
    got = await recipes.run("agent.v1.RunService/GetRun", run_id=run_id)
    run = field(got.json(), "run")
    assert field(run, "status") == "RUN_STATUS_WAITING_FOR_INPUT"
    assert field(run, "approval_required_tools") == ["calculator"]

    pending = await recipes.run("agent.v1.RunService/ListPendingCalls", run_id=run_id)
    assert pending.code == 0, pending.stderr
    [waiting] = field(pending.json(), "calls")
    assert field(waiting, "call") == {
        "id": "call_1_1",
        "name": "calculator",
        "arguments": '{"expression": "2+2"}',
    }
    assert field(waiting, "kind") == "PENDING_CALL_KIND_APPROVAL"
    requested, expires = (field(waiting, name) for name in ("requested_at", "expires_at"))
    assert datetime.fromisoformat(requested) < datetime.fromisoformat(expires)

    allowed = await recipes.run(
        "agent.v1.RunService/SubmitApprovals", run_id=run_id, call_id="call_1_1"
    )
    assert allowed.code == 0, allowed.stderr
    assert allowed.json() == {}
    events = await finished(recipes.server, run_id)
    assert kind(events[-1]) == "run_completed"
    [resolved] = [e.approval_resolved for e in events if kind(e) == "approval_resolved"]
    assert resolved.decision == pb.APPROVAL_DECISION_ALLOW
    assert "tool_execution_finished" in [kind(e) for e in events]
    assert text_of(events) == "done"

    after = await recipes.run("agent.v1.RunService/ListPendingCalls", run_id=run_id)
    assert after.code == 0, after.stderr
    assert after.json() == {}


@runs(APPROVAL_RECIPE, "agent.v1.RunService/SubmitApprovals")
async def test_submit_approvals_denies_with_a_reason_and_refuses_unknown_or_changed_answers(
    recipes: Recipes,
) -> None:
    says_results = script({"tool_calls": [CALCULATOR]}, {"say": "tool_results"})
    run_id = await waiting_run(recipes, APPROVAL_RECIPE, input=says_results)
    unknown = await recipes.run(
        "agent.v1.RunService/SubmitApprovals", run_id=run_id, call_id="call_9_9"
    )
    assert unknown.code == EXIT_NOT_FOUND, unknown.stderr
    assert unknown.error() == ("NotFound", f"run {run_id} has no approval request 'call_9_9'")

    deny = {"call_id": "call_1_1", "decision": "APPROVAL_DECISION_DENY", "reason": "not now"}
    denied = await recipes.run(
        "agent.v1.RunService/SubmitApprovals", run_id=run_id, approvals=[deny]
    )
    assert denied.code == 0, denied.stderr
    events = await finished(recipes.server, run_id)
    assert kind(events[-1]) == "run_completed"
    said = text_of(events)
    assert said.startswith("calculator: error: ") and "not now" in said

    changed = await recipes.run(
        "agent.v1.RunService/SubmitApprovals", run_id=run_id, call_id="call_1_1"
    )
    assert changed.code == EXIT_FAILED_PRECONDITION, changed.stderr
    assert changed.error()[0] == "FailedPrecondition"


@runs(
    CLIENT_TOOL_RECIPE,
    "agent.v1.RunService/ListPendingCalls",
    "agent.v1.RunService/SubmitToolResults",
)
async def test_a_run_that_waits_for_a_client_tool_goes_on_with_its_result(
    recipes: Recipes,
) -> None:
    run_id = await waiting_run(recipes, CLIENT_TOOL_RECIPE)
    pending = await recipes.run("agent.v1.RunService/ListPendingCalls", run_id=run_id)
    assert pending.code == 0, pending.stderr
    [waiting] = field(pending.json(), "calls")
    assert field(field(waiting, "call"), "name") == "lookup"
    assert field(waiting, "kind") == "PENDING_CALL_KIND_CLIENT_TOOL"
    call_id = field(field(waiting, "call"), "id")

    answered = await recipes.run(
        "agent.v1.RunService/SubmitToolResults", run_id=run_id, call_id=call_id
    )
    assert answered.code == 0, answered.stderr
    assert answered.json() == {}
    events = await finished(recipes.server, run_id)
    assert kind(events[-1]) == "run_completed"
    [done] = [e.client_tool_answered for e in events if kind(e) == "client_tool_answered"]
    assert (done.tool_name, done.is_error, done.timed_out) == ("lookup", False, False)
    assert text_of(events) == "done"


@runs(CLIENT_TOOL_RECIPE, "agent.v1.RunService/SubmitToolResults")
async def test_the_client_tools_result_is_what_the_model_sees(recipes: Recipes) -> None:
    lookup = {"name": "lookup", "arguments": {"word": "behest"}}
    says_results = script({"tool_calls": [lookup]}, {"say": "tool_results"})
    run_id = await waiting_run(recipes, CLIENT_TOOL_RECIPE, input=says_results)
    recipe = recipes.by_key["agent.v1.RunService/SubmitToolResults"]
    assert recipe.data is not None
    output = recipe.data["results"][0]["output"]

    answered = await recipes.run(
        "agent.v1.RunService/SubmitToolResults", run_id=run_id, call_id="call_1_1"
    )
    assert answered.code == 0, answered.stderr
    events = await finished(recipes.server, run_id)
    assert text_of(events) == f"lookup: {output}"


def doc_sample(marker: str) -> Any:
    """The doc's one ```json sample that holds `marker`, parsed."""
    blocks = re.findall(r"^```json\n(.*?)^```", DOC.read_text(), flags=re.MULTILINE | re.DOTALL)
    [sample] = [json.loads(block) for block in blocks if marker in block]
    return sample


@runs("agent.v1.RunService/ListPendingCalls", "agent.v1.RunService/SubmitElicitationAnswers")
async def test_a_tools_question_is_listed_as_the_doc_shows_and_answered(
    recipes: Recipes, tmp_path: Path
) -> None:
    server = await start_server(fast_settings(tmp_path / "asking", mcp=echo_servers()))
    book = Recipes(server, recipes.tls)
    try:
        run_id = (await server.runs.CreateRun(create_request(BOOK, model="script"))).run_id
        watch = server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id))
        async for event in watch:
            if kind(event) == "elicitation_requested":
                watch.cancel()
                break
        listed = await book.run("agent.v1.RunService/ListPendingCalls", run_id=run_id)
        assert listed.code == 0, listed.stderr
        [waiting] = field(listed.json(), "calls")
        question = field(waiting, "elicitation")
        elicitation_id = field(question, "elicitation_id")
        assert re.fullmatch(r"call_1_1~1-[0-9a-f]{12}", elicitation_id)
        # As the doc shows it, but for the question's digest and the times.
        [shown] = doc_sample("PENDING_CALL_KIND_ELICITATION")["calls"]
        seen = json.loads(json.dumps(waiting).replace(elicitation_id, shown["call"]["id"]))
        seen.update(requested_at=shown["requested_at"], expires_at=shown["expires_at"])
        for call in (seen, shown):
            asked = call["elicitation"]
            asked["requested_schema"] = json.loads(asked["requested_schema"])
        assert seen == shown

        key = "agent.v1.RunService/SubmitElicitationAnswers"
        recipe = book.by_key[key]
        assert recipe.data is not None
        too_many = [{**recipe.data["answers"][0], "content": '{"nights": 31}'}]
        wrong = await book.run(key, run_id=run_id, elicitation_id=elicitation_id, answers=too_many)
        assert wrong.code == EXIT_INVALID_ARGUMENT, wrong.stderr
        assert wrong.error()[1].startswith(
            "answers[0].content does not match the question's schema at nights: 31 is greater"
        )
        answered = await book.run(key, run_id=run_id, elicitation_id=elicitation_id)
        assert answered.code == 0, answered.stderr
        assert answered.json() == {}
        events = await finished(server, run_id)
    finally:
        recipes.ran |= book.ran
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    [told] = [e.elicitation_answered for e in events if kind(e) == "elicitation_answered"]
    assert told.action == pb.ELICITATION_ACTION_ACCEPT
    assert text_of(events).startswith("echo__book: booked 2 night(s) in Lisbon (server pid")


# --- tool executions -------------------------------------------------------------------------


@runs(
    "agent.v1.ToolExecutionService/ListToolExecutions",
    "agent.v1.ToolExecutionService/GetToolExecution",
    "agent.v1.ToolExecutionService/ReconcileToolExecution",
)
async def test_a_runs_executions_are_listed_and_a_finished_one_is_not_reconciled(
    recipes: Recipes,
) -> None:
    calc = {"name": "calculator", "arguments": {"expression": "6*7"}}
    created = await recipes.server.runs.CreateRun(
        create_request(script({"tool_calls": [calc]}, {"text": "42"}), model="script")
    )
    events = await finished(recipes.server, created.run_id)
    [started] = [e.tool_execution_started for e in events if kind(e) == "tool_execution_started"]
    listed = await recipes.run(
        "agent.v1.ToolExecutionService/ListToolExecutions", run_id=created.run_id
    )
    assert listed.code == 0, listed.stderr
    [execution] = field(listed.json(), "executions")
    assert field(execution, "id") == started.execution_id
    assert field(execution, "status") == "TOOL_EXECUTION_STATUS_SUCCEEDED"
    assert (field(execution, "attempt"), field(execution, "result")) == (1, "42")
    shown = await recipes.run(
        "agent.v1.ToolExecutionService/GetToolExecution", execution_id=started.execution_id
    )
    assert shown.code == 0, shown.stderr
    changes = field(field(shown.json(), "execution"), "transitions")
    assert [field(c, "status") for c in changes] == [
        "TOOL_EXECUTION_STATUS_STARTED",
        "TOOL_EXECUTION_STATUS_SUCCEEDED",
    ]
    refused = await recipes.run(
        "agent.v1.ToolExecutionService/ReconcileToolExecution",
        execution_id=started.execution_id,
    )
    assert refused.code == 64 + grpc.StatusCode.FAILED_PRECONDITION.value[0], refused.stderr
    assert "only one whose outcome is unknown" in refused.stderr


@runs("agent.v1.ToolExecutionService/ReconcileToolExecution")
async def test_reconciling_an_outcome_unknown_completes_the_run_with_the_output(
    recipes: Recipes, tmp_path: Path
) -> None:
    server, run_id = await cut_unsafe_call(tmp_path / "cut")
    book = Recipes(server, recipes.tls)
    try:
        await until_unknown(server, run_id)  # the run taken up again has paused
        [waiting] = (
            await server.runs.ListPendingCalls(pb.ListPendingCallsRequest(run_id=run_id))
        ).calls
        reply = await book.run(
            "agent.v1.ToolExecutionService/ReconcileToolExecution",
            execution_id=waiting.execution_id,
        )
        assert reply.code == 0, reply.stderr
        execution = field(reply.json(), "execution")
        assert field(execution, "status") == "TOOL_EXECUTION_STATUS_RECONCILED"
        events = await finished(server, run_id)
    finally:
        recipes.ran |= book.ran
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    [reconciled] = [e for e in events if kind(e) == "tool_execution_reconciled"]
    assert reconciled.tool_execution_reconciled.verdict == 1  # RECONCILE_VERDICT_RAN


@runs("agent.v1.WorkerService/Connect")
async def test_a_worker_says_hello_and_a_bad_hello_is_invalid_argument(recipes: Recipes) -> None:
    key = "agent.v1.WorkerService/Connect"
    hello = await recipes.run(key)
    assert hello.code == 0, hello.stderr
    welcome = field(hello.json(), "welcome")
    assert field(welcome, "worker_id") and field(welcome, "heartbeat_interval_s") > 0
    recipe = recipes.by_key[key]
    assert recipe.data is not None
    tool = recipe.data["hello"]["tools"][0]
    twice = await recipes.run(key, hello={**recipe.data["hello"], "tools": [tool, tool]})
    assert twice.code == 64 + grpc.StatusCode.INVALID_ARGUMENT.value[0], twice.stderr
    assert "declared twice" in twice.stderr


# --- compaction and snapshots ---------------------------------------------------------------


@runs("agent.v1.CompactionService/GetCompactionConfig")
async def test_get_compaction_config_shows_the_stored_config(recipes: Recipes) -> None:
    result = await recipes.run("agent.v1.CompactionService/GetCompactionConfig")
    assert result.code == 0, result.stderr
    printed = result.json()
    expected = await recipes.server.compaction.GetCompactionConfig(pb.GetCompactionConfigRequest())
    assert printed == MessageToDict(expected, preserving_proto_field_name=True)
    assert int(field(printed, "buffer_tokens")) > 0
    assert field(printed, "tail_turns") >= 1


@runs("agent.v1.SnapshotService/ListSnapshots")
async def test_list_snapshots_shows_what_is_running(recipes: Recipes) -> None:
    idle = await recipes.run("agent.v1.SnapshotService/ListSnapshots")
    assert idle.code == 0, idle.stderr
    assert idle.json() == {}

    run_id = await slow_run(recipes.server, deltas=40, delay_ms=25)
    await streaming(recipes.server, run_id)
    busy = await recipes.run("agent.v1.SnapshotService/ListSnapshots")
    assert busy.code == 0, busy.stderr
    snapshots = field(busy.json(), "snapshots")
    assert [field(s, "run_id") for s in snapshots] == [run_id]
    assert field(snapshots[0], "status") not in {
        "RUN_STATUS_COMPLETED",
        "RUN_STATUS_FAILED",
        "RUN_STATUS_CANCELLED",
    }

    await finished(recipes.server, run_id)
    done = await recipes.run("agent.v1.SnapshotService/ListSnapshots")
    assert done.json() == {}


# --- TLS and tokens ---------------------------------------------------------------------------

# grpcurl exits with 64 + the gRPC code: Unauthenticated is 16.
EXIT_UNAUTHENTICATED = 64 + 16


def secure_stub(
    recipes: Recipes, security: str, client: Pem | None = None
) -> run_grpc.RunServiceStub:
    """A RunService stub over TLS to the recipes' `security` server (opened by a recipe)."""
    tls = recipes.tls
    credentials = grpc.ssl_channel_credentials(
        root_certificates=tls.ca.pem.cert,
        private_key=client.key if client else None,
        certificate_chain=client.cert if client else None,
    )
    channel = grpc.aio.secure_channel(tls.running[security].address, credentials)
    recipes.channels.append(channel)
    return run_grpc.RunServiceStub(channel)


def bearer(recipes: Recipes, name: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {recipes.tls.tokens[name][1]}"),)


@runs("tls grpc.health.v1.Health/Check")
async def test_health_over_tls_needs_no_token(recipes: Recipes) -> None:
    result = await recipes.run("tls grpc.health.v1.Health/Check")
    assert result.code == 0, result.stderr
    assert result.json() == {"status": "SERVING"}


@runs("tls token agent.v1.RunService/CreateRunStream", "tls token agent.v1.RunService/ListRuns")
async def test_a_token_over_tls_streams_a_run_and_lists_its_tenants_runs(
    recipes: Recipes,
) -> None:
    listed = await recipes.run("tls token agent.v1.RunService/ListRuns")
    assert listed.code == 0, listed.stderr
    assert listed.json() == {}

    text = unique("over TLS")
    streamed = await recipes.run("tls token agent.v1.RunService/CreateRunStream", input=text)
    assert streamed.code == 0, streamed.stderr
    events = streamed.documents()
    run_id = field(events[0], "run_id")
    assert_whole_run(events, run_id)
    assert event_kind(events[-1]) == "run_completed"
    deltas = [field(payload(e), "delta") for e in events if event_kind(e) == "text_delta"]
    assert "".join(deltas) == text

    mine = await recipes.run("tls token agent.v1.RunService/ListRuns")
    assert mine.code == 0, mine.stderr
    assert [field(r, "id") for r in field(mine.json(), "runs")] == [run_id]
    # Another tenant's token sees none of it.
    theirs = await recipes.run(
        "tls token agent.v1.RunService/ListRuns", token=recipes.tls.tokens["bob"][1]
    )
    assert theirs.code == 0, theirs.stderr
    assert theirs.json() == {}


@runs("tls token agent.v1.RunService/ListRuns", "tls token agent.v1.RunService/CreateRunStream")
async def test_a_wrong_token_is_unauthenticated_and_not_repeated(recipes: Recipes) -> None:
    wrong = secrets.token_urlsafe(32)
    for key in (
        "tls token agent.v1.RunService/ListRuns",
        "tls token agent.v1.RunService/CreateRunStream",
    ):
        result = await recipes.run(key, token=wrong)
        assert result.code == EXIT_UNAUTHENTICATED, result.stderr
        assert result.error()[0] == "Unauthenticated"
        assert wrong not in result.stdout + result.stderr
    listed = await secure_stub(recipes, "tls").ListRuns(
        pb.ListRunsRequest(), metadata=bearer(recipes, "alice")
    )
    assert list(listed.runs) == []  # the refused CreateRunStream made nothing


@runs("tls token agent.v1.RunService/CreateStreamTicket")
async def test_a_stream_ticket_stands_for_its_minter_on_that_run_only(recipes: Recipes) -> None:
    key = "tls token agent.v1.RunService/CreateStreamTicket"
    await recipes.tls.get("tls")
    stub = secure_stub(recipes, "tls")
    created = await stub.CreateRun(
        create_request(unique("ticketed")), metadata=bearer(recipes, "alice")
    )

    minted = await recipes.run(key, run_id=created.run_id)
    assert minted.code == 0, minted.stderr
    body = minted.json()
    ticket, expires = field(body, "ticket"), field(body, "expires_at")
    assert re.fullmatch(r"bst_[A-Za-z0-9_-]{43}", ticket), body
    left = datetime.fromisoformat(expires) - datetime.now(UTC)
    assert 290 < left.total_seconds() <= 300
    runs = recipes.tls.running["tls"].app.runs
    assert await runs.ticket_caller(ticket, created.run_id) == Caller("alice", "acme")
    with pytest.raises(Unauthenticated):
        await runs.ticket_caller(ticket, str(uuid.uuid4()))

    # Another tenant's run is answered as one that does not exist.
    theirs = await recipes.run(key, run_id=created.run_id, token=recipes.tls.tokens["bob"][1])
    assert theirs.code == EXIT_NOT_FOUND, theirs.stderr
    assert theirs.error()[0] == "NotFound"


@runs("mtls agent.v1.RunService/ListRuns")
async def test_mtls_lists_the_runs_of_the_certificates_tenant(recipes: Recipes) -> None:
    empty = await recipes.run("mtls agent.v1.RunService/ListRuns")
    assert empty.code == 0, empty.stderr
    assert empty.json() == {}

    tls = recipes.tls
    created = await secure_stub(recipes, "mtls", tls.client_pem).CreateRun(
        create_request(unique("mutual"))
    )
    listed = await recipes.run("mtls agent.v1.RunService/ListRuns")
    assert listed.code == 0, listed.stderr
    assert [field(r, "id") for r in field(listed.json(), "runs")] == [created.run_id]
    # A certificate of another tenant (its O) lists none of them.
    frank = tls.ca.client("frank", principal="frank", tenant="umbrella")
    theirs = await recipes.run("mtls agent.v1.RunService/ListRuns", client=frank)
    assert theirs.code == 0, theirs.stderr
    assert theirs.json() == {}

    # Without a client certificate the handshake fails: no RPC is made (grpcurl retries the
    # dial until its connect timeout, 10 s unless told).
    argv = [str(GRPCURL), "-connect-timeout", "2", "-cacert", str(tls.ca.pem.cert_file)]
    argv += [tls.running["mtls"].address, "agent.v1.RunService/ListRuns"]
    refused = await grpcurl(argv)
    assert refused.code == 1, refused.stderr
    assert "Failed to dial target host" in refused.stderr
    assert refused.stdout == ""


EXIT_DEADLINE_EXCEEDED = 64 + 4


@runs("agent.v1.SessionService/WatchSessionEvents")
async def test_watch_session_events_follows_every_run_after_the_cursor(recipes: Recipes) -> None:
    session_id = await session_with_runs(recipes, unique("first"), unique("second"))
    listed = await recipes.server.runs.ListRuns(pb.ListRunsRequest(session_id=session_id))
    first, second = sorted(listed.runs, key=lambda r: r.created_at.ToNanoseconds())
    whole = [
        MessageToDict(e, preserving_proto_field_name=True)
        for run in (first, second)
        for e in await collect(
            recipes.server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run.id))
        )
    ]
    # As written in the doc: after the first run's event 1, until -max-time ends it.
    result = await recipes.run(
        "agent.v1.SessionService/WatchSessionEvents", session_id=session_id, run_id=first.id
    )
    assert result.code == EXIT_DEADLINE_EXCEEDED, result.stderr
    assert result.error()[0] == "DeadlineExceeded"
    assert result.documents() == whole[1:]
    assert [event_kind(e) for e in result.documents()].count("run_completed") == 2


@runs("agent.v1.SessionService/ForkSession")
async def test_fork_session_shares_the_start_of_a_session(recipes: Recipes) -> None:
    texts = [unique("first"), unique("second")]
    session_id = await session_with_runs(recipes, *texts)
    # As written in the doc: through position 1 (the first run's two messages).
    result = await recipes.run("agent.v1.SessionService/ForkSession", session_id=session_id)
    assert result.code == 0, result.stderr
    forked = field(result.json(), "session")
    assert field(forked, "parent_session_id") == session_id
    assert (field(forked, "forked_through_position"), field(forked, "message_count")) == (1, 2)
    stub = session_rpc.SessionServiceStub(recipes.server.channel)
    page = await stub.ListSessionMessages(
        spb.ListSessionMessagesRequest(session_id=field(forked, "id"), limit=100)
    )
    assert [m.content[0].text.text for m in page.messages] == [texts[0], texts[0]]
    past = await recipes.run(
        "agent.v1.SessionService/ForkSession", session_id=session_id, through_position=9
    )
    assert past.code == EXIT_INVALID_ARGUMENT, past.stderr
