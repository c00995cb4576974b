"""Per-topology environments on a process cluster (``storm nimbus`` + ``storm supervisor``, real ZooKeeper): a topology
importing a package no host has installed runs once its supervisor has built its environment from the wheels in
its package, offline (shipped as the Dependencies page's lines do it); a bad requirement is a task error naming it,
which ``storm get-errors`` shows."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psutil
import pytest

from processcluster import ProcessCluster
from squall.api.dsl import Topology
from squall.api.submitter import submit_topology
from squall.core.package import build_package
from squall.core.zk import paths
from support import blocks_run_by, command_lines, filed_errors, wait_until
from topologies import read_records
from wheels import make_wheel

#: The topology's module: imports squall_test_dep at the top, as user code does, and reports where it came from.
USES_DEP = '''
import os, sys, json
from pathlib import Path

import squall_test_dep
from squall.api.component import Spout


class DepReport(Spout):
    outputs = ["n"]

    def __init__(self, records):
        self.records = records

    def open(self, conf, context):
        report = {"value": squall_test_dep.VALUE, "python": sys.executable, "path": os.environ["PATH"],
                  "venv": os.environ.get("VIRTUAL_ENV"), "pid": os.getpid()}
        with open(Path(self.records) / f"dep-{context.task_id}.jsonl", "a") as out:
            out.write(json.dumps(report) + "\\n")

    def next_tuple(self):
        pass
'''


def _developer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The developer's machine: squall_test_dep installed (here: on sys.path) and the topology's module
    ``uses_dep``, imported; the supervisors' host (this one) has no squall_test_dep."""
    dev = tmp_path / "dev"
    (dev / "squall_test_dep").mkdir(parents=True)
    (dev / "squall_test_dep" / "__init__.py").write_text("VALUE = 'the developer s copy'\n")
    (dev / "uses_dep.py").write_text(USES_DEP)
    assert subprocess.run([sys.executable, "-c", "import squall_test_dep"], capture_output=True).returncode, \
        "the supervisor's host has no squall_test_dep"
    monkeypatch.syspath_prepend(str(dev))
    return importlib.import_module("uses_dep")


#: The developer's topology file ``wc.py``: the module above, then a topology of its spout writing to ``records``.
WC_TOPOLOGY = """

from squall import Topology

topology = Topology("good", conf={{"topology.workers": 1}})
topology.spout("dep", DepReport, args=[{records!r}])
"""


