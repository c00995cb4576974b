"""A loopback TCP proxy whose connections a test can cut and let back, to lose a ZooKeeper connection and keep its
session: kazoo goes SUSPENDED, then reconnects through the proxy on the same session (within its timeout).

    with TcpProxy("127.0.0.1", 2181) as proxy:
        client = KazooClient(hosts=proxy.address)
        proxy.cut()    # every open connection closed; new ones refused until heal()
        proxy.heal()
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class TcpProxy:
    """Forwards each connection to ``host:port``, one thread per direction."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._refusing = False
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)

    @property
    def address(self) -> str:
        return "127.0.0.1:%d" % self._server.getsockname()[1]

    def __enter__(self) -> TcpProxy:
        self._acceptor.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._closed = True
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the acceptor's accept(), which a close alone does not
        except OSError:
            pass
        self._server.close()
        self.cut()
        self._acceptor.join(10)

    def cut(self) -> None:
        """Close every forwarded connection and refuse new ones (accepted, then closed at once) until :meth:`heal`."""
        with self._lock:
            self._refusing = True
            sockets, self._open = self._open, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def heal(self) -> None:
        with self._lock:
            self._refusing = False

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            with self._lock:
                refusing = self._refusing
            if refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=10)
                upstream.settimeout(None)  # the timeout was for connecting: ZooKeeper may be quiet longer
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            try:
                sink.shutdown(socket.SHUT_RDWR)  # ends the other direction's pump, which closes its source: ``sink``
            except OSError:
                pass
            source.close()
