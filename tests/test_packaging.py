"""What ``pip install squall`` gives: the API, the core, the daemons and local mode, without the optional stacks.

Spark (``squall[spark]``) and the UI's web stack (``squall[ui]``) are extras (see squall/core/extras.py). The
slow tests install this checkout with plain ``pip install .`` into a fresh virtualenv and use it as a user
would: the README's word count under ``storm local``, the public imports, and the one line naming the extra
when something needs a stack that is not there. The quick ones check, in this (full) environment, that
importing Squall and the daemons loads neither stack.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from squall.core.extras import EXTRAS, MissingExtra, extra_for, missing_modules, require
from support import REPO, shell_lines

#: Every module the optional stacks bring (their top-level names), whichever extra.
OPTIONAL = sorted(module for _, modules in EXTRAS.values() for module in modules)

#: The top-level packages ``pip install squall`` installs (the design card's folders; docs/internals/index.md says why
#: they stay top-level names).
TOP_LEVEL = ["idl", "logviewer", "nimbus", "squall", "supervisor", "ui", "worker"]

#: The modules that import the web stack at module level: its adapter and the two web daemons.
WEB_STACK_MODULES = ("squall.core.httpd", "ui.", "logviewer.")

SPARK_TOPOLOGY = '''\
from squall import Spout, SparkBolt, Topology


class Numbers(Spout):
    outputs = ["n"]

    def next_tuple(self):
        self.emit([1])


class Total(SparkBolt):
    outputs = ["total"]

    def transform(self, batch):
        return batch.groupBy().sum("n")


topology = Topology("totals")
numbers = topology.spout("numbers", Numbers)
topology.bolt("total", Total).shuffle(numbers)
'''


# ------------------------------------------------------------------------------------------------
# Quick: which extra, and nothing optional loaded by importing Squall
# ------------------------------------------------------------------------------------------------


def loaded_modules(code: str) -> set[str]:
    """The top-level modules a fresh interpreter of this environment imports to run ``code`` (``-X importtime``)."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    return {line.rsplit("|", 1)[1].strip().partition(".")[0] for line in result.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def test_importing_the_api_loads_no_optional_stack() -> None:
    loaded = loaded_modules("import squall; from squall import Spout, Bolt, Topology, LocalTopology, SparkBolt, KafkaSpout")
    assert "squall" in loaded and "worker" in loaded  # local mode runs the worker runtime
    assert sorted(loaded & set(OPTIONAL)) == []


def test_the_daemons_and_the_command_load_no_optional_stack() -> None:
    loaded = loaded_modules("import nimbus.__main__, supervisor.__main__, worker.runtime, worker.process, "
                            "squall.cli.main, squall.cli.local, squall.dev.cluster")
    assert sorted(loaded & set(OPTIONAL)) == []


def test_require_names_the_extra_of_a_missing_module(monkeypatch: pytest.MonkeyPatch) -> None:
    require("spark", "a Spark bolt")  # installed here: nothing to say
    monkeypatch.setitem(EXTRAS, "ui", ("the web stack", ("starlette", "no_such_module_of_the_web_stack")))
    assert missing_modules("ui") == ["no_such_module_of_the_web_stack"]
    with pytest.raises(MissingExtra) as raised:
        require("ui", "the ui daemon")
    assert str(raised.value) == ("the ui daemon needs the web stack (no_such_module_of_the_web_stack not installed): "
                                 "pip install 'squall[ui]'")
    assert raised.value.extra == "ui"


def test_a_failed_import_of_a_stack_s_module_names_its_extra() -> None:
    found = extra_for(ModuleNotFoundError("No module named 'pyspark.sql'", name="pyspark.sql"))
    assert str(found) == "No module named 'pyspark' (it comes with Spark): pip install 'squall[spark]'"
    assert extra_for(ModuleNotFoundError("No module named 'helpers'", name="helpers")) is None
    assert extra_for(ValueError("pyspark")) is None