def _submit_offline(cluster: ProcessCluster, tmp_path: Path, records: Path) -> str:
    """The Dependencies page's offline lines, run as typed in the developer's project (``wc.py`` and a
    ``requirements.txt``) with the developer's virtualenv active: pip makes the wheels from the developer's
    index (here a directory of wheels, so no network), ``storm jar`` ships them. The id of the topology."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "wc.py").write_text(USES_DEP + WC_TOPOLOGY.format(records=str(records)))
    (project / "requirements.txt").write_text("squall_test_dep==1.0\n")
    index = tmp_path / "index"
    make_wheel(index, "squall_test_dep", "1.0", {"squall_test_dep/__init__.py": "VALUE = 'the wheel'\n"})
    env = {**cluster.user_shell(tmp_path / "shell"), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index)}
    env["PYTHONPATH"] += f":{tmp_path / 'dev'}"  # the developer's squall_test_dep, which storm jar imports
    [block] = blocks_run_by(__file__, "docs/guide/dependencies.md")
    for line in command_lines(block.code):
        done = subprocess.run(["bash", "-c", line], cwd=project, env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
    assert [path.name for path in (project / "wheels").iterdir()] == ["squall_test_dep-1.0-py3-none-any.whl"]
    with cluster.client() as client:
        return str(client.getTopologyId("good"))


def _package(folder: Path, requirements: str, wheels: dict[str, str]) -> Path:
    """A package of ``uses_dep`` with ``requirements`` and a squall_test_dep wheel per version → VALUE."""
    folder.mkdir()
    (folder / "requirements.txt").write_text(requirements)
    for version, value in wheels.items():
        make_wheel(folder / "wheels", "squall_test_dep", version, {"squall_test_dep/__init__.py": f"VALUE = {value!r}\n"})
    uses_dep = folder.parent / "dev" / "uses_dep.py"
    return build_package([uses_dep, folder / "requirements.txt", folder / "wheels"], folder / "code.zip")


@pytest.mark.slow  # a process cluster, two topologies, an environment built with venv and pip: ~20 s
def test_a_topology_runs_on_wheels_it_ships_and_a_bad_requirement_is_a_task_error(
        zk_conf: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    uses_dep = _developer(tmp_path, monkeypatch)
    records = tmp_path / "records"
    records.mkdir()

    def submit(cluster: ProcessCluster, name: str, requirements: str) -> str:
        t = Topology(name, conf={"topology.workers": 1})
        t.spout("dep", uses_dep.DepReport, args=[str(records)])
        package = _package(tmp_path / name, requirements, {"1.0": "the wheel"})
        return submit_topology(cluster.conf, t, package=package, zk=cluster.zk)

    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack, **{
            "supervisor.worker.env.build.timeout.secs": 120})
        cluster.start("sup")

        good = _submit_offline(cluster, tmp_path, records)
        [report] = wait_until(lambda: read_records(records, "dep"), 90, "the spout importing squall_test_dep")
        assert report["value"] == "the wheel"
        venv = Path(report["venv"])
        assert venv.parent.name == "pyenvs" and report["python"] == str(venv / "bin" / "python")
        assert report["path"].split(":")[0] == str(venv / "bin"), "its bin/ first on PATH, for shell components"

        bad = submit(cluster, "bad", "squall_test_dep==1.0\nsquall_no_such_dep==9.9\n")

        def error_shown() -> str | None:
            capsys.readouterr()
            assert cluster.cli("get-errors", "bad") == 0
            shown = json.loads(capsys.readouterr().out or "{}")
            return shown.get("Comp-Errors", {}).get("dep")
        error = wait_until(error_shown, 60, "the failed build as the topology's error in storm get-errors")
        assert "Python environment" in error and "squall_no_such_dep" in error and "failed to build" in error
        assert bad not in {r.topology_id for r in cluster.workers("sup")}, "no worker started without its environment"
        assert [r.topology_id for r in cluster.workers("sup")] == [good]


@pytest.mark.slow  # a process cluster, three code versions, three environments: ~40 s
def test_a_gray_upgrade_with_new_requirements_switches_a_worker_only_once_its_environment_is_built(
        zk_conf: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """v1 needs squall_test_dep 1.0, v2 needs 2.0: the upgraded worker imports 2.0 from a new environment. v3
    needs a requirement nobody has: its environment fails to build, so the worker marked for it keeps running
    v2 (same process), is never counted upgraded, and the error names the requirement."""
    uses_dep = _developer(tmp_path, monkeypatch)
    records = tmp_path / "records"
    records.mkdir()
    t = Topology("canary", conf={"topology.workers": 1})
    t.spout("dep", uses_dep.DepReport, args=[str(records)])
    upgrade = {"topology.upgrade": True, "topology.upgrade.worker.num": 1}
    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack, **{"nimbus.task.timeout.secs": 10})
        cluster.start("sup")

        def submit(release: str, requirements: str, **overrides: Any) -> str:
            package = _package(tmp_path / release, requirements, {"1.0": "one", "2.0": "two"})
            return submit_topology(cluster.conf, t, package=package, conf_overrides=overrides, zk=cluster.zk)

        def reports() -> list[dict[str, Any]]:
            return read_records(records, "dep")

        topology_id = submit("v1", "squall_test_dep==1.0\n")
        [first] = wait_until(reports, 90, "v1's worker")
        assert first["value"] == "one"

        submit("v2", "squall_test_dep==2.0\n", **upgrade)
        second = wait_until(lambda: reports()[1:], 90, "the worker switched to v2")[0]
        assert second["value"] == "two" and second["venv"] != first["venv"], "a new environment for v2"
        wait_until(lambda: cluster.zk.children(paths.upgraded_workers(topology_id)), 30, "the switch confirmed")
        with cluster.client() as client:
            client.completeUpgrade("canary")

        def status() -> str:
            with cluster.client() as client:
                return str(client.getTopologyInfo(topology_id).status)
        wait_until(lambda: status() == "ACTIVE", 60, "the upgrade complete")
        [v2_worker] = cluster.workers("sup")

        submit("v3", "squall_no_such_dep==9.9\n", **upgrade)
        def v3_errors() -> list[str]:  # any earlier error of the topology (v1's, v2's) is not this one
            return [text for texts in filed_errors(cluster.zk, topology_id).values() for text in texts
                    if "code version 3" in text]
        errors = wait_until(v3_errors, 60, "code version 3's error")
        assert any("code version 3 failed to build" in e and "squall_no_such_dep" in e for e in errors), errors
        assert cluster.workers("sup") == [v2_worker] and psutil.pid_exists(v2_worker.pid), "v2's worker runs on"
        assert cluster.zk.children(paths.upgrading_workers(topology_id)) and \
            not cluster.zk.children(paths.upgraded_workers(topology_id)), "never counted upgraded"
        assert len(reports()) == 2, "no worker started on v3"
