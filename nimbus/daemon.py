"""The nimbus daemon: makes one :class:`~nimbus.state.NimbusState`, wires the parts that share it, serves the Thrift
handler it is given and joins the cluster (code replication, leader election).

Every nimbus serves reads; only the leader (see :mod:`nimbus.leader`) changes anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from nimbus.leader import LeaderElection
from nimbus.replication import CodeReplication
from nimbus.settings import Settings
from nimbus.state import NimbusState
from nimbus.submission import Submission
from nimbus.takeover import Takeover
from nimbus.transitions import Transitions
from nimbus.upgrading import Upgrading
from nimbus.watching import Watching
from squall.core.clock import Clock, RealClock
from squall.core.config.validation import ConfigError
from squall.core.thrift.server import ThriftServer, make_server
from squall.core.tls import server_context

log = structlog.get_logger(__name__)


class Nimbus:
    """One nimbus: Storm's master, which takes topologies in, assigns their tasks to supervisors' slots and watches
    them run. Its jobs are parts, each in its own module, sharing one :class:`~nimbus.state.NimbusState`
    (:attr:`state`):

    * :attr:`transitions` (:mod:`nimbus.transitions`): the lifecycle's actions (kill, activate, rebalance, ...);
    * :attr:`submission` (:mod:`nimbus.submission`): submit, restart, hot deploy, update;
    * :attr:`upgrading` (:mod:`nimbus.upgrading`): gray upgrades and their rollback;
    * :attr:`watching` (:mod:`nimbus.watching`): heartbeats and the monitor;
    * :attr:`settings` (:mod:`nimbus.settings`): the host blacklist and dynamic log levels;
    * :attr:`takeover` (:mod:`nimbus.takeover`): what becoming leader, and ceasing to, sets going.

    Why this shape: each job reads on its own, with the state and locks it uses in view, and as there is one
    state, no part keeps a copy of what another changes. This class only makes the state, wires the parts,
    serves the Thrift handler it is given (``nimbus/__main__.py`` composes the two, so neither imports the other)
    and joins the cluster: code replication, leader election::

        nimbus = Nimbus(conf).start(NimbusService)   # serving; leads once elected and taken over
        if nimbus.is_leader:
            topology_id = nimbus.submission.submit("wc", None, "{}", topology)
            nimbus.transitions.transition(topology_id, lifecycle.Kill(30))
        nimbus.stop()

    A write on a follower raises :class:`~nimbus.state.NotLeader`, naming the leader.
    """

    def __init__(self, conf: Mapping[str, Any], clock: Clock | None = None, *, host: str | None = None) -> None:
        self.state = state = NimbusState(conf, clock or RealClock(), host)
        self.transitions = Transitions(state)
        self.submission = Submission(state, self.transitions)
        self.upgrading = Upgrading(state, self.transitions, self.submission)
        self.watching = Watching(state, self.transitions, self.upgrading)
        self.settings = Settings(state)
        self.takeover = Takeover(state, self.transitions, self.watching)
        self.server: ThriftServer | None = None
        self.tls_server: ThriftServer | None = None

    def start(self, handler_factory: Callable[[Nimbus], object]) -> Nimbus:
        """Serve ``handler_factory(self)`` (the Thrift handler, :class:`nimbus.service.NimbusService`) and join
        the cluster: code replication and leader election."""
        state = self.state
        state.zk.start()
        state.assigner.start()
        try:
            state.port = self._serve(handler_factory(self))
        except BaseException:  # a port taken: nothing may keep the process alive behind the error
            state.assigner.stop()
            state.zk.stop()
            raise
        tls_port = self.tls_server.port if self.tls_server is not None else 0
        state.replication = CodeReplication(
            state.zk,
            state.code,
            state.conf,
            state.clock,
            state.host,
            state.port,
            is_elected=lambda: state.elected,
            tls_port=tls_port,
        ).start()
        state.election = LeaderElection(
            state.zk,
            state.host,
            state.port,
            state.clock,
            on_elected=self.takeover.lead,
            on_demoted=self.takeover.follow,
            tls_port=tls_port,
        )
        state.election.start()  # may elect at once: the takeover reads state.election
        log.info("nimbus started", host=state.host, port=state.port, tls_port=tls_port or None)
        return self

    def _serve(self, service: object) -> int:
        """Start the plain Thrift listener (``nimbus.thrift.port``, unless ``nimbus.thrift.tls.server.only``) and
        the mutual-TLS one (``nimbus.thrift.tls.port``, when set), serving the same calls; the port this nimbus is
        known by: the plain one's, else (TLS only) the TLS one's."""
        conf = self.state.conf
        tls_port, tls_only = conf["nimbus.thrift.tls.port"], conf["nimbus.thrift.tls.server.only"]
        if tls_only and tls_port is None:
            raise ConfigError(
                "nimbus.thrift.tls.server.only is true but nimbus.thrift.tls.port is not set: "
                "nimbus would serve nothing"
            )
        if conf["nimbus.authorizer"] is not None and tls_port is None:
            raise ConfigError(
                "nimbus.authorizer is set but nimbus.thrift.tls.port is not: without client "
                "certificates every caller is anonymous and may do nothing but read; set "
                "nimbus.thrift.tls.port (see docs/operations/security.md)"
            )
        serving = {
            "max_frame_bytes": conf["nimbus.thrift.max_buffer_size"],
            "client_timeout_ms": conf["storm.thrift.socket.timeout.ms"],
            "request_timeout_ms": conf["nimbus.thrift.request.timeout.ms"],
            "threads": conf["nimbus.thrift.threads"],
            "max_connections": conf["nimbus.thrift.max.connections"],
        }
        bind = conf["nimbus.thrift.bind.address"]

        def listen(port: int, key: str, **options: Any) -> ThriftServer:
            try:
                return make_server(service, bind, port, **serving, **options).start()
            except OSError as exc:
                raise OSError(
                    exc.errno,
                    f"nimbus cannot listen on {bind}:{port} (nimbus.thrift.bind.address, "
                    f"{key}): {exc.strerror}; is another nimbus running?",
                ) from None

        if tls_port is None:
            self.server = listen(conf["nimbus.thrift.port"], "nimbus.thrift.port")
            return self.server.port
        tls = listen(tls_port, "nimbus.thrift.tls.port", name="nimbus-thrift-tls", ssl_context=server_context(conf))
        if not tls_only:
            try:
                self.server = listen(conf["nimbus.thrift.port"], "nimbus.thrift.port")
            except OSError:
                tls.stop()
                raise
        self.tls_server = tls
        return self.server.port if self.server is not None else tls.port

    def stop(self) -> None:
        """Step down, stop serving, disconnect; calling it twice is harmless."""
        state = self.state
        election, servers = state.election, (self.server, self.tls_server)
        state.election, self.server, self.tls_server = None, None, None
        if election is None:
            return
        self.takeover.follow()
        election.stop()
        for server in servers:
            if server is not None:
                server.stop()
        state.replication.stop()  # started before the election: set whenever the election is
        state.assigner.stop()
        state.zk.stop()

    @property
    def port(self) -> int:
        """Where this nimbus serves Thrift: its plain port, else (TLS only) its TLS port; 0 before it starts."""
        return self.state.port

    @property
    def is_leader(self) -> bool:
        """Whether this nimbus serves writes now: elected and done taking over."""
        return self.state.is_leader