def test_the_pyproject_extras_install_what_squall_core_extras_names() -> None:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    required = " ".join(project["dependencies"])
    for extra, (_, modules) in EXTRAS.items():
        listed = " ".join(project["optional-dependencies"][extra]).replace("-", "_")
        assert [module for module in modules if module in required] == [], f"{extra}'s stack is not a main dependency"
        assert [module for module in modules if module not in listed] == [], f"squall[{extra}] installs them"
    assert "squall[spark,ui,kafka]" in project["optional-dependencies"]["test"], "the tests need every stack"


def test_every_package_of_the_checkout_is_installed() -> None:
    """setuptools installs the packages pyproject.toml lists: a new subpackage left out of the list is missing from
    every installed Squall (its import fails there, while a checkout runs fine)."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    roots = {name.split(".")[0] for name in listed} - {"idl"}
    found = {".".join(init.parent.relative_to(REPO).parts) for root in roots for init in (REPO / root).rglob("__init__.py")}
    assert found - listed == set(), "add them to [tool.setuptools] packages"


# ------------------------------------------------------------------------------------------------
# Slow: a fresh virtualenv with `pip install .`
# ------------------------------------------------------------------------------------------------


@dataclass
class Installed:
    """A virtualenv holding ``pip install .`` of this checkout, and a scratch directory to work in."""

    venv: Path
    work: Path

    @property
    def env(self) -> dict[str, str]:
        """A user's shell with the virtualenv activated: its ``bin/`` first on PATH, no PYTHONPATH (so the
        installed Squall runs, not this checkout), a conf directory of its own (no ``~/.storm``)."""
        env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "SPARK_HOME")}
        return {**env, "PATH": f"{self.venv / 'bin'}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(self.venv),
                "STORM_CONF_DIR": str(self.work / "conf")}

    def run(self, line: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``bash -c line`` in the scratch directory, as a user types it."""
        return subprocess.run(["bash", "-c", line], cwd=self.work, env=self.env, capture_output=True, text=True,
                              timeout=timeout)


def copy_checkout(destination: Path) -> None:
    """The checkout's files as a clone would have them (tracked and new ones, none that git ignores)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("fresh-venv")
    source, venv, work = root / "squall", root / "venv", root / "work"
    copy_checkout(source)
    # Without a pip of its own (ensurepip costs seconds): this environment's pip installs into it (--python).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                          "--disable-pip-version-check", str(source)], capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    (work / "conf").mkdir(parents=True)
    shutil.copytree(REPO / "examples", work / "examples")
    (work / "totals.py").write_text(SPARK_TOPOLOGY)
    return Installed(venv, work)


@pytest.mark.slow
def test_pip_install_of_the_checkout_installs_no_optional_stack(installed: Installed) -> None:
    listed = installed.run("python -c 'import importlib.metadata as m; print(*(d.name for d in m.distributions()))'")
    names = {name.lower().replace("-", "_") for name in listed.stdout.split()}
    assert {"squall", "thriftpy2", "kazoo"} <= names
    assert sorted(names & {"pyspark", "pyarrow", "pandas", "starlette", "uvicorn", "jinja2", "prometheus_client"}) == []
    top_level = installed.run("python -c 'from importlib.metadata import distribution; "
                              "print(distribution(\"squall\").read_text(\"top_level.txt\"))'")
    assert sorted(top_level.stdout.split()) == TOP_LEVEL


@pytest.mark.slow
def test_the_readme_s_word_count_runs_with_storm_local(installed: Installed) -> None:
    lines = shell_lines(REPO / "README.md")
    line = next(line for line in lines if line.startswith("storm local examples/wordcount.py"))
    assert line == "storm local examples/wordcount.py --local-ttl 10"
    result = installed.run(line)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "word counts" in result.stdout + result.stderr
    where = installed.run("python -c 'import squall; print(squall.__file__)'")
    assert where.stdout.startswith(str(installed.venv)), "the installed Squall ran, not the checkout"


@pytest.mark.slow
def test_the_public_api_imports(installed: Installed) -> None:
    result = installed.run("python -c 'from squall import Spout, Bolt, Topology, LocalTopology; print(Topology)'")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "<class 'squall.api.dsl.Topology'>\n"


@pytest.mark.slow
def test_every_module_but_the_web_stack_s_imports(installed: Installed) -> None:
    """Nothing in the core, the API, the command or the daemons imports an optional stack at module level."""
    script = f"""
