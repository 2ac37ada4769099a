"""Who is calling (issue 12): bearer tokens, JWTs, mTLS, tenants and per-tenant limits,
through a real server and real gRPC clients."""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from grpc_health.v1 import health_pb2, health_pb2_grpc

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest.config import Settings
from tests.certs import CertificateAuthority
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

TOKENS = {
    "alice": ("acme", secrets.token_urlsafe(32)),
    "bob": ("globex", secrets.token_urlsafe(32)),
}
SLOW = script({"text": "slow " * 50, "delay_ms": 40})


def auth_tables(**extra: Any) -> dict[str, Any]:
    tokens = {
        name: {
            "sha256": hashlib.sha256(token.encode()).hexdigest(),
            "principal": name,
            "tenant": tenant,
        }
        for name, (tenant, token) in TOKENS.items()
    }
    return {"auth": {"mode": "bearer", "tokens": tokens, **extra}}


def bearer(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[name][1]}"),)


Start = Callable[..., Awaitable[Server]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    running: list[Server] = []

    async def start_one(tables: dict[str, Any], **values: Any) -> Server:
        settings = fast_settings(tmp_path / str(len(running)), **values)
        running.append(await start_server(settings.with_tables(tables, source="test")))
        return running[-1]

    try:
        yield start_one
    finally:
        for server in running:
            await stop_server(server)


def count_operations(server: Server) -> dict[str, int]:
    """Count every call into the server's Operations (what every servicer calls)."""
    calls: dict[str, int] = {}
    operations = server.app.runs
    for name in dir(type(operations)):
        if name.startswith("_") or not callable(getattr(operations, name)):
            continue
        real = getattr(operations, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args, **kwargs)

        setattr(operations, name, counted)
    return calls


def every_rpc(server: Server, run_id: str) -> list[tuple[str, Callable[..., Any]]]:
    runs, compaction, snapshots = server.runs, server.compaction, server.snapshots
    create = create_request("hello")
    return [
        ("CreateRun", lambda md: runs.CreateRun(create, metadata=md)),
        ("CreateRunStream", lambda md: collect(runs.CreateRunStream(create, metadata=md))),
        ("ListRuns", lambda md: runs.ListRuns(pb.ListRunsRequest(), metadata=md)),
        ("GetRun", lambda md: runs.GetRun(pb.GetRunRequest(run_id=run_id), metadata=md)),
        (
            "GetRunOutput",
            lambda md: runs.GetRunOutput(pb.GetRunOutputRequest(run_id=run_id), metadata=md),
        ),
        ("CancelRun", lambda md: runs.CancelRun(pb.CancelRunRequest(run_id=run_id), metadata=md)),
        (
            "WatchRunEvents",
            lambda md: collect(
                runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id), metadata=md)
            ),
        ),
        (
            "GetCompactionConfig",
            lambda md: compaction.GetCompactionConfig(pb.GetCompactionConfigRequest(), metadata=md),
        ),
        (
            "UpdateCompactionConfig",
            lambda md: compaction.UpdateCompactionConfig(
                pb.UpdateCompactionConfigRequest(), metadata=md
            ),
        ),
        (
            "GetCircuitBreaker",
            lambda md: compaction.GetCircuitBreaker(pb.GetCircuitBreakerRequest(), metadata=md),
        ),
        (
            "ListSnapshots",
            lambda md: snapshots.ListSnapshots(pb.ListSnapshotsRequest(), metadata=md),
        ),
        (
            "GetSnapshot",
            lambda md: snapshots.GetSnapshot(pb.GetSnapshotRequest(run_id=run_id), metadata=md),
        ),
        (
            "DeleteSnapshot",
            lambda md: snapshots.DeleteSnapshot(
                pb.DeleteSnapshotRequest(run_id=run_id), metadata=md
            ),
        ),
    ]


