"""Mutual TLS for nimbus's Thrift: the contexts a conf asks for, and who a peer is.

Nimbus's TLS listener (``nimbus.thrift.tls.port``) and Squall's clients (``nimbus.thrift.client.use.tls``) both
present a certificate and check the other's against a truststore of CA certificates, as Storm 2.7's mTLS does;
the files are PEM (certificate chain and private key in one file), not Java keystores. A client's principal is
its certificate's subject common name. The UI and the logviewer serve HTTPS from the same kind of files
(``ui.https.*``, ``logviewer.https.*``, Storm's keys), asking for client certificates as Storm's
``*.https.want.client.auth`` / ``need.client.auth`` say. Every problem with a file is a
:class:`~squall.core.config.validation.ConfigError` that names the key to fix.

    server = make_server(handler, "0.0.0.0", 6067, ssl_context=server_context(conf))
    with connect("nimbus-1", 6067, tls=client_context(conf)) as nimbus:   # client_context: None without TLS
        nimbus.getClusterInfo()
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from squall.core.config.validation import ConfigError

__all__ = ["client_context", "https_context", "principal", "server_context"]

_SERVER, _CLIENT = "nimbus.thrift.tls.server", "nimbus.thrift.tls.client"


def server_context(conf: Mapping[str, Any]) -> ssl.SSLContext:
    """What nimbus's TLS listener serves with: its certificate, and client certificates required, checked against
    its truststore."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    _load(context, conf, _SERVER)
    return context


def client_context(conf: Mapping[str, Any]) -> ssl.SSLContext | None:
    """What a Squall client connects to nimbus with: None unless ``nimbus.thrift.client.use.tls``; else its
    certificate, and nimbus's checked against the truststore and the host name connected to."""
    if not conf.get("nimbus.thrift.client.use.tls"):
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the peer and its host name
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load(context, conf, _CLIENT)
    return context


def https_context(conf: Mapping[str, Any], daemon: str) -> ssl.SSLContext | None:
    """What ``daemon`` ("ui" or "logviewer") serves HTTPS with: None unless ``{daemon}.https.port`` is set; else
    its certificate, and client certificates required (``need.client.auth``), checked when given
    (``want.client.auth``) or not asked for, against ``{daemon}.https.truststore.path``::

        https_context({"ui.https.port": 8443, "ui.https.keystore.path": "ui.pem", ...}, "ui")
    """
    prefix = f"{daemon}.https"
    if conf.get(f"{prefix}.port") is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if conf.get(f"{prefix}.need.client.auth"):
        context.verify_mode = ssl.CERT_REQUIRED
    elif conf.get(f"{prefix}.want.client.auth"):
        context.verify_mode = ssl.CERT_OPTIONAL
    _load(context, conf, prefix, trust=context.verify_mode != ssl.CERT_NONE)
    return context


def principal(peer_certificate: Mapping[str, Any] | None) -> str:
    """The principal of a verified peer certificate (``SSLSocket.getpeercert()``): its subject's common name;
    "" for none."""
    for rdn in (peer_certificate or {}).get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                return str(value)
    return ""


def _load(context: ssl.SSLContext, conf: Mapping[str, Any], prefix: str, trust: bool = True) -> None:
    keystore, truststore = f"{prefix}.keystore.path", f"{prefix}.truststore.path"
    what = "HTTPS" if ".https" in prefix else "Thrift over TLS"
    for key in (keystore, truststore) if trust else (keystore,):
        if not conf.get(key):
            raise ConfigError(f"{key} is not set: {what} needs it (a PEM file)")
    try:
        # Without a password, an encrypted key fails here instead of OpenSSL prompting on the terminal.
        context.load_cert_chain(conf[keystore], password=conf.get(f"{prefix}.keystore.password") or (lambda: ""))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"{keystore}: cannot load {conf[keystore]} ({exc}); it must be a PEM file holding the "
            "certificate and its private key"
        ) from None
    if not trust:
        return
    try:
        context.load_verify_locations(cafile=conf[truststore])
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"{truststore}: cannot load {conf[truststore]} ({exc}); it must be a PEM file of CA certificates"
        ) from None
