"""The Python client and the `behest` CLI with a token, over TLS and with client certificates
(issue 12), against real servers; the CLI runs as a child process, as a user runs it."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from behest.client import BehestClient, Event, RunCompleted, TextDelta, Unauthenticated, Unavailable
from tests.certs import CertificateAuthority
from tests.support import Server, behest, fast_settings, start_server, stop_server

TOKENS = {
    "alice": ("acme", secrets.token_urlsafe(32)),
    "bob": ("globex", secrets.token_urlsafe(32)),
}
ALICE = TOKENS["alice"][1]
EXIT_RPC_ERROR = 2  # what `behest` exits with on an RPC error


def token_tables() -> dict[str, Any]:
    return {
        name: {
            "sha256": hashlib.sha256(token.encode()).hexdigest(),
            "principal": name,
            "tenant": tenant,
        }
        for name, (tenant, token) in TOKENS.items()
    }


@dataclass
class Setup:
    ca: CertificateAuthority
    plain: Server  # bearer tokens, plaintext on loopback
    tls: Server  # bearer tokens over TLS
    mtls: Server  # client certificates


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    ca = CertificateAuthority(tmp_path)
    pem = ca.server()
    bearer = {"mode": "bearer", "tokens": token_tables()}
    tls = {"cert_file": str(pem.cert_file), "key_file": str(pem.key_file)}
    running: list[Server] = []
    for name, tables in [
        ("plain", {"auth": bearer}),
        ("tls", {"auth": bearer, "tls": tls}),
        (
            "mtls",
            {"auth": {"mode": "mtls"}, "tls": {**tls, "client_ca_file": str(ca.pem.cert_file)}},
        ),
    ]:
        settings = fast_settings(tmp_path / name).with_tables(tables, source="test")
        running.append(await start_server(settings))
    try:
        yield Setup(ca, *running)
    finally:
        for server in running:
            await stop_server(server)


def assert_completed_run(events: list[Event], text: str) -> None:
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[-1].terminal and isinstance(events[-1].data, RunCompleted)
    assert "".join(e.data.delta for e in events if isinstance(e.data, TextDelta)) == text


# --- the Python client ------------------------------------------------------------------------


async def test_the_client_with_a_token_streams_a_run_over_plaintext_and_tls(
    setup: Setup,
) -> None:
    for server, tls in [(setup.plain, {}), (setup.tls, {"tls_ca": setup.ca.pem.cert_file})]:
        async with BehestClient(server.address, token=ALICE, **tls) as client:
            assert client.uses_tls == bool(tls)
            events = [e async for e in client.stream_run("hello with a token")]
            assert_completed_run(events, "hello with a token")
            run_id = events[0].run_id
            assert [e async for e in client.watch(run_id)] == events
            assert [r.id for r in await client.list_runs()] == [run_id]
            assert (await client.get_run(run_id)).id == run_id
            assert (await client.get_output(run_id)).run_id == run_id
        # The other tenant's token sees nothing of it.
        async with BehestClient(server.address, token=TOKENS["bob"][1], **tls) as client:
            assert await client.list_runs() == []


async def test_the_client_with_a_wrong_or_no_token_is_unauthenticated_at_once(
    setup: Setup,
) -> None:
    wrong = secrets.token_urlsafe(32)
    ca = setup.ca.pem.cert_file
    for token in (wrong, ""):
        async with BehestClient(setup.tls.address, token=token, tls_ca=ca) as client:
            with pytest.raises(Unauthenticated) as refused:
                _ = [e async for e in client.stream_run("not allowed")]
        assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
        assert not token or token not in str(refused.value)


async def test_the_client_with_a_certificate_streams_a_run_over_mtls(setup: Setup) -> None:
    erin = setup.ca.client("erin", principal="erin", tenant="acme")
    async with BehestClient(
        setup.mtls.address,
        tls_ca=setup.ca.pem.cert_file,
        tls_cert=erin.cert_file,
        tls_key=erin.key_file,
    ) as client:
        events = [e async for e in client.stream_run("hello mutual")]
        assert_completed_run(events, "hello mutual")
        assert [r.id for r in await client.list_runs()] == [events[0].run_id]
    # Without a certificate the handshake fails: UNAVAILABLE, not retried by a unary call.
    async with BehestClient(setup.mtls.address, tls_ca=setup.ca.pem.cert_file) as client:
        with pytest.raises(Unavailable) as refused:
            await client.list_runs()
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE


def test_the_client_constructor_checks_its_credentials(tmp_path: Path) -> None:
    BehestClient("127.0.0.1:1")  # as before: plaintext, no token
    with pytest.raises(ValueError, match="go together"):
        BehestClient("127.0.0.1:1", tls_cert=tmp_path / "c.crt")
    with pytest.raises(OSError, match="cannot read the TLS CA file"):
        BehestClient("127.0.0.1:1", tls_ca=tmp_path / "missing.crt")
    with pytest.raises(ValueError, match="not both"):
        BehestClient("127.0.0.1:1", token=ALICE, metadata=[("authorization", "Bearer x")])
    with pytest.raises(ValueError) as bad:
        BehestClient("127.0.0.1:1", token=ALICE + " more")
    assert ALICE not in str(bad.value)
    client = BehestClient("127.0.0.1:1", token=f" {ALICE}\n", metadata=[("x-trace", "1")])
    assert client.metadata == (("x-trace", "1"),)
    assert client.call_metadata == (("x-trace", "1"), ("authorization", f"Bearer {ALICE}"))


# --- the CLI ----------------------------------------------------------------------------------


async def test_the_cli_with_a_token_over_tls_runs_and_inspects_runs(setup: Setup) -> None:
    tls = ["--server", setup.tls.address, "--tls-ca", str(setup.ca.pem.cert_file)]
    ran = await behest("run", *tls, f"--token={ALICE}", "hello over TLS")
    assert ran.code == 0, ran.err
    assert ran.out == "hello over TLS\n✓ completed (stop, 1 iteration)\n"
    run_id = ran.err.split()[1]
    # The token from $BEHEST_TOKEN, for every client command.
    env = {"BEHEST_TOKEN": ALICE}
    listed = await behest("runs", "list", *tls, env=env)
    assert listed.code == 0, listed.err
    assert run_id in listed.out
    got = await behest("runs", "get", run_id, *tls, env=env)
    assert got.code == 0 and "status    completed" in got.out, got.err
    output = await behest("runs", "output", run_id, *tls, env=env)
    assert output.code == 0 and "hello over TLS" in output.out, output.err
    watched = await behest("watch", run_id, "--after", "2", *tls, env=env)
    assert watched.code == 0, watched.err
    assert watched.out.endswith("✓ completed (stop, 1 iteration)\n")
    cancelled = await behest("runs", "cancel", run_id, *tls, env=env)
    assert cancelled.code == EXIT_RPC_ERROR
    assert cancelled.error.startswith("error: FAILED_PRECONDITION: ")
    for result in (ran, listed, got, output, watched, cancelled):
        assert ALICE not in result.out + result.err
    # The same over plaintext to loopback, without a warning.
    plain = await behest("runs", "list", "--server", setup.plain.address, env=env)
    assert plain.code == 0 and run_id not in plain.out and plain.err == "", plain.err


async def test_the_cli_with_a_wrong_token_exits_unauthenticated_without_showing_it(
    setup: Setup,
) -> None:
    wrong = secrets.token_urlsafe(32)
    tls = ["--server", setup.tls.address, "--tls-ca", str(setup.ca.pem.cert_file)]
    for args, env in [
        (["run", *tls, f"--token={wrong}", "hello"], {}),
        (["runs", "list", *tls], {"BEHEST_TOKEN": wrong}),
        (["watch", "some-run", *tls, f"--token={wrong}"], {}),
        (["runs", "list", "--server", setup.plain.address, f"--token={wrong}"], {}),
    ]:
        result = await behest(*args, env=env)
        assert result.code == EXIT_RPC_ERROR, (args, result.err)
        assert result.error.startswith("error: UNAUTHENTICATED: "), result.err
        assert "Traceback" not in result.err
        assert wrong not in result.out + result.err
    missing = await behest("runs", "list", *tls)
    assert missing.code == EXIT_RPC_ERROR
    assert missing.error.startswith("error: UNAUTHENTICATED: missing credentials")


async def test_the_cli_with_a_client_certificate_over_mtls(setup: Setup) -> None:
    erin = setup.ca.client("erin", principal="erin", tenant="acme")
    tls = ["--server", setup.mtls.address, "--tls-ca", str(setup.ca.pem.cert_file)]
    mine = ["--tls-cert", str(erin.cert_file), "--tls-key", str(erin.key_file)]
    ran = await behest("run", *tls, *mine, "hello mutual")
    assert ran.code == 0, ran.err
    assert ran.out == "hello mutual\n✓ completed (stop, 1 iteration)\n"
    listed = await behest(
        "runs",
        "list",
        *tls,
        env={"BEHEST_TLS_CERT": str(erin.cert_file), "BEHEST_TLS_KEY": str(erin.key_file)},
    )
    assert listed.code == 0 and ran.err.split()[1] in listed.out, listed.err
    # No certificate: the handshake fails.
    refused = await behest("runs", "list", *tls)
    assert refused.code == EXIT_RPC_ERROR
    assert refused.error.startswith("error: UNAVAILABLE: ")
    # A CA that did not sign the server's certificate: the client refuses the server.
    (setup.ca.directory / "other").mkdir()
    other = CertificateAuthority(setup.ca.directory / "other", name="other CA")
    wrong_ca = await behest(
        "runs",
        "list",
        "--server",
        setup.tls.address,
        "--tls-ca",
        str(other.pem.cert_file),
        env={"BEHEST_TOKEN": ALICE},
    )
    assert wrong_ca.code == EXIT_RPC_ERROR
    assert wrong_ca.error.startswith("error: UNAVAILABLE: ")
    assert ALICE not in wrong_ca.err