async def code_of(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    try:
        await call
    except grpc.aio.AioRpcError as err:
        return err.code(), err.details() or ""
    return grpc.StatusCode.OK, ""


# --- authentication ---------------------------------------------------------------------


async def test_every_rpc_without_a_good_token_is_unauthenticated_and_runs_no_handler(
    start: Start, tmp_path: Path
) -> None:
    key, tables = jwt_setup(tmp_path)
    server = await start(tables)
    created = await server.runs.CreateRun(create_request("mine"), metadata=bearer("alice"))
    calls = count_operations(server)
    bad_ones = {
        "expired": signed(key, exp=int(time.time()) - 3600),
        "none": (),
        "wrong": (("authorization", "Bearer " + secrets.token_urlsafe(32)),),
        "not bearer": (("authorization", f"Basic {TOKENS['alice'][1]}"),),
        "two": (*bearer("alice"), *bearer("bob")),
    }
    for label, metadata in bad_ones.items():
        for name, call in every_rpc(server, created.run_id):
            code, details = await code_of(call(metadata))
            assert code == grpc.StatusCode.UNAUTHENTICATED, (label, name, code, details)
            assert TOKENS["alice"][1] not in details and "Basic" not in details
    assert calls == {}
    # …and the same calls with a good token do reach the handlers.
    await server.runs.GetRun(pb.GetRunRequest(run_id=created.run_id), metadata=bearer("alice"))
    assert calls == {"get": 1}


async def test_health_and_reflection_need_no_token_unless_protected(start: Start) -> None:
    open_server = await start(auth_tables())
    health = health_pb2_grpc.HealthStub(open_server.channel)
    answer = await health.Check(health_pb2.HealthCheckRequest())
    assert answer.status == health_pb2.HealthCheckResponse.SERVING

    closed = await start(auth_tables(protect_health=True))
    health = health_pb2_grpc.HealthStub(closed.channel)
    code, _ = await code_of(health.Check(health_pb2.HealthCheckRequest()))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    answer = await health.Check(health_pb2.HealthCheckRequest(), metadata=bearer("alice"))
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def jwt_setup(tmp_path: Path) -> tuple[ec.EllipticCurvePrivateKey, dict[str, Any]]:
    key = ec.generate_private_key(ec.SECP256R1())
    public = tmp_path / "jwt-public.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    tables = auth_tables(
        jwt={
            "public_key_file": str(public),
            "issuer": "https://id.example.test/",
            "audience": "behest",
            "tenant_claim": "org",
        }
    )
    return key, tables


def signed(key: ec.EllipticCurvePrivateKey, **claims: Any) -> tuple[tuple[str, str], ...]:
    body = {
        "sub": "carol",
        "org": "initech",
        "iss": "https://id.example.test/",
        "aud": "behest",
        "exp": int(time.time()) + 300,
        **claims,
    }
    return (("authorization", "Bearer " + jwt.encode(body, key, algorithm="ES256")),)


async def test_a_jwt_names_its_caller_and_a_bad_one_is_unauthenticated(
    start: Start, tmp_path: Path
) -> None:
    key, tables = jwt_setup(tmp_path)
    server = await start(tables)
    created = await server.runs.CreateRun(create_request("from a JWT"), metadata=signed(key))
    listed = await server.runs.ListRuns(pb.ListRunsRequest(), metadata=signed(key, sub="dave"))
    assert [r.id for r in listed.runs] == [created.run_id]  # the tenant is the org claim
    alice = await server.runs.ListRuns(pb.ListRunsRequest(), metadata=bearer("alice"))
    assert list(alice.runs) == []
    other_key = ec.generate_private_key(ec.SECP256R1())
    refused = {
        "expired": signed(key, exp=int(time.time()) - 3600),
        "wrong audience": signed(key, aud="someone-else"),
        "wrong issuer": signed(key, iss="https://evil.example/"),
        "wrong key": signed(other_key),
        "no tenant": signed(key, org=None),
    }
    for label, metadata in refused.items():
        code, details = await code_of(server.runs.ListRuns(pb.ListRunsRequest(), metadata=metadata))
        assert code == grpc.StatusCode.UNAUTHENTICATED, label
        assert metadata[0][1].split()[1] not in details
        if label == "expired":
            assert details == "the token has expired"


