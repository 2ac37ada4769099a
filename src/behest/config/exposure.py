"""Whether a port may face the network: side ports (the inspector, /metrics) off loopback
only with authentication and TLS, or allow_insecure, as the gRPC port."""

from __future__ import annotations

import ipaddress

from behest.config.tables import AuthSettings, TlsSettings


def check_http_listen(http_listen: str, auth: AuthSettings, tls: TlsSettings) -> None:
    """The inspector's HTTP side: bearer or no authentication, and off loopback only with
    both authentication and TLS (or allow_insecure), as the gRPC port."""
    if http_listen and auth.mode == "mtls":
        raise ValueError(
            "http_listen: the inspector signs in with bearer tokens; auth mode 'mtls' has none"
        )
    check_exposed(auth, tls, "http_listen", http_listen, "read and run everything")


def check_exposed(auth: AuthSettings, tls: TlsSettings, key: str, listen: str, could: str) -> None:
    """A side port (the inspector, /metrics) off loopback only with authentication and TLS,
    or allow_insecure, as the gRPC port."""
    if not listen or is_loopback(listen.rpartition(":")[0]) or auth.allow_insecure:
        return
    if auth.mode == "none" or not tls.enabled:
        raise ValueError(
            f"{key} {listen!r} is not a loopback address, and the server lacks "
            f"authentication or TLS: anyone who reaches it could {could}. Set "
            "[auth] mode and [tls] cert_file/key_file, listen on 127.0.0.1, or set "
            "auth.allow_insecure = true if something else protects it"
        )


def is_loopback(host: str) -> bool:
    """Whether a host (a name, an IPv4 or IPv6 address, maybe in brackets) is this machine."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name, or "" (every interface)
