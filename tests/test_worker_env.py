"""Per-topology Python environments: the decisions on plain values (requirements, keys, pip's
arguments, the build state machine, a gray upgrade waiting for its environment), and real builds with venv and
pip from wheels shipped in a package, offline."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import zipfile
from pathlib import Path

import pytest

from squall.core.environment import user_code_environment, with_own_scripts
from squall.core.package import build_package
from squall.core.zk.records import Assignment, WorkerAssignment
from supervisor.environments import (
    BadRequirements, BaseInterpreter, Decision, EnvironmentBook, EnvState, Requirements, environment_key,
    pip_install_args,
)
from supervisor.runas import local_user
from supervisor.sync import Download, Kill, Launch, LocalWorker, UpgradePorts, WorkerSpec, plan
from supervisor.venvs import READY_FILE, Environment, PythonEnvironments, base_interpreter, package_requirements
from support import python_for_other_users
from wheels import make_wheel

BASE = BaseInterpreter("/usr/bin/python3.11", "3.11.2")
DEP = Requirements("squall_test_dep==1.0\n", (), (("squall_test_dep-1.0-py3-none-any.whl", 300, 7),))


def test_requirements_come_from_requirements_txt_pyproject_and_wheels() -> None:
    assert Requirements.parse({"requirements.txt": b"# nothing yet\n\n"}, []).empty
    pyproject = b'[project]\nname = "wc"\ndependencies = ["requests>=2", "msgpack"]\n'
    found = Requirements.parse({"requirements.txt": b"squall_test_dep==1.0\n", "pyproject.toml": pyproject},
                               [("b.whl", 2, 3), ("a.whl", 1, 2)])
    assert found == Requirements("squall_test_dep==1.0\n", ("requests>=2", "msgpack"), (("a.whl", 1, 2), ("b.whl", 2, 3)))
    assert found.offline and not found.empty
    with pytest.raises(BadRequirements, match="the package's pyproject.toml is not TOML"):
        Requirements.parse({"pyproject.toml": b"[project\n"}, [])


def test_an_environment_is_named_by_what_it_holds_its_base_and_its_user() -> None:
    key = environment_key(DEP, BASE)
    assert key == environment_key(Requirements("squall_test_dep==1.0\n", (), DEP.wheels), BASE), "equal: shared"
    rebuilt_wheel = Requirements(DEP.requirements_txt, (), (("squall_test_dep-1.0-py3-none-any.whl", 300, 8),))
    others = {environment_key(rebuilt_wheel, BASE), environment_key(DEP, BaseInterpreter("/usr/bin/python3.11", "3.11.9")),
              environment_key(DEP, BASE, user="alice"), environment_key(DEP, BASE, user="bob")}
    assert len(others) == 4 and key not in others


def test_pip_installs_shipped_wheels_offline_and_otherwise_from_the_index() -> None:
    src = Path("/src")
    args = pip_install_args(DEP, src)
    assert args[args.index("--no-index"):] == ["--no-index", "--find-links", "/src/wheels", "-r", "/src/requirements.txt"]
    online = pip_install_args(Requirements("", ("requests>=2",)), src, ["--index-url", "https://pypi.internal/simple"])
    assert "--no-index" not in online and online[-3:] == ["--index-url", "https://pypi.internal/simple", "requests>=2"]
    wheels_only = pip_install_args(Requirements(wheels=(("a-1-py3-none-any.whl", 1, 1),)), src)
    assert wheels_only[-1] == "/src/wheels/a-1-py3-none-any.whl", "wheels without requirements: all installed"


def test_a_build_goes_building_then_ready_or_failed_and_a_failure_is_retried_later() -> None:
    book = EnvironmentBook(retry_secs=60)
    assert book.want("k", 0.0) is Decision.START
    assert book.want("k", 1.0) is Decision.WAIT, "one build at a time"
    assert book.finished("k", "ERROR: No matching distribution found for squall_nope", 2.0).state is EnvState.FAILED
    assert book.want("k", 61.0) is Decision.WAIT, "not retried before retry_secs"
    assert book.want("k", 62.0) is Decision.START
    assert book.builds["k"].attempts == 2
    assert book.finished("k", None, 70.0).state is EnvState.READY
    assert book.want("k", 71.0) is Decision.READY
    with pytest.raises(ValueError, match="only a build ends"):
        book.finished("k", None, 72.0)
    assert book.want("built-before", 0.0, on_disk=True) is Decision.READY, "a previous life's build is reused"


def test_only_environments_no_code_version_needs_and_not_building_are_collected() -> None:
    book = EnvironmentBook()
    book.want("used", 0.0)
    book.finished("used", None, 1.0)
    book.want("old", 0.0)
    book.finished("old", None, 1.0)
    book.want("building", 0.0)
    book.want("failed", 0.0)
    book.finished("failed", "ERROR: No matching distribution found for squall_nope", 1.0)
    assert book.collectable({"used"}, ["used", "old", "building", "left-by-a-crash"]) == ["left-by-a-crash", "old"]
    assert set(book.builds) == {"used", "building"}, "a failed build no code version needs is forgotten too"


def test_a_gray_upgrade_switches_no_worker_before_the_new_versions_environment_is_ready() -> None:
    wc = "wc-1-1700000000"
    assigned = {wc: Assignment("/code", [WorkerAssignment("sup", "h", 6700, [1, 2])])}
    old = {6700: LocalWorker(WorkerSpec(wc, (1, 2), 1), "w-1", True, 50, 95)}
    upgrade = {wc: UpgradePorts(2, upgrading=frozenset({6700}))}

    def run(code: set[tuple[str, int]], unprepared: set[tuple[str, int]], workers: dict[int, LocalWorker]) -> tuple:
        return plan("sup", assigned, workers, dict.fromkeys(code, 0), {}, 100, start_timeout_secs=20,
                    worker_timeout_secs=10, upgrades=upgrade, unprepared=frozenset(unprepared)).actions

    assert run({(wc, 1)}, {(wc, 2)}, old) == (Download(wc, 2),), "fetched while the old worker runs on"
    assert run({(wc, 1), (wc, 2)}, {(wc, 2)}, old) == (), "building: the old worker runs on, no switch confirmed"
    assert run({(wc, 1), (wc, 2)}, set(), old) == (
        Kill(6700, "w-1", "switching from code version 1 to 2"), Launch(6700, WorkerSpec(wc, (1, 2), 2)))


def test_a_package_carries_its_requirements_and_wheels(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "wheels", "squall_test_dep", "1.0", {"squall_test_dep/__init__.py": "VALUE = 1\n"})
    (tmp_path / "requirements.txt").write_text("squall_test_dep==1.0\n")
    (tmp_path / "wc.py").write_text("import squall_test_dep\n")
    code = tmp_path / "code"
    code.mkdir()
    build_package([tmp_path / "wc.py", tmp_path / "requirements.txt", tmp_path / "wheels"], code / "code.pkg")
    assert sorted(zipfile.ZipFile(code / "code.pkg").namelist()) == [
        "requirements.txt", "wc.py", f"wheels/{wheel.name}"]
    needs = package_requirements(code)
    assert needs.requirements_txt == "squall_test_dep==1.0\n" and [w[0] for w in needs.wheels] == [wheel.name]
    (tmp_path / "empty" / "wheels").mkdir(parents=True)
    with pytest.raises(ValueError, match="holds no wheel .*pip wheel -r requirements.txt"):
        build_package([tmp_path / "empty" / "wheels"], tmp_path / "x.zip")


def test_a_bad_supervisor_worker_python_is_refused_naming_the_fix(tmp_path: Path) -> None:
    from squall.core.config.validation import ConfigError
    with pytest.raises(ConfigError, match="supervisor.worker.python /no/python does not run"):
        base_interpreter({"supervisor.worker.python": "/no/python"})
    assert base_interpreter({}).path == sys.executable


def _package(directory: Path, requirements: str, wheels: dict[str, str]) -> Path:
    """A code directory whose package requires ``requirements`` and ships a wheel of each name → module source."""
    directory.mkdir(parents=True)
    sources = [directory / "requirements.txt"]
    sources[0].write_text(requirements)
    for name, source in wheels.items():
        make_wheel(directory / "wheels", name, "99.0", {f"{name}/__init__.py": source})
    build_package([*sources, directory / "wheels"] if wheels else sources, directory / "code.pkg")
    return directory


def _built(envs: PythonEnvironments, code: Path, done: threading.Event) -> Environment:
    first = envs.for_code(code, None)
    assert first.state is EnvState.BUILDING
    assert done.wait(120), "the build ended"
    return envs.for_code(code, None)


def _run(environment: Environment, source: str) -> subprocess.CompletedProcess[str]:
    env = user_code_environment(os.environ)
    env.update(environment.variables(env))
    return subprocess.run([environment.python, "-c", source], capture_output=True, text=True, env=env, timeout=60)


def test_an_environment_is_built_from_shipped_wheels_and_its_packages_win_over_the_hosts(tmp_path: Path) -> None:
    """The topology's squall_test_dep (no host has it) and its own pox (the host's is 0.3.x) import from the
    environment, Squall and the rest from the host; its bin/ comes first on PATH; the next supervisor life
    reuses it, and it goes when no code version needs it."""
    code = _package(tmp_path / "code", "squall_test_dep\npox==99.0\n",
                    {"squall_test_dep": "VALUE = 'wheel'\n", "pox": "__version__ = 'the topology'\n"})
    assert subprocess.run([sys.executable, "-c", "import squall_test_dep"], capture_output=True).returncode, \
        "not installed on this host"
    conf = {"storm.local.dir": str(tmp_path / "local"), "supervisor.worker.env.build.timeout.secs": 120}
    done = threading.Event()
    envs = PythonEnvironments(conf, base_interpreter(conf), on_change=done.set,
                              environ=lambda _user: user_code_environment(os.environ))
    ready = _built(envs, code, done)
    assert ready.state is EnvState.READY, ready.error
    seen = _run(ready, "import squall_test_dep, pox, squall, msgpack, os, sys; "
                       "print(squall_test_dep.VALUE, pox.__version__, sys.prefix, os.environ['PATH'], sep='|')")
    assert seen.returncode == 0, seen.stderr
    value, pox, prefix, path = seen.stdout.strip().split("|")
    assert (value, pox, prefix) == ("wheel", "the topology", str(ready.home))
    assert path.split(os.pathsep)[0] == str(ready.home / "bin")
    # the host's console scripts are in its bin/, run by its Python: its pip sees what only it has installed
    minimal = ready.variables({"PATH": "/usr/bin:/bin"})["PATH"]
    assert shutil.which("streamparse_run", path=minimal) == str(ready.home / "bin" / "streamparse_run")
    shown = subprocess.run([str(ready.home / "bin" / "pip"), "show", "squall_test_dep"], capture_output=True,
                           text=True, env={"PATH": minimal}, timeout=60)
    assert shown.returncode == 0 and f"Location: {ready.home / 'lib'}" in shown.stdout, shown.stderr

    again = PythonEnvironments(conf, envs.base, on_change=lambda: None, environ=lambda _user: {})
    assert again.for_code(code, None) == Environment(EnvState.READY, ready.python, ready.home, ready.key,
                                                     since=again.book.builds[ready.key].since)
    again.collect({ready.key})
    assert (ready.home / READY_FILE).exists()
    again.collect(set())
    assert not ready.home.exists()


def test_a_bad_requirement_fails_the_build_naming_it(tmp_path: Path) -> None:
    code = _package(tmp_path / "code", "squall_test_dep\nsquall_no_such_dep==9.9\n", {"squall_test_dep": "VALUE = 1\n"})
    conf = {"storm.local.dir": str(tmp_path / "local"), "supervisor.worker.env.build.timeout.secs": 120}
    done = threading.Event()
    envs = PythonEnvironments(conf, base_interpreter(conf), on_change=done.set,
                              environ=lambda _user: user_code_environment(os.environ))
    failed = _built(envs, code, done)
    assert failed.state is EnvState.FAILED
    assert "pip install failed" in failed.error and "squall_no_such_dep" in failed.error
    assert failed.home is not None and not failed.home.exists(), "a failed build leaves nothing behind"


def test_a_build_that_takes_too_long_is_killed_and_fails_saying_so(tmp_path: Path) -> None:
    code = _package(tmp_path / "code", "squall_test_dep\n", {"squall_test_dep": "VALUE = 1\n"})
    conf = {"storm.local.dir": str(tmp_path / "local"), "supervisor.worker.env.build.timeout.secs": 0.05}
    done = threading.Event()
    envs = PythonEnvironments(conf, base_interpreter(conf), on_change=done.set, environ=lambda _user: {})
    failed = _built(envs, code, done)
    assert failed.state is EnvState.FAILED
    assert re.fullmatch(r"(venv|pip install) took more than supervisor.worker.env.build.timeout.secs \(0.05s\)",
                        failed.error), failed.error
    assert failed.home is not None and not failed.home.exists()


def test_a_shell_command_is_looked_up_first_in_the_bin_of_the_workers_own_python() -> None:
    """Where the console scripts of what a worker imports are (``streamparse_run``), whatever PATH its supervisor
    was started with; an operator's PATH that has it keeps its order."""
    scripts = sysconfig.get_path("scripts")
    assert with_own_scripts({"PATH": "/usr/bin:/bin", "HOME": "/h"}) == {"PATH": f"{scripts}:/usr/bin:/bin", "HOME": "/h"}
    assert with_own_scripts({"PATH": f"/usr/bin:{scripts}"}) == {"PATH": f"/usr/bin:{scripts}"}
    assert with_own_scripts({}) == {"PATH": f"{scripts}:{os.defpath}"}