async def test_mtls_takes_the_caller_from_the_client_certificate(
    start: Start, tmp_path: Path
) -> None:
    ca = CertificateAuthority(tmp_path)
    server_pem = ca.server()
    tables = {
        "auth": {"mode": "mtls"},
        "tls": {
            "cert_file": str(server_pem.cert_file),
            "key_file": str(server_pem.key_file),
            "client_ca_file": str(ca.pem.cert_file),
        },
    }
    server = await start(tables)

    def channel(client: Any = None) -> grpc.aio.Channel:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=ca.pem.cert,
            private_key=client.key if client else None,
            certificate_chain=client.cert if client else None,
        )
        return grpc.aio.secure_channel(server.address, credentials)

    async with channel() as anonymous:
        code, _ = await code_of(
            rpc.RunServiceStub(anonymous).ListRuns(pb.ListRunsRequest(), timeout=5)
        )
        assert code == grpc.StatusCode.UNAVAILABLE  # the handshake fails: no certificate
    erin = ca.client("erin", principal="erin", tenant="acme")
    frank = ca.client("frank", principal="frank", tenant="umbrella")
    async with channel(erin) as as_erin, channel(frank) as as_frank:
        created = await rpc.RunServiceStub(as_erin).CreateRun(create_request("mutual"))
        mine = await rpc.RunServiceStub(as_erin).ListRuns(pb.ListRunsRequest())
        theirs = await rpc.RunServiceStub(as_frank).ListRuns(pb.ListRunsRequest())
    assert [r.id for r in mine.runs] == [created.run_id]
    assert list(theirs.runs) == []


def test_listening_off_loopback_without_auth_or_tls_refuses_to_start() -> None:
    for tables in ({}, auth_tables()):
        with pytest.raises(ValueError, match="is not a loopback address") as err:
            Settings().with_values({"listen": "0.0.0.0:0", **tables}, source="test")
        assert "allow_insecure" in str(err.value)
    allowed = auth_tables(allow_insecure=True)
    assert Settings().with_values({"listen": "0.0.0.0:0", **allowed}, source="t").auth.mode


# --- tenants ------------------------------------------------------------------------------


async def test_another_tenants_ids_answer_exactly_as_ids_that_do_not_exist(start: Start) -> None:
    server = await start(auth_tables())
    runs, snapshots = server.runs, server.snapshots
    key = str(uuid.uuid4())
    a_run = await runs.CreateRun(
        create_request(SLOW, model="script", client_request_id=key), metadata=bearer("alice")
    )
    a_id, a_session = a_run.run_id, a_run.session_id
    nobody = str(uuid.uuid4())

    async def same_as_missing(call: Callable[[str], Awaitable[Any]]) -> None:
        theirs = await code_of(call(a_id))
        missing = await code_of(call(nobody))
        assert theirs[0] == missing[0] == grpc.StatusCode.NOT_FOUND
        assert theirs[1].replace(a_id, "ID") == missing[1].replace(nobody, "ID")

    md = bearer("bob")
    await same_as_missing(lambda i: runs.GetRun(pb.GetRunRequest(run_id=i), metadata=md))
    await same_as_missing(
        lambda i: runs.GetRunOutput(pb.GetRunOutputRequest(run_id=i), metadata=md)
    )
    await same_as_missing(lambda i: runs.CancelRun(pb.CancelRunRequest(run_id=i), metadata=md))
    await same_as_missing(
        lambda i: collect(runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=i), metadata=md))
    )
    await same_as_missing(
        lambda i: snapshots.GetSnapshot(pb.GetSnapshotRequest(run_id=i), metadata=md)
    )
    await same_as_missing(
        lambda i: snapshots.DeleteSnapshot(pb.DeleteSnapshotRequest(run_id=i), metadata=md)
    )
    on_theirs = await code_of(
        runs.CreateRun(create_request("x", session_id=a_session), metadata=md)
    )
    on_none = await code_of(runs.CreateRun(create_request("x", session_id=nobody), metadata=md))
    assert on_theirs[0] == on_none[0] == grpc.StatusCode.NOT_FOUND
    assert on_theirs[1].replace(a_session, "ID") == on_none[1].replace(nobody, "ID")
    # Nothing of A's is listed for B; the same key makes B a run of its own.
    assert list((await runs.ListRuns(pb.ListRunsRequest(), metadata=md)).runs) == []
    assert (
        list((await snapshots.ListSnapshots(pb.ListSnapshotsRequest(), metadata=md)).snapshots)
        == []
    )
    b_run = await runs.CreateRun(
        create_request(SLOW, model="script", client_request_id=key), metadata=md
    )
    assert b_run.run_id != a_id
    # B's cancel left A's run running: it ends completed.
    events = await collect(
        runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=a_id), metadata=bearer("alice"))
    )
    assert kind(events[-1]) == "run_completed"


