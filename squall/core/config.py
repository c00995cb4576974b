"""Configuration: every key Squall reads, its default, its type and why.

This module is the single place where config keys are defined. Keys keep the names Storm/JStorm users
know (`storm.zookeeper.servers`, `nimbus.seeds`, `topology.workers`, ...). Where Storm and JStorm
disagree on a default we take Storm's (snappier) value and note JStorm's in the key's doc.

Precedence (as in Storm's `Utils.readStormConfig`): built-in defaults < storm.yaml < `-c key=value`.
A `-c` value is parsed as JSON when it parses, otherwise kept as the raw string.

Durations in seconds (`*.secs`, `*.sec`) are typed float so tests can run with sub-second timers;
plain ints (what storm.yaml files carry) are accepted wherever a float is expected.

Unknown keys are kept untouched: topologies carry their own user keys through the same conf maps. One that
looks like a typo of a known key (``topology.worker``) gets a warning naming that key (:func:`typo_warnings`).

A relative ``storm.local.dir`` (the default ``storm-local``) or ``storm.log.dir`` is resolved once, when
the conf is loaded, against the directory the command runs in, so every process a daemon starts (workers
run in their code directory) receives the same absolute path. Storm resolves it against ``storm.home``,
its install directory; a pip-installed Squall has none, and the invoking directory plays that part.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import reprlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

__all__ = [
    "ConfigError",
    "Key",
    "KEYS",
    "KEY_BY_NAME",
    "TYPES",
    "default_config",
    "describe_keys",
    "find_config_file",
    "load_config",
    "parse_override",
    "read_yaml_config",
    "likely_typo",
    "redact",
    "typo_warnings",
    "unknown_keys",
    "validate_conf",
    "without_secrets",
]

DEFAULTS_SOURCE = "built-in defaults"
"""Source label used in error messages for values nobody set explicitly."""


class ConfigError(ValueError):
    """A config file, override or value is unusable; the message says which key and where from::

        try:
            conf = load_config("storm.yaml")
        except ConfigError as exc:
            print(exc.problems)      # every problem found, one line each
    """

    def __init__(self, message: str, problems: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.problems: list[str] = list(problems) or [message]


# --- value types -----------------------------------------------------------------------------------


def _is_int(v: Any) -> bool:
    # bool is an int subclass in Python; a YAML `true` for a worker count is a mistake, not 1.
    return isinstance(v, int) and not isinstance(v, bool)


def _is_float(v: Any) -> bool:
    # ints are fine where floats are expected (storm.yaml writes `30`, not `30.0`); NaN/inf are not.
    if _is_int(v):
        return True
    return isinstance(v, float) and math.isfinite(v)


def _is_list_of(pred: Any) -> Any:
    # tuples are accepted too: Python callers build confs by hand; JSON turns them into lists anyway.
    return lambda v: isinstance(v, (list, tuple)) and all(pred(x) for x in v)


TYPES: Mapping[str, tuple[str, Any]] = MappingProxyType(
    {
        # kind: (human description used in messages and describe_keys, checker)
        "int": ("int", _is_int),
        "float": ("number", _is_float),
        "bool": ("bool", lambda v: isinstance(v, bool)),
        "str": ("str", lambda v: isinstance(v, str)),
        "list": ("list", _is_list_of(lambda x: True)),
        "list[str]": ("list of str", _is_list_of(lambda x: isinstance(x, str))),
        "list[int]": ("list of int", _is_list_of(_is_int)),
        "map": ("map", lambda v: isinstance(v, Mapping)),
        "map[str,int]": (
            "map of str to int",
            lambda v: isinstance(v, Mapping)
            and all(isinstance(k, str) and _is_int(x) for k, x in v.items()),
        ),
    }
)
"""The value kinds a key can declare."""


@dataclass(frozen=True)
class Key:
    """One documented config key.

    `origin` says where the key and its default come from: "both" (Storm and JStorm agree),
    "storm" (Storm's value; the doc names JStorm's when it differs), "jstorm" (JStorm-only key),
    "squall" (our own key or our own default), "spark" (Spark's own key name)::

        KEY_BY_NAME["topology.workers"].default      # 1
    """

    name: str
    kind: str
    default: Any
    doc: str
    origin: str
    nullable: bool = False
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    secret: bool = False

    def __post_init__(self) -> None:
        if self.kind not in TYPES:
            raise ValueError(f"config key {self.name!r}: unknown kind {self.kind!r}")
        if self.origin not in ("both", "storm", "jstorm", "squall", "spark"):
            raise ValueError(f"config key {self.name!r}: unknown origin {self.origin!r}")
        # Keep the table immutable: a caller mutating a default list must not change it for everyone.
        if isinstance(self.default, list):
            object.__setattr__(self, "default", tuple(self.default))

    @property
    def type_name(self) -> str:
        """Human description of the accepted values, e.g. "int >= 1 or null"."""
        if self.choices is not None:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        else:
            text = TYPES[self.kind][0]
            if self.minimum is not None:
                text += f" {'>' if self.exclusive_minimum else '>='} {_num(self.minimum)}"
            if self.maximum is not None:
                text += f" <= {_num(self.maximum)}" if self.minimum is None else f" and <= {_num(self.maximum)}"
        return text + (" or null" if self.nullable else "")

    def default_value(self) -> Any:
        """A fresh, mutable copy of the default (lists come back as lists)."""
        return _thaw(self.default)

    def accepts(self, value: Any) -> bool:
        """Whether `value` has this key's type (and lies within its choices and bounds)."""
        if value is None:
            return self.nullable
        if not TYPES[self.kind][1](value):
            return False
        if self.choices is not None and value not in self.choices:
            return False
        if self.minimum is not None and _is_float(value):
            if value < self.minimum or (self.exclusive_minimum and value == self.minimum):
                return False
        if self.maximum is not None and _is_float(value) and value > self.maximum:
            return False
        return True


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _thaw(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_thaw(x) for x in v]
    if isinstance(v, Mapping):
        return {k: _thaw(x) for k, x in v.items()}
    return v


# --- the key table -----------------------------------------------------------------------------------
# Secs-valued keys use kind "float" with exclusive_minimum=0 (fractions allowed, zero would spin a timer).

_SECS = {"kind": "float", "minimum": 0, "exclusive_minimum": True}
_PORT = {"kind": "int", "minimum": 1, "maximum": 65535}
_FRACTION = {"kind": "float", "minimum": 0, "maximum": 1}

KEYS: tuple[Key, ...] = (
    # ZooKeeper -------------------------------------------------------------------------------------
    Key("storm.zookeeper.servers", "list[str]", ["localhost"], origin="both",
        doc="ZooKeeper hosts (names or IPs) every daemon and worker connects to."),
    Key("storm.zookeeper.port", default=2181, origin="both", **_PORT,
        doc="ZooKeeper client port, used for every host in storm.zookeeper.servers."),
    Key("storm.zookeeper.root", "str", "/squall", origin="squall",
        doc="Root znode (must start with '/') for all Squall state; Storm uses /storm, JStorm /jstorm, "
            "so Squall can share an ensemble with them."),
    Key("storm.zookeeper.session.timeout", "int", 20000, origin="both", minimum=1,
        doc="ZooKeeper session timeout in ms; ephemeral nodes (supervisors, leader) vanish this long after a daemon dies."),
    Key("storm.zookeeper.connection.timeout", "int", 15000, origin="both", minimum=1,
        doc="How long a daemon waits for a ZooKeeper connection at start-up, in ms."),
    Key("storm.zookeeper.retry.times", "int", 5, origin="storm", minimum=0,
        doc="Retries of a failed ZooKeeper operation before giving up (Storm 5; JStorm 20)."),
    Key("storm.zookeeper.retry.interval", "int", 1000, origin="both", minimum=0,
        doc="First retry delay in ms; doubles on each retry up to the ceiling."),
    Key("storm.zookeeper.retry.intervalceiling.millis", "int", 30000, origin="both", minimum=0,
        doc="Upper bound on the ZooKeeper retry delay, in ms."),
    Key("storm.zookeeper.auth.scheme", "str", None, origin="storm", nullable=True,
        doc="Auth scheme added to every ZooKeeper session, e.g. 'digest'; null means no auth."),
    Key("storm.zookeeper.auth.payload", "str", None, origin="storm", nullable=True, secret=True,
        doc="Credentials for the auth scheme, e.g. 'user:password' for digest; keep it out of topology confs. "
            "Daemons only: workers never receive it."),
    Key("storm.zookeeper.superACL", "str", None, origin="storm", nullable=True,
        doc="With ZooKeeper auth, one more identity ('scheme:id', e.g. 'digest:ops:<base64 sha1 of ops:password>' "
            "or 'sasl:storm') given all rights on every node the daemons create, beside their own digest."),
    Key("storm.zookeeper.topology.auth.scheme", "str", None, origin="storm", nullable=True,
        doc="A topology's own ZooKeeper auth scheme ('digest'), used by its workers; nimbus sets it at submit "
            "when the daemons authenticate to ZooKeeper."),
    Key("storm.zookeeper.topology.auth.payload", "str", None, origin="storm", nullable=True, secret=True,
        doc="A topology's own ZooKeeper credential ('user:password'), generated by nimbus at submit when unset; "
            "its workers write their task errors with it. Never shown by getTopologyConf."),
    Key("topology.transfer.secret", "str", None, origin="squall", nullable=True, secret=True,
        doc="The topology's worker-transfer secret: its workers prove it to each other (HMAC challenge-response) "
            "before any tuple is read. Nimbus generates one at submit when unset and keeps it across gray "
            "upgrades; never shown by getTopologyConf, never seen by components."),
    # Local state, cluster, logging --------------------------------------------------------------------
    Key("storm.local.dir", "str", "storm-local", origin="storm",
        doc="Local state dir (code, supervisor id, worker heartbeats, pids); a relative path is resolved against "
            "the directory the command runs in, once, when the conf is loaded (Storm: storm.home; JStorm jstorm-local)."),
    Key("storm.local.hostname", "str", None, origin="storm", nullable=True,
        doc="Hostname this daemon advertises in ZooKeeper; null means the machine's fully qualified name."),
    Key("storm.cluster.mode", "str", "distributed", origin="both", choices=("distributed", "local"),
        doc="'local' when the whole cluster runs in one process (storm local), else 'distributed'."),
    Key("storm.scheduler", "str", "default", origin="squall", choices=("default", "even"),
        doc="Nimbus scheduler: 'default' (JStorm's) or 'even' (Storm's round robin); Storm takes a class name here."),
    Key("storm.log.dir", "str", None, origin="squall", nullable=True,
        doc="Directory for daemon and worker log files; null means <storm.local.dir>/logs."),
    Key("squall.log.format", "str", "auto", origin="squall", choices=("auto", "json", "console"),
        doc="Log rendering: JSON lines, human console, or auto (console on a TTY, JSON otherwise)."),
    Key("squall.log.level", "str", "INFO", origin="squall",
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        doc="Minimum level logged by daemons and workers."),
    # Nimbus -----------------------------------------------------------------------------------------
    Key("nimbus.seeds", "list[str]", ["localhost"], origin="storm",
        doc="Nimbus hosts clients try, in order, to find the leader (Storm 1.x+; 0.9 and JStorm used nimbus.host)."),
    Key("nimbus.thrift.port", "int", 6627, origin="storm", minimum=0, maximum=65535,
        doc="Nimbus Thrift port (framed binary); Storm's 6627 so Storm clients work (JStorm 8627); 0 binds a free port."),
    Key("nimbus.thrift.bind.address", "str", "0.0.0.0", origin="squall",
        doc="Address nimbus's Thrift server listens on: 0.0.0.0 every IPv4 interface, 127.0.0.1 this host only, "
            "or one interface's address. Storm has no such key (its nimbus binds every interface)."),
    Key("nimbus.thrift.threads", "int", 64, origin="both", minimum=1,
        doc="Threads running Thrift calls in nimbus; a connection holds one only while its call runs."),
    Key("nimbus.thrift.max.connections", "int", 512, origin="squall", minimum=1,
        doc="Open Thrift connections nimbus keeps; when full, a new client takes the longest-idle one's place."),
    Key("nimbus.thrift.request.timeout.ms", "int", 30000, origin="squall", minimum=1,
        doc="A Thrift call must arrive whole (and its reply be read) within this long, however slowly it trickles."),
    Key("nimbus.thrift.max_buffer_size", "int", 1048576, origin="storm", minimum=1,
        doc="Largest Thrift frame nimbus accepts, in bytes; bounds memory per request (JStorm 16384000)."),
    Key("nimbus.thrift.client.max_buffer_size", "int", 67108864, origin="squall", minimum=1,
        doc="Largest Thrift reply a Squall client reads from nimbus, in bytes; getTopologyInfo of a 10,000-task "
            "topology is ~5 MB (requests stay capped by nimbus.thrift.max_buffer_size)."),
    # Thrift over mutual TLS (Storm 2.7's keys; files are PEM, not Java keystores) ----------------------
    Key("nimbus.thrift.tls.port", "int", None, origin="storm", nullable=True, minimum=0, maximum=65535,
        doc="Port of nimbus's TLS listener (mutual TLS: clients must present a certificate the truststore "
            "trusts); null means none (Storm 2.7 suggests 6067). 0 binds a free port."),
    Key("nimbus.thrift.tls.server.only", "bool", False, origin="storm",
        doc="Serve only the TLS listener: the plain nimbus.thrift.port is not opened (the secure profile). "
            "Storm 1.x clients such as streamparse speak plain Thrift only."),
    Key("nimbus.thrift.tls.server.keystore.path", "str", None, origin="storm", nullable=True,
        doc="PEM file with nimbus's certificate (chain) and private key, for its TLS listener; the certificate "
            "must name the host clients connect to (subjectAltName)."),
    Key("nimbus.thrift.tls.server.keystore.password", "str", None, origin="storm", nullable=True, secret=True,
        doc="Password of the private key in nimbus.thrift.tls.server.keystore.path, if it is encrypted."),
    Key("nimbus.thrift.tls.server.truststore.path", "str", None, origin="storm", nullable=True,
        doc="PEM file of the CA certificates client certificates must chain to."),
    Key("nimbus.thrift.client.use.tls", "bool", False, origin="storm",
        doc="Squall's clients (storm CLI, Python client, supervisors, workers, other nimbuses) reach nimbus "
            "through its TLS listener with the client certificate below."),
    Key("nimbus.thrift.tls.client.keystore.path", "str", None, origin="storm", nullable=True,
        doc="PEM file with this client's certificate (chain) and private key; the certificate's subject common "
            "name is the principal nimbus sees."),
    Key("nimbus.thrift.tls.client.keystore.password", "str", None, origin="storm", nullable=True, secret=True,
        doc="Password of the private key in nimbus.thrift.tls.client.keystore.path, if it is encrypted."),
    Key("nimbus.thrift.tls.client.truststore.path", "str", None, origin="storm", nullable=True,
        doc="PEM file of the CA certificates nimbus's certificate must chain to."),
    # Authorization (Storm's SimpleACLAuthorizer model; principals are TLS client certificates' common names) --
    Key("nimbus.authorizer", "str", None, origin="storm", nullable=True,
        choices=("simple", "org.apache.storm.security.auth.authorizer.SimpleACLAuthorizer"),
        doc="Who may do what on nimbus: null lets every caller do everything (Storm's default); 'simple' (or "
            "Storm's SimpleACLAuthorizer class name) applies nimbus.admins, nimbus.users, "
            "nimbus.supervisor.users and each topology's owner, topology.users and topology.groups. Needs "
            "nimbus.thrift.tls.port: on the plain port every caller is anonymous."),
    Key("nimbus.admins", "list[str]", [], origin="storm",
        doc="Principals that may do anything (with nimbus.authorizer)."),
    Key("nimbus.users", "list[str]", [], origin="storm",
        doc="Principals that may submit topologies (with nimbus.authorizer); empty: every authenticated one."),
    Key("nimbus.supervisor.users", "list[str]", [], origin="storm",
        doc="Principals of the daemons (supervisors, their workers, other nimbuses): they may download any "
            "topology's code and conf and send heartbeats, nothing else (with nimbus.authorizer)."),
    Key("nimbus.impersonation.users", "list[str]", [], origin="squall",
        doc="Principals nimbus trusts to act for the people they authenticate (the UI's certificate): they may "
            "read any topology's conf and code and kill, rebalance, (de)activate it; the UI itself checks each "
            "HTTP user against the ACLs first (with nimbus.authorizer). Squall's Thrift carries no doAs user, so "
            "this plain list stands for Storm's nimbus.impersonation.acl."),
    Key("topology.users", "list[str]", [], origin="storm",
        doc="Principals besides the topology's owner that may operate it: kill, rebalance, (de)activate, "
            "upgrade, read its conf and code (with nimbus.authorizer)."),
    Key("topology.groups", "list[str]", [], origin="storm",
        doc="Groups whose members may operate the topology as topology.users may; a principal's groups are "
            "those of the user of that name on the nimbus host (as Storm's `id -Gn`)."),
    Key("storm.thrift.socket.timeout.ms", "int", 600000, origin="storm", minimum=1,
        doc="Client socket timeout for Thrift calls to nimbus; above nimbus.assign.timeout.secs so a submit can wait. "
            "Nimbus closes a connection idle this long between calls."),
    Key("nimbus.task.timeout.secs", default=30, origin="storm", **_SECS,
        doc="A task whose heartbeat stays unchanged this long on nimbus's clock is dead (JStorm 120)."),
    Key("nimbus.task.launch.secs", default=120, origin="storm", **_SECS,
        doc="Grace after a task is assigned before missing heartbeats count against it (JStorm 240)."),
    Key("nimbus.supervisor.timeout.secs", default=60, origin="storm", **_SECS,
        doc="The assigner ignores supervisors whose last heartbeat is older than this (JStorm 180)."),
    Key("nimbus.monitor.freq.secs", default=10, origin="both", **_SECS,
        doc="Period of the leader's task-liveness monitor."),
    Key("nimbus.code.sync.freq.secs", default=120, origin="both", **_SECS,
        doc="How often a follower nimbus copies topology code it lacks from the leader."),
    Key("nimbus.file.copy.expiration.secs", default=600, origin="storm", **_SECS,
        doc="An upload or download session idle this long is dropped (JStorm 120)."),
    Key("nimbus.inbox.jar.expiration.secs", default=3600, origin="both", **_SECS,
        doc="Uploaded topology packages left in the inbox longer than this are deleted."),
    Key("nimbus.cleanup.inbox.freq.secs", default=600, origin="both", **_SECS,
        doc="Period of the inbox cleaner."),
    Key("nimbus.assign.timeout.secs", default=300, origin="squall", **_SECS,
        doc="How long submit and rebalance wait on their assign event's latch before failing (JStorm's latch wait)."),
    Key("nimbus.max.upload.bytes", "int", 268435456, origin="squall", minimum=1,
        doc="Largest topology package (bytes) an upload may reach; bounds nimbus disk use per upload."),
    Key("nimbus.inbox.max.bytes", "int", 1073741824, origin="squall", minimum=1,
        doc="Bytes all uploads in nimbus's inbox may hold together; a chunk past it discards its upload."),
    Key("nimbus.upload.idle.secs", default=30, origin="squall", **_SECS,
        doc="An unfinished upload with no chunk for this long is dropped (checked whenever an upload begins)."),
    Key("nimbus.upload.max.per.client", "int", 4, origin="squall", minimum=1,
        doc="Unfinished uploads one client host may have at once."),
    Key("topology.min.replication.count", "int", 1, origin="both", minimum=1,
        doc="Nimbuses that must hold a topology's code before submit returns."),
    Key("topology.max.replication.wait.time.sec", "float", 60, origin="both",
        doc="Longest submit waits for topology.min.replication.count; negative waits forever (Storm)."),
    # Supervisor --------------------------------------------------------------------------------------
    Key("supervisor.slots.ports", "list[int]", [6700, 6701, 6702, 6703], origin="storm",
        doc="Worker ports this supervisor offers, one worker per port (JStorm computes them from base 6900 when null)."),
    Key("supervisor.heartbeat.frequency.secs", default=5, origin="storm", **_SECS,
        doc="How often the supervisor rewrites its /supervisors record (JStorm 60)."),
    Key("supervisor.monitor.frequency.secs", default=3, origin="storm", **_SECS,
        doc="Period of the supervisor's assignment sync and worker check, besides ZooKeeper watches (JStorm 10)."),
    Key("supervisor.worker.start.timeout.secs", default=120, origin="both", **_SECS,
        doc="A launched worker must write its first heartbeat within this or it is killed and relaunched."),
    Key("supervisor.worker.timeout.secs", default=30, origin="storm", **_SECS,
        doc="A worker whose local heartbeat is older than this is killed and relaunched (JStorm 240)."),
    Key("supervisor.worker.shutdown.sleep.secs", default=3, origin="storm", **_SECS,
        doc="Pause after signalling a worker before checking it is gone (JStorm 1)."),
    Key("supervisor.worker.env.allow", "list[str]", [], origin="squall",
        doc="Environment variables of the supervisor passed on to workers besides the built-in allow-list "
            "(PATH, HOME, LANG, LC_*, PYTHONPATH, JAVA_HOME, SPARK_HOME...: squall.core.environment.ALLOWED); "
            "every other variable stays with the supervisor."),
    Key("supervisor.worker.python", "str", None, origin="squall", nullable=True,
        doc="The Python workers run on and topologies' environments are made from (null: the supervisor's own). "
            "Must be the supervisor's minor version (workers load its packages); with supervisor.run.worker.as.user "
            "it must be one other users can run, e.g. /usr/bin/python3.11 when the supervisor's is under /root."),
    Key("supervisor.worker.env.build.timeout.secs", default=600, origin="squall", **_SECS,
        doc="Longest a topology's Python environment may take to build (venv and pip install of the requirements "
            "in its package); a build that takes longer fails, as a task error of its topology."),
    Key("supervisor.worker.env.pip.args", "list[str]", [], origin="squall",
        doc="Extra pip install arguments for topologies' environments, e.g. [\"--index-url\", \"https://pypi.internal/"
            "simple\"]; a package that ships wheels/ installs from them alone (--no-index)."),
    Key("supervisor.run.worker.as.user", "bool", False, origin="storm",
        doc="Run each worker as its topology's owner's OS user (the TLS principal recorded at submit is the user "
            "name, as Storm's DefaultPrincipalToLocal), so topology code cannot read the daemons' "
            "storm.yaml, keys or other topologies' code. The supervisor must run as root."),
    # UI daemon (storm ui) ------------------------------------------------------------------------------
    Key("ui.host", "str", "0.0.0.0", origin="storm",
        doc="Address the UI daemon binds: 0.0.0.0 is every interface (Storm 2.x's default), 127.0.0.1 this host only."),
    Key("ui.port", "int", 8080, origin="storm", minimum=0, maximum=65535,
        doc="The UI daemon's HTTP port for Storm's REST API (/api/v1/...), where streamparse's `sparse stats` "
            "looks; 0 binds a free port."),
    Key("ui.https.port", "int", None, origin="storm", nullable=True, minimum=0, maximum=65535,
        doc="Serve the UI over HTTPS on this port instead of HTTP on ui.port (Storm's ui.disable.http.binding); "
            "null: plain HTTP. The principal of a request is its client certificate's common name."),
    Key("ui.https.keystore.path", "str", None, origin="storm", nullable=True,
        doc="PEM file with the UI's HTTPS certificate (chain) and private key."),
    Key("ui.https.keystore.password", "str", None, origin="storm", nullable=True, secret=True,
        doc="Password of the private key in ui.https.keystore.path, if it is encrypted."),
    Key("ui.https.truststore.path", "str", None, origin="storm", nullable=True,
        doc="PEM file of the CA certificates HTTP users' client certificates must chain to."),
    Key("ui.https.want.client.auth", "bool", False, origin="storm",
        doc="Ask browsers for a client certificate; one without is anonymous (refused everything when "
            "nimbus.authorizer is on)."),
    Key("ui.https.need.client.auth", "bool", False, origin="storm",
        doc="Require a client certificate the truststore trusts: a connection without one fails its TLS handshake."),
    Key("ui.nimbus.timeout.secs", default=10, origin="squall", **_SECS,
        doc="How long the UI waits on nimbus (finding the leader, connecting, each reply) before it answers 503."),
    # Logviewer (storm logviewer) ------------------------------------------------------------------------
    Key("logviewer.host", "str", "0.0.0.0", origin="squall",
        doc="Address each host's logviewer binds: 0.0.0.0 is every interface, 127.0.0.1 this host only."),
    Key("logviewer.port", "int", 8000, origin="storm", minimum=0, maximum=65535,
        doc="Port of the logviewer on every supervisor host, serving its worker logs over HTTP; the UI's log "
            "links and storm logs use it; 0 binds a free port."),
    Key("logviewer.https.port", "int", None, origin="storm", nullable=True, minimum=0, maximum=65535,
        doc="Serve the logviewer over HTTPS on this port instead of HTTP on logviewer.port; null: plain HTTP. "
            "With nimbus.authorizer a worker's log is readable only by its topology's owner, topology.users, "
            "topology.groups, logs.users, logs.groups and nimbus.admins."),
    Key("logviewer.https.keystore.path", "str", None, origin="storm", nullable=True,
        doc="PEM file with the logviewer's HTTPS certificate (chain) and private key."),
    Key("logviewer.https.keystore.password", "str", None, origin="storm", nullable=True, secret=True,
        doc="Password of the private key in logviewer.https.keystore.path, if it is encrypted."),
    Key("logviewer.https.truststore.path", "str", None, origin="storm", nullable=True,
        doc="PEM file of the CA certificates readers' client certificates must chain to."),
    Key("logviewer.https.want.client.auth", "bool", False, origin="storm",
        doc="Ask readers for a client certificate; one without is anonymous."),
    Key("logviewer.https.need.client.auth", "bool", False, origin="storm",
        doc="Require a client certificate the truststore trusts: a connection without one fails its TLS handshake."),
    Key("logs.users", "list[str]", [], origin="storm",
        doc="Principals besides the topology's users that may read its workers' logs on the logviewer "
            "(with nimbus.authorizer)."),
    Key("logs.groups", "list[str]", [], origin="storm",
        doc="Groups whose members may read the topology's workers' logs, as logs.users may."),
    # Worker and task ----------------------------------------------------------------------------------
    Key("worker.heartbeat.frequency.secs", default=1, origin="storm", **_SECS,
        doc="How often a worker writes its local heartbeat for the supervisor (JStorm 2)."),
    Key("worker.memory.size", "int", 2147483648, origin="jstorm", minimum=1,
        doc="Memory budget per worker in bytes, recorded in assignments for scheduling (JStorm)."),
    Key("worker.cpu.slot.num", "int", 1, origin="jstorm", minimum=1,
        doc="CPU weight per worker, recorded in assignments for scheduling (JStorm)."),
    Key("worker.transfer.bind.address", "str", "0.0.0.0", origin="squall",
        doc="Address workers listen on for other workers' tuples, from the supervisor's conf (a topology's conf "
            "cannot move it): 0.0.0.0 every IPv4 interface, or the address storm.local.hostname resolves to. "
            "Storm has no such key (its Netty server binds every interface)."),
    Key("worker.transfer.max.connections", "int", 1024, origin="squall", minimum=1,
        doc="Connections a worker accepts from other workers; when full, a newcomer takes the place of one still "
            "owing its handshake, else of the longest idle."),
    Key("worker.transfer.socket.buffer.bytes", "int", 262144, origin="squall", minimum=4096,
        doc="Kernel socket buffer of each connection between workers, on both ends (SO_SNDBUF / SO_RCVBUF, as Storm's "
            "Netty transport sets them). Small enough that a worker not reading makes its peers' senders wait and "
            "their queues fill, so backpressure reaches their spouts: the kernel's own growth (to tens of MB on "
            "loopback) held minutes of tuples, which timed out before they were read."),
    Key("worker.transfer.handshake.timeout.secs", default=5, origin="squall", **_SECS,
        doc="A connection to a worker must name its topology within this long, or it is closed."),
    Key("worker.transfer.idle.timeout.secs", default=300, origin="squall", **_SECS,
        doc="A worker closes a connection from another worker that sent nothing this long (the sender reconnects)."),
    Key("task.heartbeat.frequency.secs", default=3, origin="storm", **_SECS,
        doc="How often each task reports its heartbeat towards nimbus (JStorm 10)."),
    Key("task.refresh.poll.secs", default=10, origin="both", **_SECS,
        doc="How often a worker re-reads its assignment and topology status, besides watches."),
    Key("task.cleanup.timeout.sec", default=10, origin="jstorm", **_SECS,
        doc="Grace between SIGTERM and SIGKILL for a topology's workers, and for tasks to stop on kill (JStorm)."),
    Key("task.on.differ.node", "bool", False, origin="jstorm",
        doc="Component conf: place each task of the component on a different node (JStorm)."),
    # Topology ----------------------------------------------------------------------------------------
    Key("topology.workers", "int", 1, origin="both", minimum=1,
        doc="Worker processes requested for the topology (an upper bound: never more than its tasks)."),
    Key("topology.acker.executors", "int", None, origin="jstorm", nullable=True, minimum=0,
        doc="Acker tasks; null means 1 (JStorm; Storm means one per worker); 0 disables acking."),
    Key("topology.tasks", "int", None, origin="both", nullable=True, minimum=1,
        doc="Component conf: task count; null means the parallelism hint. One executor per task (JStorm)."),
    Key("topology.spout.parallelism", "map[str,int]", None, origin="jstorm", nullable=True,
        doc="{spout id: n} overriding parallelism hints at submit or rebalance (JStorm)."),
    Key("topology.bolt.parallelism", "map[str,int]", None, origin="jstorm", nullable=True,
        doc="{bolt id: n} overriding parallelism hints at submit or rebalance (JStorm)."),
    Key("topology.max.task.parallelism", "int", None, origin="both", nullable=True, minimum=1,
        doc="Cap on any component's task count; null means no cap."),
    Key("topology.message.timeout.secs", default=30, origin="both", **_SECS,
        doc="A spout tuple not fully acked within this is failed; also the default kill/rebalance wait."),
    Key("topology.enable.message.timeouts", "bool", True, origin="storm",
        doc="Whether pending spout tuples time out at all."),
    Key("topology.max.spout.pending", "int", None, origin="both", nullable=True, minimum=1,
        doc="Most un-acked tuples per spout task; null means unlimited."),
    Key("topology.sleep.spout.wait.strategy.time.ms", "int", 1, origin="storm", minimum=1,
        doc="How long a spout waits after a call that emitted nothing (or a next_batch short of what it was asked "
            "for), and while the worker is backpressured: Storm's sleep spout wait strategy. A wait costs a Python "
            "worker 15-30 µs of CPU, so 1 ms keeps a quiet spout's worker at ~2.5 % of a core; longer is cheaper "
            "and delays the first tuple after a quiet spell by up to the wait."),
    Key("topology.sleep.spout.wait.strategy.max.time.ms", "int", 8, origin="squall", minimum=1,
        doc="Longest wait of a spout that keeps emitting nothing: each step that emits nothing at all doubles the "
            "wait, from topology.sleep.spout.wait.strategy.time.ms up to this, and a step that emits anything "
            "starts again from the shortest. An active spout with nothing to emit then wakes ~125 times a second, "
            "not 1,000 (~0.5 % of a core, not ~2.5-3 %), and its first tuple after a quiet spell waits up to this "
            "long; a paced spout, which has something every wait, keeps the shortest. Set it to the shortest wait "
            "for Storm's fixed sleep."),
    Key("topology.max.error.report.per.interval", "int", 5, origin="storm", minimum=1,
        doc="Errors a task may report to ZooKeeper per throttle interval; the rest are counted, not stored."),
    Key("topology.error.throttle.interval.secs", default=10, origin="storm", **_SECS,
        doc="The error throttle's interval."),
    Key("topology.worker.exit.on.error", "bool", False, origin="squall",
        doc="An exception from user code stops the worker (the supervisor restarts it) instead of failing "
            "the tuple, reporting the error and going on."),
    Key("topology.multilang.serializer", "str", "org.apache.storm.multilang.JsonSerializer", origin="storm",
        doc="How shell (multilang) components talk to their subprocess: Storm's JsonSerializer (JSON ended by "
            "'end' lines), or a MessagePack serializer (any class name with MessagePack or Msgpack in it, or "
            "'msgpack'), which pystorm speaks as '-s msgpack'. Set per component in its conf."),
    Key("topology.subprocess.timeout.secs", "float", None, origin="storm", nullable=True, minimum=0,
        exclusive_minimum=True,
        doc="A shell component's subprocess that sends nothing for this long (a bolt gets a heartbeat tuple "
            "every second; a spout is waited on for sync) is killed, its in-flight tuples fail and it is "
            "restarted; null means supervisor.worker.timeout.secs."),
    Key("topology.shellbolt.max.pending", "int", 100, origin="storm", minimum=1,
        doc="Tuples a shell bolt holds written but not yet read by its subprocess; past it the bolt stops "
            "taking input, so a slow subprocess backpressures the topology instead of filling memory."),
    Key("topology.debug", "bool", False, origin="both",
        doc="Log every emitted tuple (slow; for debugging)."),
    Key("topology.tick.tuple.freq.secs", "float", None, origin="storm", nullable=True,
        minimum=0, exclusive_minimum=True,
        doc="Send each bolt a tick tuple this often; null means no ticks."),
    Key("topology.worker.timeout.secs", "float", None, origin="storm", nullable=True,
        minimum=0, exclusive_minimum=True,
        doc="Per-topology floor for worker and task heartbeat timeouts (the larger value wins); null means none."),
    Key("topology.master.single.worker", "bool", None, origin="jstorm", nullable=True,
        doc="Give the topology master its own worker; null means only at >= 10 workers (JStorm)."),
    Key("topology.hot.deploy.enable", "bool", False, origin="jstorm",
        doc="Submit replaces the code of a running topology of the same name in place (JStorm)."),
    Key("topology.upgrade", "bool", False, origin="jstorm",
        doc="Submit starts a gray upgrade of the running topology of the same name (JStorm)."),
    Key("topology.upgrade.worker.num", "int", 0, origin="jstorm", minimum=0,
        doc="Gray upgrade batch size in workers; 0 means not set (JStorm)."),
    Key("topology.upgrade.component", "str", None, origin="jstorm", nullable=True,
        doc="Gray upgrade: upgrade the workers hosting this component's tasks (JStorm)."),
    Key("topology.upgrade.workers", "list[str]", None, origin="jstorm", nullable=True,
        doc="Gray upgrade: explicit 'host:port' workers, as a JSON list (JStorm takes a comma-separated string)."),
    Key("topology.upgrade.ttl", "int", 86400000, origin="jstorm", minimum=1,
        doc="A gray upgrade expires this many ms after it starts (JStorm code default, 1 day)."),
    Key("use.old.assignment", "bool", False, origin="jstorm",
        doc="Reuse the previous placement of a topology with the same name when resubmitted (JStorm)."),
    Key("use.userdefine.assignment", "list", None, origin="jstorm", nullable=True,
        doc="User-defined worker assignments placed before anything else (JStorm)."),
    Key("isolation.scheduler.machines", "list[str]", None, origin="jstorm", nullable=True,
        doc="Hostnames the topology is confined to; null means anywhere (JStorm)."),
    Key("jstorm.reserve.workers", "int", 0, origin="jstorm", minimum=0,
        doc="Slots the scheduler keeps free cluster-wide (JStorm)."),
    Key("topology.transfer.batch.size", "int", 100, origin="squall", minimum=1,
        doc="Most tuples per batch sent between workers; Squall 100 (Storm 1) since per-message cost is high in Python."),
    Key("topology.batch.flush.interval.millis", "int", 1, origin="storm", minimum=1,
        doc="A partial transfer batch is flushed after this many ms, bounding the latency batching adds."),
    Key("topology.executor.receive.buffer.size", "int", 32768, origin="storm", minimum=1,
        doc="Capacity of each executor's receive queue, in tuples."),
    Key("topology.transfer.buffer.size", "int", 1000, origin="storm", minimum=1,
        doc="Capacity of a worker's outbound transfer queue, in batches."),
    Key("topology.backpressure.enable", "bool", True, origin="jstorm",
        doc="Throttle senders when a task's receive queue passes the high water mark (JStorm)."),
    Key("topology.backpressure.water.mark.high", default=0.8, origin="jstorm", **_FRACTION,
        doc="Receive-queue fill ratio that throttles senders (JStorm)."),
    Key("topology.backpressure.water.mark.low", default=0.2, origin="jstorm", **_FRACTION,
        doc="Receive-queue fill ratio that releases throttled senders (JStorm yaml 0.2)."),
    Key("topology.stats.sample.rate", default=0.05, origin="storm", **_FRACTION,
        doc="Fraction of tuples sampled for per-task statistics."),
    # Spark -------------------------------------------------------------------------------------------
    Key("spark.master", "str", None, origin="spark", nullable=True,
        doc="Spark master for workers hosting Spark bolts; null means local[N] inside the worker, N = this "
            "host's cores / its slots (at least 1)."),
    Key("spark.remote", "str", None, origin="spark", nullable=True,
        doc="Spark Connect URL (sc://host:port: `storm spark-connect` on the host, or a Spark cluster's endpoint); "
            "when set, Spark bolts use it instead of spark.master and their worker runs no JVM."),
    Key("spark.batch.size", "int", 10000, origin="squall", minimum=1,
        doc="The most tuples a Spark bolt's batch holds; below it the size follows the job time (about the "
            "tuples that arrive during one job)."),
    Key("spark.batch.interval.ms", "int", 500, origin="squall", minimum=1,
        doc="... or when the oldest waiting tuple is this old, whichever comes first."),
)
"""Every key Squall knows, in documentation order."""

KEY_BY_NAME: Mapping[str, Key] = MappingProxyType({k.name: k for k in KEYS})
if len(KEY_BY_NAME) != len(KEYS):  # pragma: no cover - guards edits to the table
    raise RuntimeError("duplicate config key in squall.core.config.KEYS")


# --- public helpers ---------------------------------------------------------------------------------


def default_config() -> dict[str, Any]:
    """A fresh dict of every key's built-in default (safe to mutate)."""
    return {k.name: k.default_value() for k in KEYS}


def unknown_keys(conf: Mapping[str, Any]) -> list[str]:
    """Keys of `conf` that are not in the table, sorted; daemons may warn about likely typos."""
    return sorted(str(k) for k in conf if k not in KEY_BY_NAME)


#: How alike (difflib's ratio) an unknown key must be to a known one to be taken for its typo. A typo is an
#: edit or two away (topology.wrokers: 0.94); Storm keys Squall does not read sit just below
#: (storm.zookeeper.auth.user 0.885 from storm.zookeeper.auth.scheme, topology.executor.send.buffer.size 0.87
#: from topology.executor.receive.buffer.size) and must not draw a false "did you mean".
TYPO_CUTOFF = 0.9


def likely_typo(name: str) -> str | None:
    """The known key that ``name`` is most likely a typo of; None for a known key or a key of the user's own.

    >>> likely_typo("topology.worker"), likely_typo("topology.workers"), likely_typo("topology.my.threshold")
    ('topology.workers', None, None)
    """
    if name in KEY_BY_NAME:
        return None
    match = difflib.get_close_matches(name.lower(), KEY_BY_NAME, n=1, cutoff=TYPO_CUTOFF)
    return match[0] if match else None


def typo_warnings(conf: Mapping[str, Any], source: str | Mapping[str, str] = "config") -> list[str]:
    """One line per key of ``conf`` that looks like a typo of a known key, naming where it came from.

    ``source`` labels the keys as in :func:`validate_conf` (one label, or one per key). Topologies define
    keys of their own (``topology.my.threshold``), so an unknown key alone is no mistake: only a near miss is.

    >>> typo_warnings({"topology.worker": 3}, "topology wc conf")
    ['unknown key topology.worker (topology wc conf); did you mean topology.workers?']
    """
    warnings = []
    for name in sorted(str(k) for k in conf):
        if (match := likely_typo(name)) is not None:
            origin = source if isinstance(source, str) else source.get(name, DEFAULTS_SOURCE)
            warnings.append(f"unknown key {name} ({origin}); did you mean {match}?")
    return warnings


def redact(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `conf` with secret values (ZooKeeper credentials) masked, for logs and getNimbusConf."""
    return {k: ("***" if _is_secret(k) and v is not None else v) for k, v in conf.items()}


def without_secrets(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `conf` without its secret keys: what a worker or a component may be given.

    >>> without_secrets({"storm.zookeeper.auth.payload": "squall:pw", "topology.workers": 2})
    {'topology.workers': 2}
    """
    return {k: v for k, v in conf.items() if not _is_secret(k)}


def _is_secret(key: str) -> bool:
    return key in KEY_BY_NAME and KEY_BY_NAME[key].secret


def describe_keys(prefix: str = "") -> str:
    """The documented key table as text (for `storm` CLI help), optionally only keys under `prefix`."""
    rows = [
        (k.name, k.type_name, json.dumps(_thaw(k.default)), k.origin, k.doc)
        for k in KEYS
        if k.name.startswith(prefix)
    ]
    if not rows:
        return ""
    header = ("key", "type", "default", "origin", "doc")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    lines = []
    for r in [header, *rows]:
        lines.append("  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4])
    return "\n".join(lines)


_REPR = reprlib.Repr()  # keeps messages short when someone passes a huge value
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = 8


def _short(value: Any) -> str:
    return _REPR.repr(value)


def validate_conf(conf: Mapping[Any, Any], source: str | Mapping[str, str] = "config") -> None:
    """Check every known key in `conf` against its declared type; unknown keys pass untouched.

    `source` labels where values came from in error messages: one label for the whole conf (e.g.
    "topology conf"), or a per-key mapping (keys missing from it are labelled as built-in defaults).
    Raises ConfigError listing every problem, one per line.
    """
    problems = []
    # sorted, so the same conf gives the same message whatever order it was built in
    for name, value in sorted(conf.items(), key=lambda item: str(item[0])):
        origin = source if isinstance(source, str) else source.get(name, DEFAULTS_SOURCE)
        if not isinstance(name, str):
            problems.append(f"{origin}: config key {_short(name)} is not a string")
            continue
        key = KEY_BY_NAME.get(name)
        if key is None or key.accepts(value):
            continue
        problems.append(
            f"{origin}: config key {name!r} expects {key.type_name}, "
            f"got {_short(value)} ({type(value).__name__})"
        )
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems), problems)


def parse_override(text: str) -> tuple[str, Any]:
    """Split a `-c key=value` option at the first '='; the value is JSON when it parses, else the raw string.

    So `topology.workers=3` gives 3, `nimbus.seeds=["a","b"]` a list, `topology.debug=true` True,
    `storm.zookeeper.root=/x` the string "/x" and `a=b=c` the key "a" with value "b=c".
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep:
        raise ConfigError(f"-c {text!r}: expected key=value (no '=' found)")
    if not key:
        raise ConfigError(f"-c {text!r}: the key before '=' is empty")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


def find_config_file(path: str | os.PathLike[str] | None = None,
                     env: Mapping[str, str] | None = None) -> Path | None:
    """Locate storm.yaml: explicit `path` (must exist), else $STORM_CONF_DIR/storm.yaml, else ~/.storm/storm.yaml.

    Returns None when no file is found and none was asked for explicitly.
    """
    if path is not None:
        explicit = Path(path).expanduser()
        if not explicit.is_file():
            raise ConfigError(f"config file not found: {explicit}")
        return explicit
    env = os.environ if env is None else env
    candidates = []
    if env.get("STORM_CONF_DIR"):
        candidates.append(Path(env["STORM_CONF_DIR"]) / "storm.yaml")
    if env.get("HOME"):
        candidates.append(Path(env["HOME"]) / ".storm" / "storm.yaml")
    return next((c for c in candidates if c.is_file()), None)


def read_yaml_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read one storm.yaml; empty is fine, a non-mapping top level or non-string keys are not."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {path}: top level must be a mapping of key: value, got {type(data).__name__}"
        )
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"config file {path}: keys must be strings, got {_short(bad)}")
    return data


def _override_value(key: str, raw_text: str, value: Any) -> Any:
    """Read a `-c` value the way its key needs it, where JSON alone would get it wrong.

    A str-typed key keeps the raw string when JSON turned it into a number or bool, so
    `-c storm.local.dir=2024` or `-c topology.upgrade.component=123` mean the string. A list-of-str key
    takes a comma-separated string as its items, as JStorm's command line does
    (`-c topology.upgrade.workers=host1:6700,host2:6700`, `-c nimbus.seeds=nimbus1,nimbus2`).
    """
    spec = KEY_BY_NAME.get(key)
    if spec is not None and spec.kind == "list[str]" and isinstance(value, str) and value:
        return value.split(",")
    if spec is None or spec.kind != "str" or not isinstance(value, (int, float)):
        return value
    raw = raw_text.partition("=")[2]
    if not spec.accepts(value) and spec.accepts(raw):
        return raw
    return value


def load_config(path: str | os.PathLike[str] | None = None,
                overrides: Iterable[str] | Mapping[str, Any] = (),
                env: Mapping[str, str] | None = None,
                warn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Build a daemon/CLI conf: built-in defaults < storm.yaml < overrides, then validate it.

    `path` is --config (a missing file is an error); without it storm.yaml is looked up via
    $STORM_CONF_DIR then ~/.storm. `overrides` are `-c key=value` strings (or an already-typed
    mapping, for programmatic callers). `env` defaults to os.environ and is injectable for tests.
    `warn` gets one line per storm.yaml or override key that looks like a typo of a known key.
    Relative local and log dirs come back absolute (see the module doc).

    >>> conf = load_config(None, ["topology.workers=3"], env={})
    >>> conf["topology.workers"], Path(conf["storm.local.dir"]).is_absolute()
    (3, True)
    """
    conf = default_config()
    origins: dict[str, str] = {}

    found = find_config_file(path, env)
    if found is not None:
        for key, value in read_yaml_config(found).items():
            conf[key] = value
            origins[key] = f"storm.yaml {found}"

    if isinstance(overrides, Mapping):
        for key, value in overrides.items():
            conf[key] = value
            origins[key] = "overrides"
    else:
        for text in overrides:
            key, value = parse_override(text)
            conf[key] = _override_value(key, text, value)
            origins[key] = f"-c {text}"

    validate_conf(conf, origins)
    for line in typo_warnings({key: conf[key] for key in origins}, origins) if warn is not None else ():
        warn(line)
    for key in ("storm.local.dir", "storm.log.dir"):
        if conf[key] is not None:
            conf[key] = os.path.abspath(conf[key])
    return conf