import importlib, json, pkgutil
failed = {{}}
for top in {TOP_LEVEL!r}:
    package = importlib.import_module(top)
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as exc:
            failed[info.name] = getattr(exc, "name", None)
print(json.dumps(failed))
"""
    result = installed.run(f"python - <<'EOF'\n{script}\nEOF")
    assert result.returncode == 0, result.stderr
    failed = json.loads(result.stdout)
    assert sorted(name for name in failed if not name.startswith(WEB_STACK_MODULES)) == []
    assert {missing.partition(".")[0] for missing in failed.values()} <= set(EXTRAS["ui"][1])
    assert "ui.server" in failed and "logviewer.server" in failed
    for daemon in ("nimbus", "supervisor", "worker"):
        started = installed.run(f"python -m {daemon} --help")
        assert started.returncode == 0 and "--config" in started.stdout, started.stderr


@pytest.mark.slow
def test_a_spark_bolt_without_the_spark_extra_fails_at_submit_in_one_line(installed: Installed) -> None:
    said = ("totals.py:20: bolt 'total' (Total) needs Spark (pyspark, pyarrow, pandas not installed): "
            "pip install 'squall[spark]'\n")
    for verb in ("local", "jar"):
        result = installed.run(f"storm {verb} totals.py")
        assert (result.returncode, result.stderr) == (1, f"storm {verb}: {said}")
    direct = installed.run("python -c 'import totals; from squall import LocalTopology; "
                           "LocalTopology(totals.topology)'")
    assert direct.returncode == 1
    assert direct.stderr.splitlines()[-1] == ("squall.core.extras.MissingExtra: bolt 'total' (Total) needs Spark "
                                              "(pyspark, pyarrow, pandas not installed): pip install 'squall[spark]'")
    (installed.work / "imports_spark.py").write_text("from pyspark.sql import functions as F\n" + SPARK_TOPOLOGY)
    imports = installed.run("storm local imports_spark.py")
    assert (imports.returncode, imports.stderr) == (1, "storm local: imports_spark.py:1: No module named 'pyspark' "
                                                       "(it comes with Spark): pip install 'squall[spark]'\n")


@pytest.mark.slow
def test_the_web_daemons_without_the_ui_extra_say_so_in_one_line(installed: Installed) -> None:
    missing = ("needs the web stack (starlette, uvicorn, jinja2, prometheus_client not installed): "
               "pip install 'squall[ui]'")
    for verb, what in (("ui", "the ui daemon"), ("logviewer", "the logviewer daemon"),
                       ("dev-cluster", "the dev cluster (its UI and logviewer)")):
        result = installed.run(f"storm {verb}")
        assert (result.returncode, result.stderr) == (1, f"storm {verb}: {what} {missing}\n")
    spark = installed.run("storm spark-connect")
    assert (spark.returncode, spark.stderr) == (1, "storm spark-connect: a Spark Connect server without $SPARK_HOME "
                                                   "needs Spark (pyspark, pyarrow, pandas not installed): "
                                                   "pip install 'squall[spark]'\n")


@pytest.mark.slow
def test_supervisord_beside_squall_shares_the_supervisor_package_and_both_run(installed: Installed) -> None:
    """The top-level name ``supervisor`` is also supervisord's (docs/internals/index.md: why Squall keeps it). Installed
    into one environment, their modules share one directory (their file names differ but ``__init__.py``, which
    the last install writes): both still run, and so does Squall's after supervisord is uninstalled. (Last in
    this file: it changes the shared environment.)"""
    pip = f"{sys.executable} -m pip --python {installed.venv / 'bin' / 'python'} --disable-pip-version-check -q"
    assert installed.run(f"{pip} install supervisor", timeout=600).returncode == 0
    squall_s = installed.run("python -m supervisor --help")  # what storm supervisor runs
    assert squall_s.returncode == 0 and squall_s.stdout.startswith("usage: storm supervisor"), squall_s.stderr
    assert installed.run("supervisord --version").returncode == 0
    assert installed.run(f"{pip} uninstall -y supervisor", timeout=600).returncode == 0
    assert installed.run("python -m supervisor --help").stdout.startswith("usage: storm supervisor")
