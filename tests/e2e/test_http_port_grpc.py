"""A gRPC client pointed at the HTTP port by mistake hears at once where gRPC is (instead of
waiting out its deadline), in plain text and over TLS; HTTP/1.1 clients there are served as
before, browsers over TLS included."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from tests.certs import CertificateAuthority
from tests.support import server_process

GRPCURL = Path(sys.executable).parent / "grpcurl"


def told(grpc_port: object) -> str:
    return f"this is behest's HTTP port; gRPC is on port {grpc_port}"


async def get_run(channel: grpc.aio.Channel) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rpc.RunServiceStub(channel).GetRun(pb.GetRunRequest(run_id="x"), timeout=10)
    return err.value


def connect_list_runs(http_port: object) -> int:
    """A Connect call (HTTP/1.1, JSON) on the HTTP port; its status."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/agent.v1.RunService/ListRuns",
        data=b"{}",
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        json.loads(response.read())
        return int(response.status)


async def test_grpcurl_at_the_http_port_is_told_the_grpc_port_at_once(tmp_path: Path) -> None:
    serving: dict[str, object] = {}
    async with server_process(tmp_path, serving, BEHEST_HTTP_LISTEN="127.0.0.1:0"):
        http = f"127.0.0.1:{serving['http_port']}"
        began = time.monotonic()
        grpcurl = await asyncio.create_subprocess_exec(
            GRPCURL, "-plaintext", http, "list", stderr=asyncio.subprocess.PIPE
        )
        _, err = await grpcurl.communicate()
        took_s = time.monotonic() - began
        async with grpc.aio.insecure_channel(http) as channel:
            refused = await get_run(channel)
        status = await asyncio.to_thread(connect_list_runs, serving["http_port"])
    assert grpcurl.returncode != 0
    assert f"code = Unavailable desc = {told(serving['port'])}" in err.decode()
    assert took_s < 5, f"grpcurl took {took_s:.1f} s"
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    assert refused.details() == told(serving["port"])
    assert status == 200


def negotiated(port: object, ca_file: Path, offered: list[str]) -> str | None:
    """The protocol a TLS handshake offering `offered` (ALPN) gets from the HTTP port."""
    context = ssl.create_default_context(cafile=str(ca_file))
    context.set_alpn_protocols(offered)
    with socket.create_connection(("127.0.0.1", int(str(port))), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.selected_alpn_protocol()


async def test_over_tls_grpc_clients_are_told_and_browsers_keep_http1(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    server = ca.server()
    tls = {
        "BEHEST_TLS__CERT_FILE": str(server.cert_file),
        "BEHEST_TLS__KEY_FILE": str(server.key_file),
    }
    serving: dict[str, object] = {}
    data = tmp_path / "data"
    async with server_process(data, serving, BEHEST_HTTP_LISTEN="127.0.0.1:0", **tls):
        http_port = serving["http_port"]
        credentials = grpc.ssl_channel_credentials(ca.pem.cert)
        async with grpc.aio.secure_channel(f"localhost:{http_port}", credentials) as channel:
            refused = await get_run(channel)
        browser = await asyncio.to_thread(
            negotiated, http_port, ca.pem.cert_file, ["h2", "http/1.1"]
        )
        grpc_like = await asyncio.to_thread(negotiated, http_port, ca.pem.cert_file, ["h2"])
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    assert refused.details() == told(serving["port"])
    assert (browser, grpc_like) == ("http/1.1", "h2")
