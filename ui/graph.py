"""The topology page's picture: components as boxes in layers from the spouts rightwards, each edge labelled
with its rate, each bolt coloured by its capacity. Pure functions from the REST API's shaped data to
coordinates; the page's template draws them as SVG (no JavaScript, no graph library).

The layout is a plain layered one: a spout is in layer 0, a bolt one layer right of its furthest input
(inputs that close a cycle are ignored for this), and each layer is ordered by where its inputs sit so
that edges cross little. An edge's rate is the tuples its target executed from it in the window, per
second of the window (for ``:all-time``, the topology's uptime): an average, as Storm's UI shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from squall.core.names import is_system
from ui.stats import window_seconds

NODE_WIDTH = 170
NODE_HEIGHT = 52
LAYER_GAP = 130  # room between columns for the edges' labels
ROW_GAP = 34
MARGIN = 24
LOOP_DEPTH = 60  # how far below the boxes an edge back to an earlier layer (a cycle) runs


@dataclass(frozen=True)
class Component:
    """A box of the graph: ``capacity`` is a bolt's (None for a spout)::

    Component("split", "bolt", capacity=0.12)
    """

    id: str
    kind: str
    capacity: float | None = None


@dataclass(frozen=True)
class Flow:
    """Tuples from ``source``'s ``stream`` that ``target`` executed, over ``seconds`` of the window.

    >>> Flow("sentences", "split", "default", tuples=600, seconds=60.0).rate
    10.0
    """

    source: str
    target: str
    stream: str
    tuples: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.tuples / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Box:
    """A component's box: its top-left corner and its fill colour (:func:`capacity_fill`)."""

    component: Component
    x: float
    y: float
    fill: str


@dataclass(frozen=True)
class Arrow:
    """An edge as an SVG cubic path ``d`` with its label at ``(label_x, label_y)`` and a stroke width
    that grows with its share of the busiest edge's rate."""

    flow: Flow
    d: str
    label: str
    label_x: float
    label_y: float
    width: float


@dataclass(frozen=True)
class Drawing:
    """What the template draws::

    drawing = layout([Component("spout", "spout"), Component("bolt", "bolt", 0.2)],
                     [Flow("spout", "bolt", "default", 600, 60.0)])
    drawing.arrows[0].label            # '10/s'
    """

    width: float
    height: float
    boxes: list[Box]
    arrows: list[Arrow]
    node_width: int = NODE_WIDTH
    node_height: int = NODE_HEIGHT


def layers(components: Sequence[Component], flows: Iterable[Flow]) -> dict[str, int]:
    """Each component's column: spouts (and components nothing feeds) 0, a bolt 1 + its furthest input's,
    where an input that closes a cycle (seen walking downstream from the spouts) does not count.

    >>> layers([Component("s", "spout"), Component("a", "bolt"), Component("b", "bolt")],
    ...        [Flow("s", "a", "default", 0, 1), Flow("a", "b", "default", 0, 1), Flow("b", "a", "x", 0, 1)])
    {'s': 0, 'a': 1, 'b': 2}
    """
    names = [c.id for c in components]
    outputs: dict[str, list[str]] = {n: [] for n in names}
    for f in flows:
        if f.source in outputs and f.target in outputs and f.target not in outputs[f.source]:
            outputs[f.source].append(f.target)
    # Walk downstream from the spouts: an edge to a component still on the walk's path closes a cycle.
    backwards: set[tuple[str, str]] = set()
    state: dict[str, str] = {}  # "open" while on the path, then "done"

    def walk(name: str) -> None:
        state[name] = "open"
        for target in sorted(outputs[name]):
            if state.get(target) == "open":
                backwards.add((name, target))
            elif target not in state:
                walk(target)
        state[name] = "done"

    for c in sorted(components, key=lambda c: (c.kind != "spout", c.id)):
        if c.id not in state:
            walk(c.id)
    inputs: dict[str, list[str]] = {n: [] for n in names}
    for source, targets in outputs.items():
        inputs.update({t: [*inputs[t], source] for t in targets if (source, t) not in backwards})
    column: dict[str, int] = {}

    def place(name: str) -> int:
        if name not in column:
            column[name] = 1 + max(place(i) for i in inputs[name]) if inputs[name] else 0
        return column[name]

    return {n: place(n) for n in names}


def capacity_fill(component: Component) -> str:
    """A box's colour: spouts blue; bolts from green (idle) through yellow to red (capacity 1 and over,
    the bolt cannot keep up), as Storm's UI warns of capacity near 1.

    >>> capacity_fill(Component("b", "bolt", 0.0)), capacity_fill(Component("b", "bolt", 1.4))
    ('hsl(120, 65%, 78%)', 'hsl(0, 65%, 78%)')
    """
    if component.capacity is None:
        return "hsl(210, 60%, 85%)"
    return f"hsl({round(120 * (1 - min(max(component.capacity, 0.0), 1.0)))}, 65%, 78%)"


def rate_text(rate: float) -> str:
    """A rate as a short label.

    >>> [rate_text(r) for r in (0, 0.25, 7.04, 42.6, 1234, 2_500_000)]
    ['0/s', '0.25/s', '7.0/s', '43/s', '1.2k/s', '2.5M/s']
    """
    if rate >= 1e6:
        return f"{rate / 1e6:.1f}M/s"
    if rate >= 1e3:
        return f"{rate / 1e3:.1f}k/s"
    if rate >= 10:
        return f"{rate:.0f}/s"
    if rate >= 1:
        return f"{rate:.1f}/s"
    return f"{rate:.2g}/s"


