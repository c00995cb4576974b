"""Per-topology Python environments as decisions on plain values: what a code package asks to
have installed, which environment that is (a hash, so equal requirements share one), how pip installs
it, and each environment's build state. :mod:`supervisor.venvs` carries the decisions out (venv, pip).

A topology's package may hold a ``requirements.txt``, a ``pyproject.toml`` with ``[project] dependencies``
and wheels under ``wheels/`` (:mod:`squall.core.package`). Shipped wheels make the package self-contained: pip
then installs from them alone (``--no-index --find-links wheels``), so a host without network builds it;
a package without wheels installs from the index pip is configured with (PyPI by default, or
``supervisor.worker.env.pip.args``). Wheels without requirements are installed all.

    needs = Requirements.parse({"requirements.txt": b"squall_test_dep==1.0\\n"}, wheels=())
    key = environment_key(needs, BaseInterpreter("/usr/bin/python3.11", "3.11.2"), user="alice")
    book = EnvironmentBook(retry_secs=60)
    book.want(key, now=0.0)           # START: nothing known yet, build it
    book.finished(key, None, now=9)   # READY
"""

from __future__ import annotations

import hashlib
import json
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

from squall.core.package import PYPROJECT, REQUIREMENTS, WHEELS

#: A failed build is tried again after this long (a requirement that was bad stays bad; a network that was
#: down may be back), each failure reported as a task error of the topology's tasks here.
RETRY_SECS = 300.0
#: What a build puts in an environment, in its key: a change has every supervisor build its environments again
#: (2: the console scripts of the host's packages are in its ``bin/``).
LAYOUT = 2


class BadRequirements(Exception):
    """A package's requirements cannot be read (a pyproject.toml that is not TOML, say)."""


@dataclass(frozen=True)
class Requirements:
    """What a code package asks to have installed. Empty when it asks for nothing: its workers run on the
    base interpreter, without an environment of their own."""

    requirements_txt: str = ""  # the text of its requirements.txt, given to pip as a file
    dependencies: tuple[str, ...] = ()  # its pyproject.toml's [project] dependencies
    wheels: tuple[tuple[str, int, int], ...] = ()  # (name, size, crc32) of each wheel under wheels/

    @classmethod
    def parse(cls, files: Mapping[str, bytes], wheels: Sequence[tuple[str, int, int]]) -> Requirements:
        """From the package's ``requirements.txt`` and ``pyproject.toml`` (name → content, either absent)
        and its wheels' (name, size, crc32)."""
        dependencies: tuple[str, ...] = ()
        if PYPROJECT in files:
            try:
                project = tomllib.loads(files[PYPROJECT].decode()).get("project", {})
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise BadRequirements(f"the package's {PYPROJECT} is not TOML: {exc}") from None
            dependencies = tuple(project.get("dependencies", ()))
        text = files.get(REQUIREMENTS, b"").decode(errors="replace")
        meaningful = any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines())
        return cls(text if meaningful else "", dependencies, tuple(sorted(wheels)))

    @property
    def empty(self) -> bool:
        return not (self.requirements_txt or self.dependencies or self.wheels)

    @property
    def offline(self) -> bool:
        """Installed from the shipped wheels alone, without an index."""
        return bool(self.wheels)


@dataclass(frozen=True)
class BaseInterpreter:
    """The Python a topology's environment is made from (``supervisor.worker.python``) and its version."""

    path: str
    version: str  # "3.11.2"
    stdlib: str = ""  # its standard library's directory


def environment_key(requirements: Requirements, base: BaseInterpreter, user: str = "") -> str:
    """The environment's name: a hash of what it holds, what it is made from, and whose it is (with
    ``supervisor.run.worker.as.user``, each user's environments are that user's alone)."""
    what = json.dumps(
        [
            requirements.requirements_txt,
            requirements.dependencies,
            requirements.wheels,
            base.path,
            base.version,
            user,
            LAYOUT,
        ]
    )
    return hashlib.sha256(what.encode()).hexdigest()[:20]


