"""The Prometheus endpoint is guarded like the gRPC port: over HTTPS with the server's
certificate, a bearer token of a caller with the metrics role (or a client certificate under
mTLS), and never open off loopback without authentication and TLS."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from behest.config import Settings
from tests.certs import CertificateAuthority, Pem
from tests.support import fast_settings, start_server, stop_server

SCRAPER = secrets.token_urlsafe(32)  # a token with the metrics role
CALLER = secrets.token_urlsafe(32)  # a token of an ordinary caller


def token_table(token: str, principal: str, roles: list[str]) -> dict[str, Any]:
    sha = hashlib.sha256(token.encode()).hexdigest()
    return {"sha256": sha, "principal": principal, "tenant": "ops", "roles": roles}


def tls_table(ca: CertificateAuthority, server: Pem, *, client_ca: bool = False) -> dict[str, str]:
    table = {"cert_file": str(server.cert_file), "key_file": str(server.key_file)}
    if client_ca:
        table["client_ca_file"] = str(ca.pem.cert_file)
    return table


def scrape(
    port: int, ca: CertificateAuthority, token: str = "", client: Pem | None = None
) -> tuple[int, str, dict[str, str]]:
    """GET https://127.0.0.1:port/metrics: (status, body, headers)."""
    context = ssl.create_default_context(cafile=str(ca.pem.cert_file))
    if client is not None:
        context.load_cert_chain(str(client.cert_file), str(client.key_file))
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers)


async def test_a_scrape_needs_a_token_with_the_metrics_role_over_https(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    tables = {
        "auth": {
            "mode": "bearer",
            "tokens": {
                "prometheus": token_table(SCRAPER, "prometheus", ["metrics"]),
                "alice": token_table(CALLER, "alice", []),
            },
        },
        "tls": tls_table(ca, ca.server()),
    }
    settings = fast_settings(tmp_path, metrics_listen="127.0.0.1:0").with_tables(tables, source="t")
    server = await start_server(settings)
    try:
        port = server.app.telemetry.metrics_port
        missing = await asyncio.to_thread(scrape, port, ca)
        wrong = await asyncio.to_thread(scrape, port, ca, "not-a-token")
        no_role = await asyncio.to_thread(scrape, port, ca, CALLER)
        allowed = await asyncio.to_thread(scrape, port, ca, SCRAPER)
    finally:
        await stop_server(server)
    assert missing[0] == 401
    assert "missing credentials" in missing[1]
    assert missing[2]["WWW-Authenticate"].startswith("Bearer")
    assert (wrong[0], "invalid token" in wrong[1]) == (401, True)
    assert no_role[0] == 403
    assert "the role 'metrics'" in no_role[1]
    assert allowed[0] == 200
    assert "behest_active_runs" in allowed[1]
    for _, body, _ in (missing, wrong, no_role, allowed):
        assert CALLER not in body and SCRAPER not in body


async def test_under_mtls_a_scrape_needs_a_client_certificate(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    tables = {"auth": {"mode": "mtls"}, "tls": tls_table(ca, ca.server(), client_ca=True)}
    settings = fast_settings(tmp_path, metrics_listen="127.0.0.1:0").with_tables(tables, source="t")
    server = await start_server(settings)
    try:
        port = server.app.telemetry.metrics_port
        client = ca.client("prometheus", principal="prometheus", tenant="ops")
        allowed = await asyncio.to_thread(scrape, port, ca, "", client)
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            await asyncio.to_thread(scrape, port, ca)
    finally:
        await stop_server(server)
    assert allowed[0] == 200


def test_metrics_off_loopback_need_authentication_and_tls(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"metrics_listen '0.0.0.0:9464' is not a loopback"):
        Settings.load(data_dir=str(tmp_path), metrics_listen="0.0.0.0:9464")
    allowed = fast_settings(tmp_path).with_tables(
        {"auth": {"allow_insecure": True}, "metrics_listen": "0.0.0.0:9464"}, source="t"
    )
    assert allowed.metrics_listen == "0.0.0.0:9464"
