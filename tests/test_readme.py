"""Every shell line of the Install and dev cluster pages (and so of the README, whose lines are theirs) runs as
written.

The lines are read from the pages themselves (their ``sh`` blocks, comments stripped: support.shell_lines), so a
line added to them is run here by default, and one that drifts from the CLI fails here; tests/test_docs.py checks
that every shell line of the README is one of them and that no other page of Getting started or the Guide has a
shell block it does not mark as not run. They run as a user types them — ``bash -c LINE`` with ``storm`` on PATH —
in a scratch directory holding a copy of examples/, against the dev cluster the session's first line starts (in
the background: it holds the foreground), with the default config (``$STORM_CONF_DIR/storm.yaml`` moves the ports
only if another process holds the default ones). The session's ``storm dev-cluster stop`` runs last, and then no
process of the cluster may be left and no port it used held.

A line that nimbus refuses for the cluster's state of the moment (the next gray-upgrade batch before the last
one is done: a typed ``storm VERB: ...Exception: ...`` line, exit 1) is tried again until it passes, as an
operator would; any other failure — a usage error, a refused habit, a traceback — fails at once. Lines that
cannot run in a test are listed in :data:`NOT_RUN` with the reason.

Before that last line, the session submits the word count from Python as First topology shows it: that page's
Python blocks saved as ``wordcount.py``, the block it gives this test as ``submit.py``, run with ``python submit.py``
(the session's own ``wordcount`` killed first, as a user frees the name); ``storm list wordcount`` then shows the id
it printed running, and after ``storm kill wordcount`` it shows it killed.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from squall.dev.zookeeper import port_is_free
from support import REPO, SESSION_PAGES, blocks_run_by, code_blocks, dev_cluster_env, shell_lines, wait_until
from squall.core.worker_records import running

#: Lines that cannot run in a test as written, and why. Any other line — a new one included — is run.
NOT_RUN = {
    "make system-deps": "installs Debian packages with apt-get (sudo): not a test's business",
    "make demo": "its own dev cluster on the default ports for 20 s: the lines run here are its steps",
    "make pipeline": "a Spark JVM and 20,000 lines (minutes); tests/test_spark_cluster.py runs that pipeline",
    "make test": "the whole suite, this test included",
    "storm nimbus; storm supervisor; storm ui; storm logviewer; storm dev-zookeeper":
        "daemons in the foreground until Ctrl-C: the dev cluster runs the same ones",
}
START = "storm dev-cluster --supervisors 2"  # runs in the background; the other lines talk to it
STOP = "storm dev-cluster stop"              # must be the last line run; then nothing may be left

#: A refusal by nimbus for the cluster's state of the moment: the line is tried again.
NOT_YET = re.compile(r"^storm [\w-]+: (\w+Exception|nimbus error): ")
SETTLE_SECS = 120


def session_lines() -> list[str]:
    return [line for page in SESSION_PAGES for line in shell_lines(REPO / page)]


def test_the_session_s_lines_are_found_and_the_skip_list_is_current() -> None:
    lines = session_lines()
    assert START in lines and lines[-1] == STOP, "the session starts a dev cluster and ends stopping it"
    assert [line for line in NOT_RUN if line not in lines] == [], "a skipped line no longer in the pages"
    assert "storm jar examples/wordcount.py" in lines and "make demo" in lines


def running_under(root: Path) -> list[str]:
    """Processes still running whose command line names ``root`` (daemons, their workers, ZooKeeper)."""
    return [f"{p.info['pid']}: {' '.join(p.info['cmdline'] or ())}"
            for p in psutil.process_iter(["pid", "cmdline"])
            if str(root) in " ".join(p.info["cmdline"] or ()) and running(p.info["pid"])]


def run_line(line: str, cwd: Path, env: dict[str, str]) -> None:
    """``bash -c line`` until it exits 0; a state refusal by nimbus is tried again (see the module doc)."""
    started = time.monotonic()
    deadline, attempts = started + SETTLE_SECS, 0
    while True:
        attempts += 1
        done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
        if done.returncode == 0:
            print(f"{time.monotonic() - started:6.1f} s  {attempts} run(s)  {line}")  # shown by pytest -s
            return
        said = [text for text in done.stderr.splitlines() if not text.startswith("{")]  # JSON lines: logs
        if not (done.returncode == 1 and said and NOT_YET.match(said[-1])) or time.monotonic() > deadline:
            pytest.fail(f"documented line failed: {line}\nexit {done.returncode}\nstdout:\n{done.stdout}\n"
                        f"stderr:\n{done.stderr}")
        time.sleep(1)


FIRST_TOPOLOGY = "docs/getting-started/first-topology.md"


def listed(name: str, cwd: Path, env: dict[str, str]) -> dict[str, object] | None:
    """``storm list NAME --json``'s row, or None when no topology of that name is running (exit 1)."""
    done = subprocess.run(["bash", "-c", f"storm list {name} --json"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)[0] if done.returncode == 0 else None


def submit_from_python(here: Path, env: dict[str, str]) -> None:
    """First topology's submission from Python, as that page says to run it (see the module doc)."""
    earlier = [b.code for b in code_blocks(REPO / FIRST_TOPOLOGY) if b.lang == "python" and b.run_by_default]
    [submit] = blocks_run_by(__file__, FIRST_TOPOLOGY)
    (here / "wordcount.py").write_text("\n\n".join(earlier))
    (here / "submit.py").write_text(submit.code)
    run_line("storm kill wordcount -w 1", here, env)
    wait_until(lambda: listed("wordcount", here, env) is None, 60, "the session's wordcount gone")
    done = subprocess.run([sys.executable, "submit.py"], cwd=here, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    topology_id = done.stdout.split()[-1]

    def running_ok() -> dict[str, object] | None:
        row = listed("wordcount", here, env)
        return row if row is not None and row["health"] == "ok" else None
    row = wait_until(running_ok, 90, "the submitted wordcount running with its workers")
    assert (row["id"], row["status"], row["num_workers"]) == (topology_id, "ACTIVE", 2)
    run_line("storm kill wordcount", here, env)
    assert listed("wordcount", here, env)["status"] == "KILLED", "until its kill wait is over, then removed"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_line_of_install_and_the_dev_cluster_runs_as_written(tmp_path: Path) -> None:
    env, ports = dev_cluster_env(tmp_path)
    here = tmp_path / "checkout"
    shutil.copytree(REPO / "examples", here / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    root = here / "storm-local"
    lines = [line for line in session_lines() if line not in NOT_RUN]
    out = tmp_path / "dev-cluster.out"
    cluster: subprocess.Popen[bytes] | None = None
    try:
        for line in lines:
            if line == START:
                with open(out, "wb") as sink:
                    cluster = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=here, env=env, stdout=sink,
                                               stderr=subprocess.STDOUT)
                wait_until(lambda: "Ctrl-C" in out.read_text() or cluster.poll() is not None, 90, "the dev cluster")
                assert cluster.poll() is None, out.read_text()
            else:
                assert cluster is not None, f"{line!r} comes before {START!r} in the session"
                if line == STOP:
                    submit_from_python(here, env)
                run_line(line, here, env)
        assert cluster is not None and cluster.wait(30) == 0, out.read_text()
        assert running_under(root) == [], "the dev cluster's processes are all gone"
        assert [port for port in ports if not port_is_free("127.0.0.1", port)] == [], "its ports are free"
    finally:
        if cluster is not None and cluster.poll() is None:
            cluster.terminate()  # stops its daemons and their workers by pid
            cluster.wait(60)
