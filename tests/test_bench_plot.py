"""bench/plot.py, the bar chart the benches and docs/performance.md draw their rates with: a well-formed SVG whose
bars are as long as their values, whatever the labels hold."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench.plot import bar_chart_svg, human
from support import REPO

SVG = "{http://www.w3.org/2000/svg}"


def bars_of(svg: str) -> dict[str, float]:
    """Each bar's label and drawn length, read back from the document."""
    root = ET.fromstring(svg)
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("text-anchor") == "end"]
    widths = [float(r.get("width")) for r in root.iter(f"{SVG}rect")][1:]  # the first is the background
    return dict(zip(labels, widths, strict=True))


def test_bars_are_as_long_as_their_values_and_labels_are_escaped() -> None:
    svg = bar_chart_svg([("Squall, per-tuple <API>", 656_000), ("Bytewax & co", 2_590_000), ("zero", 0)],
                        "Throughput", "tuples per CPU-second")
    bars = bars_of(svg)
    assert list(bars) == ["Squall, per-tuple <API>", "Bytewax & co", "zero"]
    assert bars["Squall, per-tuple <API>"] / bars["Bytewax & co"] == pytest.approx(656 / 2590, rel=1e-3)
    assert bars["zero"] == 1.0  # still visible
    assert "656k" in svg and "2.59M" in svg


def test_no_bars_or_a_negative_one_is_refused() -> None:
    with pytest.raises(ValueError):
        bar_chart_svg([], "t", "u")
    with pytest.raises(ValueError):
        bar_chart_svg([("a", -1)], "t", "u")


def test_figures_print_as_the_tables_print_them() -> None:
    assert [human(v) for v in (656_000, 6_390_000, 204_000, 15.5)] == ["656k", "6.39M", "204k", "15.5"]


def test_the_command_writes_the_chart(tmp_path: Path) -> None:
    out = tmp_path / "chart.svg"
    done = subprocess.run([sys.executable, "bench/plot.py", "--out", str(out), "a=1", "b=2"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert list(bars_of(out.read_text())) == ["a", "b"]
    bad = subprocess.run([sys.executable, "bench/plot.py", "--out", str(out), "a=x"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "'x' is not a number" in bad.stderr