def test_a_topology_that_needs_nothing_runs_on_the_supervisors_python(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    build_package([Path(__file__)], code / "code.pkg")
    conf = {"storm.local.dir": str(tmp_path / "local"), "supervisor.worker.env.build.timeout.secs": 60}
    envs = PythonEnvironments(conf, base_interpreter(conf), on_change=lambda: None, environ=lambda _user: {})
    assert envs.for_code(code, None) == Environment(EnvState.READY, sys.executable)


@pytest.mark.skipif(os.geteuid() != 0, reason="building an environment as another user needs root")
def test_with_run_as_user_pip_runs_as_the_owner_and_the_environment_is_theirs_alone(open_dir: Path) -> None:
    """supervisor.run.worker.as.user: the environment is built by and for the topology's user (here ``nobody``) on
    a Python that user can run, 0700 and theirs, and that user's python imports the shipped package from it."""
    python, missing = python_for_other_users()
    if python is None:
        pytest.skip(f"no Python other users can run Squall's workers on: {missing}")
    code = _package(open_dir / "code", "squall_test_dep\n", {"squall_test_dep": "VALUE = 'as nobody'\n"})
    user = local_user("nobody")
    conf = {"storm.local.dir": str(open_dir / "local"), "supervisor.worker.env.build.timeout.secs": 120,
            "supervisor.worker.python": python}
    done = threading.Event()
    envs = PythonEnvironments(conf, base_interpreter(conf), on_change=done.set,
                              environ=lambda _user: user_code_environment(os.environ))
    assert envs.for_code(code, user).state is EnvState.BUILDING
    assert done.wait(120)
    ready = envs.for_code(code, user)
    assert ready.state is EnvState.READY, ready.error
    assert ready.key != environment_key(package_requirements(code), envs.base), "each user's environments are theirs"
    assert ready.home is not None and (ready.home.stat().st_uid, ready.home.stat().st_mode & 0o777) == (user.uid, 0o700)
    installed = next((ready.home / "lib").glob("python3*/site-packages/squall_test_dep/__init__.py"))
    assert installed.stat().st_uid == user.uid, "pip ran as the user"
    assert (ready.home / "bin" / "streamparse_run").stat().st_uid == user.uid, "the host's scripts are theirs too"
    seen = subprocess.run([ready.python, "-c", "import squall_test_dep, squall; print(squall_test_dep.VALUE)"],
                          capture_output=True, text=True, user=user.uid, group=user.gid, timeout=60,
                          env={**user_code_environment(os.environ), **ready.variables(os.environ)})
    assert (seen.returncode, seen.stdout.strip()) == (0, "as nobody"), seen.stderr
