"""Issue 23's acceptance on a process cluster (``storm nimbus`` + ``storm supervisor``, real ZooKeeper): a topology
importing a package no host has installed runs once its supervisor has built its environment from the wheels in
its package, offline; a bad requirement is a task error naming it, which ``storm get-errors`` shows."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from processcluster import ProcessCluster
from squall.dsl import Topology
from support import wait_until
from topologies import read_records
from wheels import make_wheel

#: The topology's module: imports squall_test_dep at the top, as user code does, and reports where it came from.
USES_DEP = '''
import os, sys, json
from pathlib import Path

import squall_test_dep
from squall.component import Spout


class DepReport(Spout):
    outputs = ["n"]

    def __init__(self, records):
        self.records = records

    def open(self, conf, context):
        report = {"value": squall_test_dep.VALUE, "python": sys.executable, "path": os.environ["PATH"],
                  "venv": os.environ.get("VIRTUAL_ENV")}
        with open(Path(self.records) / f"dep-{context.task_id}.jsonl", "a") as out:
            out.write(json.dumps(report) + "\\n")

    def next_tuple(self):
        pass
'''


@pytest.mark.slow  # a process cluster, two topologies, an environment built with venv and pip: ~20 s
def test_a_topology_runs_on_wheels_it_ships_and_a_bad_requirement_is_a_task_error(
        zk_conf: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    dev = tmp_path / "dev"  # the developer's machine: squall_test_dep installed (here: on sys.path)
    (dev / "squall_test_dep").mkdir(parents=True)
    (dev / "squall_test_dep" / "__init__.py").write_text("VALUE = 'the developer s copy'\n")
    (dev / "uses_dep.py").write_text(USES_DEP)
    make_wheel(dev / "wheels", "squall_test_dep", "1.0", {"squall_test_dep/__init__.py": "VALUE = 'the wheel'\n"})
    assert subprocess.run([sys.executable, "-c", "import squall_test_dep"], capture_output=True).returncode, \
        "the supervisor's host has no squall_test_dep"
    monkeypatch.syspath_prepend(str(dev))
    uses_dep = importlib.import_module("uses_dep")
    records = tmp_path / "records"
    records.mkdir()

    def topology(name: str, requirements: str) -> tuple[Topology, Path, Path, Path]:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "requirements.txt").write_text(requirements)
        t = Topology(name, conf={"topology.workers": 1})
        t.spout("dep", uses_dep.DepReport, args=[str(records)])
        return t, dev / "uses_dep.py", folder / "requirements.txt", dev / "wheels"

    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack, **{
            "supervisor.worker.env.build.timeout.secs": 120})
        cluster.start_nimbus()
        cluster.start_supervisor("sup")
        cluster.wait_supervisors(1)

        good = cluster.submit(*topology("good", "squall_test_dep==1.0\n"))
        [report] = wait_until(lambda: read_records(records, "dep"), 90, "the spout importing squall_test_dep")
        assert report["value"] == "the wheel"
        venv = Path(report["venv"])
        assert venv.parent.name == "pyenvs" and report["python"] == str(venv / "bin" / "python")
        assert report["path"].split(":")[0] == str(venv / "bin"), "its bin/ first on PATH, for shell components"

        bad = cluster.submit(*topology("bad", "squall_test_dep==1.0\nsquall_no_such_dep==9.9\n"))

        def error_shown() -> str | None:
            capsys.readouterr()
            assert cluster.cli("get-errors", "bad") == 0
            shown = json.loads(capsys.readouterr().out or "{}")
            return shown.get("Comp-Errors", {}).get("dep")
        error = wait_until(error_shown, 60, "the failed build as the topology's error in storm get-errors")
        assert "Python environment" in error and "squall_no_such_dep" in error and "failed to build" in error
        assert bad not in {r.topology_id for r in cluster.workers("sup")}, "no worker started without its environment"
        assert [r.topology_id for r in cluster.workers("sup")] == [good]
