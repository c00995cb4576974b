"""Per-topology Python environments on a supervisor's host: virtual environments built with ``venv`` and
``pip`` in the background, one per :func:`~supervisor.environments.environment_key`, under
``<local>/supervisor/pyenvs/<key>/``. The decisions are :mod:`supervisor.environments`'; this module runs them.

An environment is a venv made from the base interpreter (``supervisor.worker.python``, default the
supervisor's own), with a ``.pth`` that adds the supervisor's site-packages *after* the environment's own:
a worker imports Squall and its dependencies from the host, and the topology's requirements, installed into
the environment, win over the host's versions. Its ``bin/`` holds the console scripts of both, run by its
Python, so a shell component's command (``streamparse_run``) is on its workers' PATH. A build runs on its own
thread (the sync loop never waits for pip), is bounded by ``supervisor.worker.env.build.timeout.secs``, and is
marked complete by a ``.ready`` file written last, so a supervisor restart reuses what was built and rebuilds
what was cut short.
With ``supervisor.run.worker.as.user``, pip runs as the topology's owner and the environment is theirs alone
(0700), as its code directory is.

    envs = PythonEnvironments(conf, base_interpreter(conf), on_change=supervisor.request_sync, environ=worker_env)
    env = envs.for_code(code_dir(conf, topology_id, 2), user=None)   # starts its build, if needed
    if env.state is EnvState.READY:
        subprocess.Popen([env.python, "-m", "worker", ...], env={**base_env, **env.variables(base_env)})
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from squall.core.config.validation import ConfigError
from squall.core.local_state import CODE_FILES, fetched_for
from squall.core.package import PYPROJECT, REQUIREMENTS, WHEELS
from supervisor.environments import (
    BadRequirements,
    BaseInterpreter,
    Decision,
    EnvironmentBook,
    EnvState,
    Requirements,
    console_script,
    environment_key,
    pip_install_args,
)
from supervisor.runas import WorkerUser, hand_over, host_site_packages

log = structlog.get_logger(__name__)

#: In an environment: written last, when pip has installed everything.
READY_FILE = ".ready"
#: Beside the environments: each build's requirements file and wheels, unpacked from the package for pip.
SOURCES = ".sources"
#: In an environment's site-packages: puts the supervisor's site-packages after the environment's own.
HOST_PTH = "_squall_host.pth"


@dataclass(frozen=True)
class Environment:
    """Where a code version's workers run: ``python`` starts them; ``home`` is the venv (None: the base
    interpreter, for a topology that needs nothing installed), whose ``bin/`` goes first on their PATH so
    shell components find its commands."""

    state: EnvState
    python: str
    home: Path | None = None
    key: str = ""
    error: str = ""
    since: float = 0.0

    def variables(self, environ: Mapping[str, str]) -> dict[str, str]:
        """What to set in a worker's environment ``environ``: PATH with the venv's ``bin/`` first, VIRTUAL_ENV."""
        if self.home is None:
            return {}
        path = environ.get("PATH", os.defpath)
        return {"PATH": f"{self.home / 'bin'}{os.pathsep}{path}", "VIRTUAL_ENV": str(self.home)}


def base_interpreter(conf: Mapping[str, Any]) -> BaseInterpreter:
    """``supervisor.worker.python`` (default: the supervisor's Python) and its version; :class:`ConfigError` when
    it does not run or is another minor version (a worker loads the supervisor's compiled dependencies)."""
    path = conf.get("supervisor.worker.python") or sys.executable
    try:
        done = subprocess.run(
            [path, "-c", _ASK_VERSION], capture_output=True, text=True, timeout=30, env={"PATH": os.defpath}
        )
        version, stdlib = [*done.stdout.split("\n"), ""][:2]
    except OSError as exc:
        raise ConfigError(f"supervisor.worker.python {path} does not run: {exc}") from None
    mine = "{}.{}".format(*sys.version_info[:2])
    if done.returncode or version.rsplit(".", 1)[0] != mine:
        raise ConfigError(
            f"supervisor.worker.python {path} is Python {version or '(no answer)'}, but workers load "
            f"the supervisor's packages, built for Python {mine}: name a Python {mine}"
        )
    return BaseInterpreter(path, version, stdlib)


_ASK_VERSION = "import sys, sysconfig; print('%d.%d.%d' % sys.version_info[:3]); print(sysconfig.get_paths()['stdlib'])"


def environments_dir(conf: Mapping[str, Any]) -> Path:
    """``<local>/supervisor/pyenvs``: this host's per-topology environments."""
    return Path(conf["storm.local.dir"]) / "supervisor" / "pyenvs"


def package_requirements(code: Path) -> Requirements:
    """What the code package in the code directory ``code`` asks to have installed (empty without a package)."""
    package = code / CODE_FILES["code"]
    if not package.exists():
        return Requirements()
    with zipfile.ZipFile(package) as archive:
        files = {name: archive.read(name) for name in (REQUIREMENTS, PYPROJECT) if name in archive.namelist()}
        wheels = [
            (info.filename.split("/", 1)[1], info.file_size, info.CRC)
            for info in archive.infolist()
            if info.filename.startswith(f"{WHEELS}/") and info.filename.endswith(".whl")
        ]
    return Requirements.parse(files, wheels)


class PythonEnvironments:
    """This host's per-topology environments: :meth:`for_code` answers (and starts builds), :meth:`collect`
    removes the ones no code version here needs."""

    def __init__(
        self,
        conf: Mapping[str, Any],
        base: BaseInterpreter,
        *,
        on_change: Callable[[], None],
        environ: Callable[[WorkerUser | None], dict[str, str]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = environments_dir(conf)
        self.root.mkdir(parents=True, exist_ok=True)
        self.base = base
        self.pip_args = list(conf.get("supervisor.worker.env.pip.args") or [])
        self.timeout_secs = float(conf["supervisor.worker.env.build.timeout.secs"])
        self.book = EnvironmentBook()
        self._on_change = on_change
        self._environ = environ
        self._clock = clock
        self._lock = threading.Lock()
        self._needs: dict[Path, tuple[int, Requirements]] = {}  # code dir → (fetched for, its requirements)
        self._steps: dict[str, subprocess.Popen[str]] = {}  # key → the build step running for it

    def for_code(self, code: Path, user: WorkerUser | None) -> Environment:
        """The environment the workers of the code version in ``code`` run in, as it stands; starts its build
        when it has none (the build calls ``on_change`` when it ends)."""
        try:
            needs = self._requirements(code)
        except (OSError, zipfile.BadZipFile, BadRequirements) as exc:
            return Environment(EnvState.FAILED, "", error=f"cannot read the package's requirements: {exc}")
        if needs.empty and self.base.path == sys.executable:
            return Environment(EnvState.READY, sys.executable)
        key = environment_key(needs, self.base, user.name if user else "")
        home = self.root / key
        with self._lock:
            decision = self.book.want(key, self._clock(), on_disk=(home / READY_FILE).exists())
            build = self.book.builds[key]
        if decision is Decision.START:
            threading.Thread(
                target=self._build, args=(key, needs, code, user), name=f"pyenv-{key[:8]}", daemon=True
            ).start()
        return Environment(build.state, str(home / "bin" / "python"), home, key, build.error, build.since)

    def collect(self, keep: Iterable[str]) -> None:
        """Remove the environments whose key is not in ``keep`` (those of the code versions assigned or running
        here) and not being built."""
        on_disk = [p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")]
        with self._lock:
            gone = self.book.collectable(set(keep), on_disk)
            building = {key for key, build in self.book.builds.items() if build.state is EnvState.BUILDING}
        for key in gone:
            log.info("removing a Python environment no code version here uses", key=key)
            shutil.rmtree(self.root / key, ignore_errors=True)
        for left in (self.root / SOURCES).glob("*"):
            if left.name not in building:  # a build cut short by a crash
                shutil.rmtree(left, ignore_errors=True)

    def stop(self) -> None:
        """Kill the build steps running (venv, pip): a supervisor that stops leaves no pip behind; the builds
        cut short are redone by its next life (no ``.ready`` file)."""
        with self._lock:
            steps = list(self._steps.values())
        for step in steps:
            try:
                os.killpg(step.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _requirements(self, code: Path) -> Requirements:
        stamp = fetched_for(code)
        known = self._needs.get(code)
        if known is None or known[0] != stamp:
            known = self._needs[code] = (stamp, package_requirements(code))
        return known[1]

    def _build(self, key: str, needs: Requirements, code: Path, user: WorkerUser | None) -> None:
        started = time.monotonic()
        home, sources = self.root / key, self.root / SOURCES / key
        log.info("building a Python environment", key=key, code=str(code), base=self.base.path)
        error: str | None = None
        try:
            for stale in (home, sources):
                shutil.rmtree(stale, ignore_errors=True)
            self._run(key, [self.base.path, "-m", "venv", "--without-pip", str(home)], "venv", None, started)
            (self._site_packages(home) / HOST_PTH).write_text(
                "".join(f"import site; site.addsitedir({p!r})\n" for p in host_site_packages())
            )
            write_host_scripts(home)
            if not needs.empty:
                self._unpack(code, sources)
                if user is not None:
                    hand_over(home, user)
                    hand_over(sources, user)
                self._run(
                    key,
                    [str(home / "bin" / "python"), "-m", "pip", *pip_install_args(needs, sources, self.pip_args)],
                    "pip install",
                    user,
                    started,
                )
            elif user is not None:
                hand_over(home, user)
            (home / READY_FILE).touch()
            log.info("Python environment ready", key=key, secs=round(time.monotonic() - started, 1))
        except BuildFailed as exc:
            error = str(exc)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            shutil.rmtree(sources, ignore_errors=True)
        if error is not None:
            log.warning("Python environment failed to build", key=key, error=error)
            shutil.rmtree(home, ignore_errors=True)
        with self._lock:
            self.book.finished(key, error, self._clock())
        self._on_change()

    def _run(self, key: str, argv: list[str], what: str, user: WorkerUser | None, started: float) -> None:
        """Run one build step (as ``user``, if any), within what is left of the build's time limit."""
        as_user: dict[str, Any] = (
            {}
            if user is None
            else {"user": user.uid, "group": user.gid, "extra_groups": list(user.groups), "umask": 0o077}
        )
        left = self.timeout_secs - (time.monotonic() - started)
        child = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            env=self._environ(user),
            cwd="/",
            **as_user,
        )
        with self._lock:
            self._steps[key] = child
        try:
            output, _ = child.communicate(timeout=max(left, 0.001))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            raise BuildFailed(
                f"{what} took more than supervisor.worker.env.build.timeout.secs ({self.timeout_secs:g}s)"
            ) from None
        finally:
            with self._lock:
                self._steps.pop(key, None)
        if child.returncode:
            raise BuildFailed(f"{what} failed (exit {child.returncode}): {_errors(output)}")

    @staticmethod
    def _site_packages(home: Path) -> Path:
        [found] = (home / "lib").glob("python3*/site-packages")
        return found

    @staticmethod
    def _unpack(code: Path, sources: Path) -> None:
        """The package's requirements file and wheels, where pip reads them."""
        sources.mkdir(parents=True, mode=0o711)
        with zipfile.ZipFile(code / CODE_FILES["code"]) as archive:
            for name in archive.namelist():
                if name == REQUIREMENTS or (name.startswith(f"{WHEELS}/") and name.count("/") == 1):
                    archive.extract(name, sources)


def write_host_scripts(home: Path) -> None:
    """Write into the environment ``home``'s ``bin/`` the console scripts of the host's packages, which it imports
    through its ``.pth``, each run by the environment's Python; pip then replaces those of the packages it
    installs there. pip finds a requirement the host has (``streamparse``) satisfied and installs neither it nor
    its scripts: without these, a shell component's command (``streamparse_run``) would be on the worker's PATH
    only when the supervisor's was (a service manager starts it without its virtualenv on PATH).

    Written before the environment is handed to its user, while no one else can write in it."""
    python = str(home / "bin" / "python")
    seen: set[str] = set()
    for dist in importlib.metadata.distributions(path=host_site_packages()):
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        if name in seen:
            continue  # a package in two of the host's site-packages: the first is the one imported
        seen.add(name)
        for entry in dist.entry_points.select(group="console_scripts"):
            script = home / "bin" / entry.name
            if entry.attr and "/" not in entry.name and not script.exists():
                script.write_text(console_script(python, entry.module, entry.attr))
                script.chmod(0o755)


class BuildFailed(Exception):
    """A step of an environment's build failed; the message says which and pip's own error."""


def _errors(output: str) -> str:
    """pip's ERROR lines (they name the requirement), else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return " ".join(errors or lines[-1:]) or "no output"
