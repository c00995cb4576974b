"""bench/cpu.py, which every throughput bench uses to report rates per CPU-second: the CPU it counts is the
work's, including a process's descendants (PySpark's JVM may sit under a launcher script)."""

from __future__ import annotations

import doctest
import os
import signal
import subprocess
import sys

from bench import cpu
from support import wait_until


def test_the_examples_in_cpu_py_hold() -> None:
    failed, attempted = doctest.testmod(cpu)
    assert attempted > 0 and failed == 0


def test_cpu_seconds_of_a_pid_counts_its_busy_descendants() -> None:
    # The child is a shell that only waits; the CPU is burnt by its grandchild, until the group is killed.
    launcher = subprocess.Popen(["sh", "-c", f"{sys.executable} -c 'while True: pass'; true"],
                                start_new_session=True)
    try:
        wait_until(lambda: cpu.cpu_seconds(launcher.pid) >= 0.3, timeout=30,
                   what="the grandchild's CPU seconds counted under the launcher's pid")
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)  # the session started above: the shell and its child
        launcher.wait()


def test_a_summary_is_the_median_and_best_of_its_runs() -> None:
    runs = [cpu.Run(items=100, wall=1.0, cpu=0.5), cpu.Run(300, 1.0, 1.0), cpu.Run(200, 4.0, 1.0)]
    summary = cpu.Summary.of(runs)
    assert (summary.per_sec, summary.best_per_sec) == (100, 300)
    assert (summary.per_cpu_sec, summary.best_per_cpu_sec) == (200, 300)
    assert summary.cores == 0.5