def pip_install_args(requirements: Requirements, sources: Path, extra: Sequence[str] = ()) -> list[str]:
    """``pip install``'s arguments for ``requirements`` whose files were unpacked into ``sources``
    (``requirements.txt``, ``wheels/``); ``extra`` are the operator's (``supervisor.worker.env.pip.args``)."""
    args = ["install", "--no-cache-dir", "--disable-pip-version-check", "--no-input", "--no-warn-script-location"]
    if requirements.offline:
        args += ["--no-index", "--find-links", str(sources / WHEELS)]
    args += list(extra)
    if requirements.requirements_txt:
        args += ["-r", str(sources / REQUIREMENTS)]
    args += list(requirements.dependencies)
    if not requirements.requirements_txt and not requirements.dependencies:
        args += [str(sources / WHEELS / name) for name, _, _ in requirements.wheels]
    return args


def console_script(python: str, module: str, attr: str) -> str:
    """A console script calling entry point ``module:attr`` on ``python``, as pip writes one for a long path: run
    by ``/bin/sh``, which hands it to ``python`` (a shebang naming a long path would be cut by the kernel)."""
    return (
        f"#!/bin/sh\n'''exec' {shlex.quote(python)} \"$0\" \"$@\"\n' '''\n"
        f"import sys\nfrom {module} import {attr.split('.')[0]}\n"
        f"if __name__ == '__main__':\n    sys.exit({attr}())\n"
    )


class EnvState(Enum):
    BUILDING = "building"
    READY = "ready"
    FAILED = "failed"


@dataclass(frozen=True)
class Build:
    """One environment's state: building → ready, or failed (with pip's error) and retried later."""

    state: EnvState
    since: float  # when it entered this state
    error: str = ""
    attempts: int = 1


@dataclass
class EnvironmentBook:
    """Each environment's build state, keyed by :func:`environment_key`; the rules on plain values and times.

    A failed build is retried once ``retry_secs`` have passed::

        book = EnvironmentBook(retry_secs=60)
        book.want("k", 0.0)                          # Decision.START: build it
        book.want("k", 1.0)                          # Decision.WAIT: building
        book.finished("k", "no squall_nope", 2.0)    # failed
        book.want("k", 61.0), book.want("k", 62.0)   # (WAIT, START): retried once 60 s have passed
    """

    retry_secs: float = RETRY_SECS
    builds: dict[str, Build] = field(default_factory=dict)

    def want(self, key: str, now: float, *, on_disk: bool = False) -> Decision:
        """A worker needs environment ``key``: whether it is ready, must be built (the caller starts the build;
        it is marked building), or must be waited for. ``on_disk``: a previous life of this supervisor built it."""
        build = self.builds.get(key)
        if build is None and on_disk:
            self.builds[key] = Build(EnvState.READY, now)
            return Decision.READY
        if build is None or (build.state is EnvState.FAILED and now - build.since >= self.retry_secs):
            self.builds[key] = Build(EnvState.BUILDING, now, attempts=1 if build is None else build.attempts + 1)
            return Decision.START
        return Decision.READY if build.state is EnvState.READY else Decision.WAIT

    def finished(self, key: str, error: str | None, now: float) -> Build:
        """A build ended: ready when ``error`` is None, else failed with it. Only a building environment ends."""
        build = self.builds.get(key)
        if build is None or build.state is not EnvState.BUILDING:
            raise ValueError(f"environment {key} is not being built ({build}): only a build ends")
        done = replace(build, state=EnvState.READY if error is None else EnvState.FAILED, since=now, error=error or "")
        self.builds[key] = done
        return done

    def collectable(self, keep: set[str], on_disk: Sequence[str]) -> list[str]:
        """Environments on disk no code version here needs any more, and not being built: to remove (and forget,
        with the failed builds no code version needs)."""
        gone = [
            key
            for key in on_disk
            if key not in keep and (key not in self.builds or self.builds[key].state is not EnvState.BUILDING)
        ]
        forgotten = [key for key, build in self.builds.items() if key not in keep and build.state is EnvState.FAILED]
        for key in [*gone, *forgotten]:
            self.builds.pop(key, None)
        return sorted(gone)


class Decision(Enum):
    READY = "ready"
    START = "start"
    WAIT = "wait"
