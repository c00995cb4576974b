"""A bench's rates as a horizontal bar chart in SVG, written with no plotting library (matplotlib is not a
dependency): one bar per system or configuration, its value printed beside it, on a linear scale from zero.

``bench_topology.py --svg FILE`` draws every configuration and peer of its run with it; from numbers already
measured (a table of docs/performance.md)::

    python bench/plot.py --out docs/throughput-peers.svg --unit "tuples per CPU-second" \\
        "Squall, per-tuple API=656000" "Squall, batch API=6390000" "Bytewax=2590000"
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from html import escape
from pathlib import Path

BAR_HEIGHT, GAP, BAR_WIDTH, VALUE_WIDTH, MARGIN = 22, 8, 420, 80, 12
CHAR_WIDTH = 7.2  # of a 13px sans-serif character, generously: labels are right-aligned against the bars
COLOURS = ("#3f51b5", "#7986cb", "#ef6c00", "#6d4c41")


def human(value: float) -> str:
    """656000 → ``656k``, 6390000 → ``6.39M``: the figures as the tables print them."""
    if value >= 1e6:
        return f"{value / 1e6:.3g}M"
    return f"{value / 1e3:.3g}k" if value >= 1e3 else f"{value:.3g}"


def bar_chart_svg(bars: Sequence[tuple[str, float]], title: str, unit: str) -> str:
    """An SVG document of one bar per ``(label, value)``, longest value full width; labels are escaped. A bar's
    colour follows the first word of its label, so one system keeps one colour across its configurations."""
    if not bars or min(value for _, value in bars) < 0:
        raise ValueError("bars: at least one, none negative")
    top = max(value for _, value in bars) or 1.0
    systems = list(dict.fromkeys(label.split(",")[0].split()[0] for label, _ in bars))
    label_width = round(16 + CHAR_WIDTH * max(len(label) for label, _ in bars))
    width = MARGIN * 2 + label_width + BAR_WIDTH + VALUE_WIDTH
    height = MARGIN * 2 + 48 + len(bars) * (BAR_HEIGHT + GAP)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="sans-serif" font-size="13">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{MARGIN}" y="{MARGIN + 14}" font-size="15" font-weight="bold">{escape(title)}</text>',
        f'<text x="{MARGIN}" y="{MARGIN + 34}" fill="#555">{escape(unit)}</text>',
    ]
    for i, (label, value) in enumerate(bars):
        y = MARGIN + 48 + i * (BAR_HEIGHT + GAP)
        length = max(1.0, BAR_WIDTH * value / top)
        colour = COLOURS[systems.index(label.split(",")[0].split()[0]) % len(COLOURS)]
        parts += [
            f'<text x="{MARGIN + label_width - 8}" y="{y + 15}" text-anchor="end">{escape(label)}</text>',
            f'<rect x="{MARGIN + label_width}" y="{y}" width="{length:.1f}" height="{BAR_HEIGHT}" fill="{colour}"/>',
            f'<text x="{MARGIN + label_width + length + 6:.1f}" y="{y + 15}">{human(value)}</text>',
        ]
    return "\n".join([*parts, "</svg>"]) + "\n"


def parse_bar(text: str) -> tuple[str, float]:
    label, sep, value = text.rpartition("=")
    if not sep or not label:
        raise argparse.ArgumentTypeError(f"{text!r}: LABEL=VALUE")
    try:
        return label, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a number") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bars", nargs="+", type=parse_bar, metavar="LABEL=VALUE")
    parser.add_argument("--out", required=True, type=Path, help="the SVG file to write")
    parser.add_argument("--title", default="Throughput against the peers, one worker")
    parser.add_argument("--unit", default="tuples per CPU-second, median of 3 interleaved rounds")
    args = parser.parse_args()
    args.out.write_text(bar_chart_svg(args.bars, args.title, args.unit))


if __name__ == "__main__":
    main()
