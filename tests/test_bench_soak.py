"""bench/soak.py's command line and report (the soak itself is long: it is run by hand, docs/performance.md records one)."""

from __future__ import annotations

import doctest

import pytest

from bench import soak


def test_the_examples_in_soak_py_hold() -> None:
    failed, attempted = doctest.testmod(soak)
    assert attempted > 0 and failed == 0


def test_defaults_are_thirty_minutes_at_half_capacity_and_bad_values_are_refused_by_name(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = soak.parse_args([])
    assert (args.minutes, args.load, args.kill_every, args.rate) == (30, 0.5, 180, 0)
    for argv, named in ((["--minutes", "0"], "--minutes"), (["--workers", "1"], "--workers")):
        with pytest.raises(SystemExit):
            soak.parse_args(argv)
        assert named in capsys.readouterr().err


def test_the_report_counts_lost_messages_and_draws_every_series() -> None:
    samples = [{"t": 10, "tuples/s": 100, "nimbus MB": 40}, {"t": 20, "tuples/s": 90, "nimbus MB": 41}]
    report = soak.table(samples, [(15, "worker 1:6700")], {"emitted": 10, "acked": 9, "failed": 2}, 100)
    assert "lost 1 " in report and "1 worker kills at t = 15 s" in report
    assert "| tuples/s | 100 | 90 | 90 | 95 | 100 | █▁ |" in report and "| nimbus MB | 40.0 | 41.0 |" in report
