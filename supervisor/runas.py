"""Workers as their topology's owner (``supervisor.run.worker.as.user``): who that is on this host, and the
files handed to that user.

Storm's supervisor does this through worker-launcher, a setuid C helper, so that it need not run as root.
Here the supervisor runs as root and starts each worker with ``subprocess``'s ``user=``/``group=``/
``extra_groups=``; what a worker needs (its code directory, heartbeat directory and log file) becomes its
user's, and everything else of the daemons' stays root's (storm.yaml, keys, other topologies' code).

    user = local_user("alice")      # WorkerUser(name='alice', uid=1001, gid=1001, groups=(1001,), home=...)
    hand_over(code_dir, user)       # alice's, 0700; nobody else's
"""

from __future__ import annotations

import os
import pwd
import site
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import squall
from squall.core.config.validation import ConfigError
from supervisor.environments import BaseInterpreter

KEY = "supervisor.run.worker.as.user"
#: Files of the daemons' private keys, which no worker user may read.
KEYSTORES = ("nimbus.thrift.tls.client.keystore.path", "nimbus.thrift.tls.server.keystore.path")


class NoLocalUser(Exception):
    """A topology's owner has no OS user on this host (or none may run workers): its workers are not started."""


@dataclass(frozen=True)
class WorkerUser:
    """The OS user a topology's workers run as."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str


def local_user(owner: str) -> WorkerUser:
    """The OS user a topology owned by the principal ``owner`` runs as; :class:`NoLocalUser` says why none.

    The principal is the user name, as Storm's default ``storm.principal.tolocal`` (DefaultPrincipalToLocal)
    maps it: a certificate's common name ``alice`` runs as ``alice``; ``alice@EXAMPLE.COM`` has no user. Never
    root: a principal named ``root`` would otherwise get every daemon's credential back."""
    if not owner:
        raise NoLocalUser(
            "it has no owner (submitted without TLS authentication), so there is no user to run "
            f"its workers as with {KEY}: submit it with a client certificate"
        )
    try:
        entry = pwd.getpwnam(owner)
    except KeyError:
        raise NoLocalUser(
            f"its owner has no local user {owner!r} on this host ({KEY}): create it (useradd {owner})"
        ) from None
    if entry.pw_uid == 0:
        raise NoLocalUser(f"its owner {owner!r} is uid 0 here: {KEY} never runs workers as root")
    groups = tuple(sorted(set(os.getgrouplist(owner, entry.pw_gid))))
    return WorkerUser(owner, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)


def check_supervisor(conf: Mapping[str, Any], reached: Iterable[Path]) -> None:
    """With :data:`KEY` on: the supervisor must be root, its private keys readable by it alone, and every
    directory a worker reaches through (``reached``: the local dir, the log dir, the :func:`interpreter`)
    enterable by other users. Raises :class:`ConfigError` naming what to change."""
    if not conf.get(KEY):
        return
    if os.geteuid() != 0:
        raise ConfigError(
            f"{KEY} is true but the supervisor runs as uid {os.geteuid()}: it must run as root "
            "to start workers as their topologies' owners (or set it to false)"
        )
    for key in KEYSTORES:
        keystore = conf.get(key)
        if keystore and Path(keystore).stat().st_mode & 0o077:
            raise ConfigError(
                f"{KEY}: {key} {keystore} holds the daemons' private key and workers run as other "
                f"users, but its mode is {Path(keystore).stat().st_mode & 0o777:04o}: "
                f"chmod 600 {keystore}"
            )
    for path in reached:
        closed = closed_to_others(path)
        if closed is not None:
            raise ConfigError(
                f"{KEY}: workers run as other users and must enter {closed} (reaching {path}),"
                f" whose mode is {closed.stat().st_mode & 0o777:04o}: chmod o+x {closed}"
            )


def interpreter(base: BaseInterpreter) -> list[Path]:
    """What a worker's interpreter is made of: the base Python (``supervisor.worker.python``, through its links)
    and its standard library, then the supervisor's site-packages and Squall, which workers import."""
    return [
        Path(base.path),
        Path(base.path).resolve(),
        Path(base.stdlib).resolve(),
        *map(Path, host_site_packages()),
        Path(squall.__file__).resolve().parent,
    ]


def host_site_packages() -> list[str]:
    """The supervisor's site-packages: where a worker finds Squall's dependencies (and Squall, when installed)."""
    return [p for p in site.getsitepackages() if Path(p).is_dir()]


def closed_to_others(path: Path) -> Path | None:
    """The first directory on the way to ``path`` (itself included, when a directory) that users other than
    its owner and group cannot enter, or None (directories not made yet are made enterable)."""
    path = Path(path)
    for directory in [*reversed(path.parents), *([path] if path.is_dir() else [])]:
        if directory.exists() and not directory.stat().st_mode & 0o001:
            return directory
    return None


def private_to_root(*directories: Path) -> None:
    """Directories workers pass through but must not list: root's, 0711."""
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
        os.chown(directory, 0, 0)
        directory.chmod(0o711)


def hand_over(path: Path, user: WorkerUser) -> None:
    """Give ``path`` (and everything under it) to ``user`` alone: owner ``user``, no rights for group or others."""
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.chown(item, user.uid, user.gid, follow_symlinks=False)
        if not item.is_symlink():
            item.chmod(item.stat().st_mode & 0o700)