def layout(components: Sequence[Component], flows: Sequence[Flow]) -> Drawing:
    """Boxes and arrows with coordinates, for the components and flows given."""
    column = layers(components, flows)
    by_column: dict[int, list[Component]] = {}
    for c in sorted(components, key=lambda c: c.id):
        by_column.setdefault(column[c.id], []).append(c)
    row: dict[str, float] = {}
    for index in sorted(by_column):

        def fed_from(c: Component) -> float:
            sources = [row[f.source] for f in flows if f.target == c.id and f.source in row]
            return sum(sources) / len(sources) if sources else 0.0

        by_column[index].sort(key=fed_from)  # stable: ties keep name order
        row.update({c.id: float(i) for i, c in enumerate(by_column[index])})
    tallest = max((len(cs) for cs in by_column.values()), default=0)
    boxes: dict[str, Box] = {}
    for index, cs in by_column.items():
        top = MARGIN + (tallest - len(cs)) * (NODE_HEIGHT + ROW_GAP) / 2
        for i, c in enumerate(cs):
            boxes[c.id] = Box(
                c, MARGIN + index * (NODE_WIDTH + LAYER_GAP), top + i * (NODE_HEIGHT + ROW_GAP), capacity_fill(c)
            )
    shown = [f for f in flows if f.source in boxes and f.target in boxes]
    busiest = max((f.rate for f in shown), default=0.0)
    arrows = [_arrow(f, boxes[f.source], boxes[f.target], offset, busiest) for f, offset in _offsets(shown)]
    backwards = any(column[f.target] <= column[f.source] for f in shown)
    width = MARGIN * 2 + max(column.values(), default=0) * (NODE_WIDTH + LAYER_GAP) + NODE_WIDTH
    height = MARGIN * 2 + tallest * NODE_HEIGHT + max(0, tallest - 1) * ROW_GAP + (LOOP_DEPTH if backwards else 0)
    return Drawing(width, height, list(boxes.values()), arrows)


def _offsets(flows: Sequence[Flow]) -> list[tuple[Flow, float]]:
    """Edges between the same two boxes (several streams) spread apart by a few pixels."""
    pairs: dict[tuple[str, str], list[Flow]] = {}
    for f in flows:
        pairs.setdefault((f.source, f.target), []).append(f)
    return [(f, (i - (len(group) - 1) / 2) * 12) for group in pairs.values() for i, f in enumerate(group)]


def _arrow(flow: Flow, source: Box, target: Box, offset: float, busiest: float) -> Arrow:
    if target.x > source.x:  # forwards: right side to left side
        x1, y1 = source.x + NODE_WIDTH, source.y + NODE_HEIGHT / 2 + offset
        x2, y2 = target.x, target.y + NODE_HEIGHT / 2 + offset
        bend = max(40.0, (x2 - x1) / 2)
        c1, c2 = (x1 + bend, y1), (x2 - bend, y2)
    else:  # back to an earlier column, or to itself: under the boxes, bottom to bottom
        x1, y1 = source.x + NODE_WIDTH / 2 - 24 + offset, source.y + NODE_HEIGHT
        x2, y2 = target.x + NODE_WIDTH / 2 + 24 + offset, target.y + NODE_HEIGHT
        c1, c2 = (x1, y1 + LOOP_DEPTH), (x2, y2 + LOOP_DEPTH)
    # the curve's midpoint, B(1/2) = (P0 + 3 P1 + 3 P2 + P3) / 8, carries the label
    mid_x = (x1 + 3 * c1[0] + 3 * c2[0] + x2) / 8
    mid_y = (y1 + 3 * c1[1] + 3 * c2[1] + y2) / 8
    label = rate_text(flow.rate) if flow.stream == "default" else f"{flow.stream} {rate_text(flow.rate)}"
    width = 1.5 + 4.5 * (flow.rate / busiest if busiest > 0 else 0.0)
    d = f"M {x1:.1f} {y1:.1f} C {c1[0]:.1f} {c1[1]:.1f}, {c2[0]:.1f} {c2[1]:.1f}, {x2:.1f} {y2:.1f}"
    return Arrow(flow, d, label, round(mid_x, 1), round(mid_y - 6, 1), round(width, 2))


def topology_drawing(
    page: Mapping[str, Any], topology: Any, input_stats: Mapping[str, Sequence[Mapping[str, Any]]], *, sys: bool = False
) -> Drawing:
    """The picture of a topology page (:func:`ui.shapes.topology_page`): its spouts and bolts, the edges the
    running ``StormTopology`` subscribes (system ones only with ``sys``), and each edge's count from its
    bolt's ``inputStats`` (:func:`ui.shapes.component_page`, by bolt id)."""
    components = [Component(s["spoutId"], "spout") for s in page["spouts"]] + [
        Component(b["boltId"], "bolt", float(b["capacity"])) for b in page["bolts"]
    ]
    seconds = window_seconds(page["window"], page["uptimeSeconds"])
    flows = []
    for bolt_id, bolt in sorted(topology.bolts.items()):
        executed = {(i["component"], i["stream"]): i["executed"] for i in input_stats.get(bolt_id, ())}
        for stream in sorted(bolt.common.inputs or {}, key=lambda s: (s.componentId, s.streamId)):
            if sys or not (is_system(stream.componentId) or is_system(stream.streamId) or is_system(bolt_id)):
                flows.append(
                    Flow(
                        stream.componentId,
                        bolt_id,
                        stream.streamId,
                        executed.get((stream.componentId, stream.streamId), 0),
                        seconds,
                    )
                )
    return layout(components, flows)