async def test_compaction_settings_are_per_tenant(start: Start) -> None:
    server = await start(auth_tables())
    compaction = server.compaction
    default = await compaction.GetCompactionConfig(
        pb.GetCompactionConfigRequest(), metadata=bearer("bob")
    )
    update = pb.UpdateCompactionConfigRequest(
        auto=True, buffer_tokens=1234, keep_tokens=99, tail_turns=3, circuit_breaker_threshold=5
    )
    await compaction.UpdateCompactionConfig(update, metadata=bearer("alice"))
    alice = await compaction.GetCompactionConfig(
        pb.GetCompactionConfigRequest(), metadata=bearer("alice")
    )
    bob = await compaction.GetCompactionConfig(
        pb.GetCompactionConfigRequest(), metadata=bearer("bob")
    )
    assert alice.buffer_tokens == 1234 and alice.keep_tokens == 99
    assert bob == default


# --- limits per tenant ------------------------------------------------------------------


async def test_a_tenant_holding_all_its_streams_locks_out_nobody_else(start: Start) -> None:
    tables = {**auth_tables(), "tenants": {"acme": {"max_streams": 2}}}
    server = await start(tables)
    runs = server.runs
    slow = await runs.CreateRun(create_request(SLOW, model="script"), metadata=bearer("alice"))
    held = [
        runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=slow.run_id), metadata=bearer("alice"))
        for _ in range(2)
    ]
    for stream in held:
        await stream.read()  # open, and holding a slot
    code, details = await code_of(
        collect(
            runs.WatchRunEvents(
                pb.WatchRunEventsRequest(run_id=slow.run_id), metadata=bearer("alice")
            )
        )
    )
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details.startswith("max_streams: ")
    # Another tenant streams; everyone's unary calls and health still answer.
    theirs = await collect(
        runs.CreateRunStream(create_request("still mine"), metadata=bearer("bob"))
    )
    assert kind(theirs[-1]) == "run_completed"
    got = await runs.GetRun(pb.GetRunRequest(run_id=slow.run_id), metadata=bearer("alice"))
    assert got.run.id == slow.run_id
    health = health_pb2_grpc.HealthStub(server.channel)
    assert (await health.Check(health_pb2.HealthCheckRequest())).status == 1
    cancelled = await runs.CancelRun(
        pb.CancelRunRequest(run_id=slow.run_id), metadata=bearer("alice")
    )
    assert cancelled.status == c.RUN_STATUS_CANCELLED
    for stream in held:
        stream.cancel()


async def test_concurrent_runs_and_creations_per_minute_are_per_tenant(start: Start) -> None:
    tables = {
        **auth_tables(),
        "tenants": {"acme": {"max_concurrent_runs": 1}, "globex": {"creates_per_minute": 2}},
    }
    server = await start(tables)
    runs = server.runs
    busy = await runs.CreateRun(create_request(SLOW, model="script"), metadata=bearer("alice"))
    code, details = await code_of(runs.CreateRun(create_request("two"), metadata=bearer("alice")))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and details.startswith("max_concurrent_runs")
    for _ in range(2):
        await runs.CreateRun(create_request("allowed"), metadata=bearer("bob"))
    code, details = await code_of(runs.CreateRun(create_request("third"), metadata=bearer("bob")))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and details.startswith("creates_per_minute")
    listed = await runs.ListRuns(pb.ListRunsRequest(), metadata=bearer("bob"))
    assert len(listed.runs) == 2  # the refused creation wrote nothing
    await runs.CancelRun(pb.CancelRunRequest(run_id=busy.run_id), metadata=bearer("alice"))


async def test_a_request_over_the_tenants_size_limit_is_resource_exhausted(start: Start) -> None:
    tables = {**auth_tables(), "tenants": {"acme": {"max_request_bytes": 1000}}}
    server = await start(tables)
    big = create_request("x" * 2000)
    code, details = await code_of(server.runs.CreateRun(big, metadata=bearer("alice")))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and details.startswith("max_request_bytes")
    created = await server.runs.CreateRun(big, metadata=bearer("bob"))
    assert created.run_id
