"""Serving HTTP from a daemon (``storm ui``, ``storm logviewer``): an ASGI app under uvicorn on a thread of its
own, and the error JSON both answer with.

The port is bound when the server is built, so a port in use (or port 0's pick) is known to the caller
before anything runs; ``start()`` returns once requests are answered.

Over HTTPS (:func:`squall.core.tls.https_context`) each request's scope carries ASGI's TLS extension,
``scope["extensions"]["tls"]``, with the client certificate's PEM and RFC 4514 name, plus ``"principal"``: its
common name, as :func:`squall.core.tls.principal` reads Thrift's peers ("" without a certificate);
:func:`http_principal` reads it.
"""

from __future__ import annotations

import contextvars
import http
import ssl
import threading
import time
from collections.abc import Mapping
from typing import Any

import structlog
import uvicorn
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

from squall.core.thrift.server import listening_socket
from squall.core.tls import https_context, principal

log = structlog.get_logger(__name__)


def error_body(status: int, message: str) -> dict[str, str]:
    """Storm's error JSON: ``{"error": "404 Not Found", "errorMessage": "..."}``.

    >>> error_body(503, "nimbus is down")
    {'error': '503 Service Unavailable', 'errorMessage': 'nimbus is down'}
    """
    return {"error": f"{status} {http.HTTPStatus(status).phrase}", "errorMessage": message}


def daemon_address(conf: Mapping[str, Any], daemon: str) -> tuple[str, int, str, ssl.SSLContext | None]:
    """Where ``daemon`` ("ui", "logviewer") listens: host, port, the keys that set them (for errors), and its
    HTTPS context — ``{daemon}.https.port`` with TLS when that is set, else ``{daemon}.port`` plain."""
    tls = https_context(conf, daemon)
    port_key = f"{daemon}.https.port" if tls is not None else f"{daemon}.port"
    return conf[f"{daemon}.host"], conf[port_key], f"{daemon}.host, {port_key}", tls


def http_principal(scope: Mapping[str, Any]) -> str:
    """Who made a request: the common name of its verified TLS client certificate; "" over plain HTTP or
    without a certificate (anonymous)."""
    return str(scope.get("extensions", {}).get("tls", {}).get("principal", ""))


def identified(required: bool) -> Middleware:
    """Middleware refusing (403, Storm's error JSON) every request whose user is anonymous — no verified client
    certificate — when ``required`` (an authorizer is on); nothing otherwise::

        Starlette(routes=routes, middleware=[identified(Authorizer(conf).enabled)])
    """
    return Middleware(_Identified, required=required)


class _Identified:
    def __init__(self, app: Any, required: bool) -> None:
        self.app, self.required = app, required

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.required and scope["type"] == "http" and not http_principal(scope):
            refusal = JSONResponse(
                error_body(
                    403,
                    "an anonymous caller (no client certificate) may not use this "
                    "server: nimbus.authorizer is on; connect over HTTPS with a "
                    "client certificate",
                ),
                status_code=403,
            )
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)


_RFC4514_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
}


def _rfc4514(value: str) -> str:
    r"""An attribute value escaped as RFC 4514 wants it in a distinguished name.

    >>> _rfc4514("Smith, J+R")
    'Smith\\, J\\+R'
    """
    escaped = "".join(f"\\{c}" if c in ',+"\\<>;=' else c for c in value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


def _tls_extension(ssl_object: ssl.SSLObject | None) -> dict[str, Any]:
    """ASGI's TLS extension for a connection (its peer certificate is verified by then, or absent)."""
    peer = ssl_object.getpeercert() if ssl_object is not None else None
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    subject = ",".join(
        "+".join(f"{_RFC4514_NAMES.get(name, name)}={_rfc4514(value)}" for name, value in rdn)
        for rdn in reversed((peer or {}).get("subject", ()))
    )
    return {
        "server_cert": None,
        "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)] if der else [],
        "client_cert_name": subject or None,
        "client_cert_error": None,
        "tls_version": None,
        "cipher_suite": None,
        "principal": principal(peer),
    }


class _TlsProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, adding the connection's TLS extension to each request's scope."""

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        tls, app = _tls_extension(transport.get_extra_info("ssl_object")), self.app

        async def with_tls(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                scope["extensions"] = {**scope.get("extensions", {}), "tls": tls}
            await app(scope, receive, send)

        self.app = with_tls


class HttpServer:
    """An ASGI ``app`` served on ``host``:``port`` (0: a free port, then in ``.port``); ``name`` is the daemon's,
    for its log lines (``ui started``), ``title`` and ``keys`` (the config keys that set the address) are for
    the error a busy port raises::

        server = HttpServer(app, "127.0.0.1", 0, name="ui", title="the UI", keys="ui.host, ui.port").start()
        print(f"http://127.0.0.1:{server.port}/")
        server.stop()

    A stop waits ``grace_secs`` at most for requests in flight. With ``tls`` (:func:`squall.core.tls.https_context`)
    it serves HTTPS only.
    """

    def __init__(
        self,
        app: Any,
        host: str,
        port: int,
        *,
        name: str,
        title: str,
        keys: str,
        grace_secs: float = 1,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.name = name
        self.host = host
        try:
            self._socket = listening_socket(host, port)
        except OSError as exc:
            raise OSError(exc.errno, f"{title} cannot listen on {host}:{port} ({keys}): {exc.strerror}") from None
        self.port: int = self._socket.getsockname()[1]
        # uvicorn leaves logging to Squall's setup (log_config=None); its lifespan protocol has nothing to run.
        https: dict[str, Any] = (
            {} if tls is None else {"http": _TlsProtocol, "ssl_context_factory": lambda _config, _default: tls}
        )
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_config=None,
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=max(1, round(grace_secs)),
                **https,
            )
        )
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 30) -> HttpServer:
        """Serve in the background; returns once the server accepts requests."""
        context = contextvars.copy_context()  # the daemon's log context, for the serving thread's lines
        self._thread = threading.Thread(
            target=context.run, args=(self._server.run, [self._socket]), name=f"{self.name}-{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the {self.name} server did not start on {self.host}:{self.port}")
            time.sleep(0.01)  # uvicorn offers no event to wait on
        log.info(f"{self.name} started", host=self.host, port=self.port)
        return self

    def stop(self) -> None:
        """Stop accepting, let requests in flight finish (uvicorn's graceful shutdown), close the port."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
        self._socket.close()
