"""Windowed bolts: Storm's window semantics (from its Windowing docs' examples), the bolt's acking and anchoring,
the conf keys the DSL writes, and the submit-time check; the window core on simulated time, two topologies
through local mode."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from squall import Count, Duration, LocalTopology, Spout, Topology, TopologyError, TupleWindow, WindowedBolt
from squall.api.component import Bolt, Stream, attach
from squall.api.testing import Recorder, make_context, make_tuple, run_bolt
from squall.api.tuple import Tuple, TupleBatch
from squall.api.windowing import WindowError, with_window
from squall.api.windowmanager import Activation, Expired, Late, WindowManager
from squall.core.clock import SimulatedClock
from squall.core.thrift import from_bytes, storm, to_bytes
from squall.core.topology import validate_topology
from squall.core.windowconf import WindowConf, window_of
from support import wait_until
from topologies import GATES, Numbers, Recorder as Seen

T0 = 1_700_000_000_000  # ms


def _manager(length: Count | Duration, slide: Count | Duration | None = None, **event: Any) -> WindowManager[Any]:
    window = window_of(with_window(length, slide, **event))
    assert window is not None
    return WindowManager(window, event_time="timestamp_field" in event, inputs=["src:default"], now=T0)


def _windows(decisions: list[Any]) -> list[tuple[list[Any], list[Any], list[Any]]]:
    return [(d.values, d.new, d.expired) for d in decisions if isinstance(d, Activation)]


def _expired(decisions: list[Any]) -> list[Any]:
    return [v for d in decisions if isinstance(d, Expired) for v in d.values]


# -- the window core, processing time ----------------------------------------------------------------


def test_a_sliding_count_window_keeps_the_last_n_and_slides_every_m() -> None:
    manager = _manager(Count(3), Count(2))
    decisions = [d for n in range(1, 7) for d in manager.add(n, T0 + n)]
    assert _windows(decisions) == [
        ([1, 2], [1, 2], []),
        ([2, 3, 4], [3, 4], [1]),
        ([4, 5, 6], [5, 6], [2, 3]),
    ]
    assert _expired(decisions) == [1, 2, 3]  # what the bolt acks, as they leave


def test_a_tumbling_count_window_never_overlaps() -> None:
    manager = _manager(Count(3), Count(3))
    decisions = [d for n in range(1, 8) for d in manager.add(n, T0 + n)]
    assert _windows(decisions) == [([1, 2, 3], [1, 2, 3], []), ([4, 5, 6], [4, 5, 6], [1, 2, 3])]
    assert manager.next_due() is None  # a count slide needs no timer


def test_a_count_window_without_a_slide_is_evaluated_on_every_tuple() -> None:
    manager = _manager(Count(2))
    decisions = [d for n in range(1, 4) for d in manager.add(n, T0 + n)]
    assert [w for w, _, _ in _windows(decisions)] == [[1], [1, 2], [2, 3]]


def test_a_sliding_duration_window_on_a_timer_takes_the_last_length_ms() -> None:
    """Storm's example: 10 s windows sliding every 5 s."""
    manager = _manager(Duration.seconds(10), Duration.seconds(5))
    assert manager.next_due() == T0 + 5000
    for name, at in (("e1", 1000), ("e2", 3000)):
        assert manager.add(name, T0 + at) == []
    first = manager.advance(T0 + 5000)
    assert _windows(first) == [(["e1", "e2"], ["e1", "e2"], [])]
    (activation,) = first
    assert (activation.start_ms, activation.end_ms) == (T0 + 4999 - 10_000, T0 + 4999)
    manager.add("e3", T0 + 6000)
    assert manager.advance(T0 + 9000) == []  # not due yet
    assert _windows(manager.advance(T0 + 10_000)) == [(["e1", "e2", "e3"], ["e3"], [])]
    manager.add("e4", T0 + 12_000)
    third = manager.advance(T0 + 15_000)
    assert _expired(third) == ["e1", "e2"]
    assert _windows(third) == [(["e3", "e4"], ["e4"], ["e1", "e2"])]


def test_a_tumbling_duration_window_puts_each_tuple_in_exactly_one_window() -> None:
    manager = _manager(Duration(100), Duration(100))
    seen: list[int] = []
    for at in [*range(0, 1000, 7), 5000]:  # the last step: a timer late by many periods runs once
        if T0 + at >= manager.next_due():  # type: ignore[operator]
            for window, new, _ in _windows(manager.advance(T0 + at)):
                assert window == new  # tumbling: nothing carries over
                seen.extend(window)
        manager.add(at, T0 + at)
    assert seen == list(range(0, 1000, 7))


def test_a_count_window_sliding_on_a_duration_mixes_kinds() -> None:
    manager = _manager(Count(2), Duration.seconds(1))
    for n in range(1, 5):
        manager.add(n, T0 + n)
    decisions = manager.advance(T0 + 1000)
    assert _windows(decisions) == [([3, 4], [3, 4], [1, 2])]
    assert (decisions[-1].start_ms, decisions[-1].end_ms) == (None, T0 + 999)  # no start for a count length


def test_a_count_window_expires_between_evaluations_every_hundred_inputs() -> None:
    """Storm's compaction: a window evaluated rarely does not hold its expired tuples (and their trees)."""
    manager = _manager(Count(10), Duration.seconds(60))
    expired = [v for n in range(150) for v in _expired(manager.add(n, T0 + n))]
    assert expired == list(range(90))  # at the 100th input: all but the last 10


def test_new_tuples_are_told_from_the_last_windows_after_many_expired_between() -> None:
    """Tuples expired and freed between two evaluations never make a new tuple look like one of the last
    window's (object ids are reused once an object is freed)."""
    for slide in range(180, 230):
        manager = _manager(Count(1), Count(slide))
        windows = _windows([d for n in range(slide * 4) for d in manager.add(n, T0 + n)])
        assert all(window == new for window, new, _ in windows), slide


# -- the window core, event time ---------------------------------------------------------------------


def _hms(h: int, m: int, s: int) -> int:
    return ((h * 60 + m) * 60 + s) * 1000


def test_event_time_windows_follow_the_watermark_as_in_storms_example() -> None:
    """Storm's Windowing docs: 20 s windows sliding every 10 s, lag 5 s, a watermark a second."""
    manager = _manager(Duration.seconds(20), Duration.seconds(10), timestamp_field="ts", lag=Duration.seconds(5))
    # e3 comes before e2: out of order, within the lag
    for name, ts in (("e1", (6, 0, 3)), ("e3", (6, 0, 7)), ("e2", (6, 0, 5)), ("e4", (6, 0, 18))):
        assert manager.add(name, _hms(*ts), "src:default") == []
    manager.add("e5", _hms(6, 0, 26), "src:default")
    manager.add("e6", _hms(6, 0, 36), "src:default")
    first = manager.advance(T0 + 1000)
    assert manager.watermark == _hms(6, 0, 31)
    assert [(d.start_ms, d.end_ms, d.values) for d in first if isinstance(d, Activation)] == [
        (_hms(5, 59, 50), _hms(6, 0, 10), ["e1", "e3", "e2"]),
        (_hms(6, 0, 0), _hms(6, 0, 20), ["e1", "e3", "e2", "e4"]),
        (_hms(6, 0, 10), _hms(6, 0, 30), ["e4", "e5"]),
    ]
    for name, ts in (("e7", (8, 0, 25)), ("e8", (8, 0, 26)), ("e9", (8, 0, 27)), ("e10", (8, 0, 39))):
        manager.add(name, _hms(*ts), "src:default")
    second = manager.advance(T0 + 2000)
    assert manager.watermark == _hms(8, 0, 34)
    assert [(d.end_ms, d.values) for d in second if isinstance(d, Activation)] == [
        (_hms(6, 0, 40), ["e5", "e6"]),
        (_hms(6, 0, 50), ["e6"]),
        (_hms(8, 0, 30), ["e7", "e8", "e9"]),
    ]
    assert sorted(_expired(first + second)) == ["e1", "e2", "e3", "e4", "e5", "e6"]


def test_a_tuple_older_than_the_watermark_is_late() -> None:
    manager = _manager(Duration.seconds(10), Duration.seconds(10), timestamp_field="ts", lag=Duration.seconds(5))
    manager.add("e1", _hms(6, 0, 20), "src:default")
    manager.advance(T0 + 1000)  # watermark 6:00:15
    assert manager.add("in time", _hms(6, 0, 15), "src:default") == []
    assert manager.add("late", _hms(6, 0, 14), "src:default") == [Late("late", _hms(6, 0, 14))]


def test_the_watermark_waits_for_every_input_stream_and_takes_the_slowest() -> None:
    window = window_of(with_window(Count(10), Count(1), timestamp_field="ts"))
    assert window is not None
    manager: WindowManager[str] = WindowManager(window, event_time=True, inputs=["a:default", "b:default"], now=T0)
    manager.add("a1", 5000, "a:default")
    manager.advance(T0 + 1000)
    assert manager.watermark == 0  # b has delivered nothing yet
    manager.add("b1", 3000, "b:default")
    decisions = manager.advance(T0 + 2000)
    assert manager.watermark == 3000
    assert [w for w, _, _ in _windows(decisions)] == [["b1"]]  # only what the slowest input has reached


def test_an_event_time_count_window_slides_per_count_up_to_the_watermark() -> None:
    manager = _manager(Count(3), Count(2), timestamp_field="ts")
    for n, ts in enumerate((1000, 3000, 2000, 4000, 6000, 5000, 9000)):
        manager.add(n, ts, "src:default")
    decisions = manager.advance(T0 + 1000)  # watermark 9000: every input is at or before it
    assert _windows(decisions) == [([0, 1], [0, 1], []), ([1, 2, 3], [2, 3], [0]), ([3, 4, 5], [4, 5], [1, 2])]


# -- the bolt: acking, anchoring, late tuples ---------------------------------------------------------


class Sums(WindowedBolt):
    """Emits each window's sum of ``n`` and its size."""

    outputs = ["sum", "size"]

    def execute(self, window: TupleWindow) -> None:
        self.emit([sum(tup["n"] for tup in window), len(window)])


class Boom(WindowedBolt):
    outputs = ["sum"]

    def execute(self, window: TupleWindow) -> None:
        raise RuntimeError("bad window")


def _bolt(cls: type[WindowedBolt], conf: dict[str, Any], clock: SimulatedClock) -> tuple[WindowedBolt, Recorder]:
    bolt = cls()
    late = conf.get("topology.bolts.late.tuple.stream")
    recorder = Recorder({**cls.streams, **({late: Stream(["late_tuple"])} if late else {})})
    attach(bolt, recorder, make_context("sums", conf=conf))
    bolt.prepare(bolt.context.conf, bolt.context)
    bolt.open_window(["src:default"], lambda: int(clock.time() * 1000))
    return bolt, recorder


def _feed(bolt: WindowedBolt, *rows: tuple[Any, ...], fields: tuple[str, ...] = ("n",)) -> None:
    bolt.execute_batch(TupleBatch.of([make_tuple(row, fields, component="src") for row in rows]))


def test_a_windowed_bolt_acks_inputs_as_they_expire_and_anchors_emits_to_the_window() -> None:
    clock = SimulatedClock()
    bolt, recorder = _bolt(Sums, with_window(Count(3), Count(2)), clock)
    _feed(bolt, (1,), (2,), (3,), (4,))
    assert recorder.values() == [(3, 2), (9, 3)]
    assert [e.values for e in recorder.emitted[1].anchors] == [(2,), (3,), (4,)]  # every tuple of its window
    assert [t.values for t in recorder.acked] == [(1,)]  # acked when it left the window, not before
    _feed(bolt, (5,), (6,))
    assert [t.values for t in recorder.acked] == [(1,), (2,), (3,)]
    assert recorder.failed == []


class Newest(WindowedBolt):
    """Explicit anchoring: each emit names its anchors."""

    outputs = ["n"]
    anchor_to_window = False

    def execute(self, window: TupleWindow) -> None:
        self.emit([len(window)])  # unanchored
        newest = window.get()[-1]
        self.emit([newest["n"]], anchors=newest)


def test_explicit_anchoring_anchors_only_what_an_emit_names() -> None:
    clock = SimulatedClock()
    bolt, recorder = _bolt(Newest, with_window(Count(3), Count(3)), clock)
    _feed(bolt, (1,), (2,), (3,))
    unanchored, anchored = recorder.emitted
    assert (unanchored.values, unanchored.anchors) == ((3,), ())
    assert (anchored.values, [a.values for a in anchored.anchors]) == ((3,), [(3,)])


def test_a_duration_window_runs_on_the_bolts_timer() -> None:
    clock = SimulatedClock()
    bolt, recorder = _bolt(Sums, with_window(Duration.seconds(2), Duration.seconds(1)), clock)
    _feed(bolt, (1,), (2,))
    clock.advance(1.0)
    assert bolt.advance() == int(clock.time() * 1000) + 1000  # when the worker steps it next
    clock.advance(1.0)
    bolt.advance()
    assert recorder.values() == [(3, 2), (3, 2)]  # both still within the 2 s window
    _feed(bolt, (10,))
    clock.advance(1.0)
    bolt.advance()
    assert recorder.values()[-1] == (10, 1)
    assert [t.values for t in recorder.acked] == [(1,), (2,)]


def test_late_tuples_go_to_the_late_stream_anchored_and_are_acked_at_once() -> None:
    clock = SimulatedClock()
    conf = with_window(Duration.seconds(10), timestamp_field="ts", lag=Duration.seconds(1), late_stream="late")
    bolt, recorder = _bolt(Sums, conf, clock)
    _feed(bolt, (5, 20_000), fields=("n", "ts"))
    clock.advance(1.0)
    bolt.advance()  # watermark 19 000
    _feed(bolt, (7, 2_000), fields=("n", "ts"))
    (late,) = [e for e in recorder.emitted if e.stream == "late"]
    assert late.values == ([7, 2_000],)  # one field, late_tuple: the late tuple's values
    assert [a.values for a in late.anchors] == [(7, 2_000)]
    assert [t.values for t in recorder.acked] == [(7, 2_000)]


def test_late_tuples_without_a_late_stream_are_logged_and_acked() -> None:
    clock = SimulatedClock()
    bolt, recorder = _bolt(Sums, with_window(Count(5), timestamp_field="ts"), clock)
    _feed(bolt, (5, 20_000), fields=("n", "ts"))
    clock.advance(1.0)
    bolt.advance()
    _feed(bolt, (7, 2_000), fields=("n", "ts"))
    assert [t.values for t in recorder.acked] == [(7, 2_000)]
    assert all(e.stream == "default" for e in recorder.emitted)


def test_a_timestamp_extractor_switches_to_event_time() -> None:
    class Nested(Sums):
        def timestamp(self, tup: Tuple) -> int:
            return int(tup["event"]["at"])

    clock = SimulatedClock()
    bolt, recorder = _bolt(Nested, with_window(Count(5), Count(1)), clock)
    _feed(bolt, (1, {"at": 3000}), (2, {"at": 1000}), fields=("n", "event"))
    assert recorder.values() == []  # event time: nothing is evaluated before a watermark
    clock.advance(1.0)
    bolt.advance()
    assert recorder.values() == [(1, 1), (3, 2)]  # one window per input up to the watermark


def test_a_tuple_without_its_timestamp_field_fails_alone_with_a_clear_error() -> None:
    clock = SimulatedClock()
    bolt, recorder = _bolt(Sums, with_window(Count(5), timestamp_field="ts"), clock)
    _feed(bolt, (1,))
    (error,) = recorder.errors
    assert "has no timestamp field 'ts'" in str(error)
    assert [t.values for t in recorder.failed] == [(1,)]


def test_an_exception_in_execute_fails_the_window_once_and_is_reported() -> None:
    clock = SimulatedClock()
    bolt, recorder = _bolt(Boom, with_window(Count(2), Count(1)), clock)
    _feed(bolt, (1,), (2,), (3,))
    assert [str(e) for e in recorder.errors] == ["bad window"] * 3
    assert [t.values for t in recorder.failed] == [(1,), (2,), (3,)]  # each tuple failed once
    assert recorder.acked == []  # a failed tuple is not acked when it expires


def test_a_late_stream_needs_event_time() -> None:
    with pytest.raises(WindowError, match="needs event time"):
        with_window(Count(5), late_stream="late")
    clock = SimulatedClock()
    with pytest.raises(WindowError, match="needs event time"):
        _bolt(Sums, {**with_window(Count(5)), "topology.bolts.late.tuple.stream": "late"}, clock)


def test_counts_and_durations_refuse_what_storm_refuses() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(WindowError):
            Count(bad)  # type: ignore[arg-type]
    for bad in (-1, 1.5, True):
        with pytest.raises(WindowError):
            Duration(bad)  # type: ignore[arg-type]
    assert with_window(Count(5), lag=Duration(0))["topology.bolts.tuple.timestamp.max.lag.ms"] == 0  # no lag
    for zero in ({"length": Duration(0)}, {"length": Count(5), "slide": Duration(0)}):
        with pytest.raises(WindowError, match="longer than 0 ms"):
            with_window(**zero)
    with pytest.raises(WindowError, match="watermark interval"):
        with_window(Count(5), watermark_interval=Duration(0))
    with pytest.raises(WindowError):
        Duration.days(30)  # past Storm's int ms
    assert (Duration.seconds(1.5), Duration.minutes(1), Duration.hours(1)) == (
        Duration(1500),
        Duration(60_000),
        Duration(3_600_000),
    )


# -- the conf keys, the DSL, and the submit check ----------------------------------------------------


class ClassWindow(Sums):
    component_conf = WindowedBolt.with_tumbling_window(Count(5))


def test_run_bolt_runs_a_windowed_bolt_as_a_worker_does() -> None:
    run = run_bolt(ClassWindow, [(n,) for n in range(1, 11)], fields=["n"])
    assert run.values() == [(15, 5), (40, 5)]
    assert [t.values for t in run.acked] == [(n,) for n in range(1, 6)]  # the second window has not expired
    late = run_bolt(Sums, conf=with_window(Count(5), timestamp_field="ts", late_stream="late"))
    assert "late" in late.streams  # declared for the bolt, as the DSL declares it


def _topology(**window: Any) -> Topology:
    t = Topology("windows")
    numbers = t.spout("numbers", Numbers, args=[20, 1])
    bolt = t.bolt("sums", Sums).shuffle(numbers)
    if window:
        bolt.with_window(**window)
    return t


def test_the_dsl_writes_storms_keys_into_the_bolts_conf_and_declares_the_late_stream() -> None:
    t = _topology(
        length=Duration.seconds(10),
        slide=Count(2),
        timestamp_field="ts",
        lag=Duration.seconds(3),
        watermark_interval=Duration(200),
        late_stream="late",
    )
    topology, _ = t.build()
    common = from_bytes(storm.StormTopology, to_bytes(topology)).bolts["sums"].common  # the Thrift round trip
    assert json.loads(common.json_conf) == {
        "topology.bolts.window.length.duration.ms": 10_000,
        "topology.bolts.window.sliding.interval.count": 2,
        "topology.bolts.tuple.timestamp.field.name": "ts",
        "topology.bolts.tuple.timestamp.max.lag.ms": 3000,
        "topology.bolts.watermark.event.interval.ms": 200,
        "topology.bolts.late.tuple.stream": "late",
    }
    assert common.streams["late"].output_fields == ["late_tuple"]
    assert window_of(json.loads(common.json_conf)) == WindowConf(
        None, 10_000, 2, None, timestamp_field="ts", lag_ms=3000, watermark_interval_ms=200, late_stream="late"
    )


def test_a_window_on_the_declaration_replaces_the_classs_and_a_class_window_needs_none() -> None:
    t = Topology("windows")
    numbers = t.spout("numbers", Numbers, args=[20, 1])
    t.bolt("fives", ClassWindow).shuffle(numbers)
    t.bolt("threes", ClassWindow).shuffle(numbers).with_tumbling_window(Duration(300))
    topology, _ = t.build()
    assert json.loads(topology.bolts["fives"].common.json_conf) == {
        "topology.bolts.window.length.count": 5,
        "topology.bolts.window.sliding.interval.count": 5,
    }
    assert json.loads(topology.bolts["threes"].common.json_conf) == {
        "topology.bolts.window.length.duration.ms": 300,
        "topology.bolts.window.sliding.interval.duration.ms": 300,
    }


def test_the_dsl_refuses_a_windowed_bolt_without_a_window_and_a_window_on_a_plain_bolt() -> None:
    with pytest.raises(TopologyError, match="windowed bolt 'sums' has no window"):
        _topology().build()
    t = Topology("windows")
    numbers = t.spout("numbers", Numbers, args=[20, 1])
    with pytest.raises(TopologyError, match="not a WindowedBolt"):
        t.bolt("plain", Plain).shuffle(numbers).with_window(Count(2))


class Plain(Bolt):
    def execute(self, tup: Tuple) -> None:
        pass


@pytest.mark.parametrize(
    ("window", "conf", "problem"),
    [
        (
            {"length": Duration.seconds(20), "slide": Duration.seconds(15)},
            {"topology.message.timeout.secs": 30},
            'bolt "sums": window duration (length + sliding interval) 35000 ms is more than '
            "topology.message.timeout.secs (30 s): raise the timeout or shorten the window",
        ),
        (
            {"length": Count(100), "slide": Count(10)},
            {"topology.max.spout.pending": 100},
            'bolt "sums": window count (length + sliding interval) 110 is more than topology.max.spout.pending '
            "(100): raise the cap or shorten the window",
        ),
        ({"length": Duration.seconds(20), "slide": Count(200)}, {"topology.max.spout.pending": 100}, "window count"),
        ({"length": Count(200), "slide": Duration.seconds(40)}, {}, "window duration"),
    ],
)
def test_submit_refuses_a_window_that_outlasts_the_timeout_or_the_pending_cap(
    window: dict[str, Any], conf: dict[str, Any], problem: str
) -> None:
    t = _topology(**window)
    topology, topology_conf = t.build()
    merged = {"topology.message.timeout.secs": 30, **topology_conf, **conf}
    with pytest.raises(storm.InvalidTopologyException) as raised:
        validate_topology("windows", topology, merged)
    assert problem in raised.value.msg and "\n" not in raised.value.msg


def test_submit_takes_a_long_window_when_timeouts_are_off_or_pending_unset() -> None:
    topology, conf = _topology(length=Duration.seconds(60)).build()
    validate_topology("windows", topology, {**conf, "topology.message.timeout.secs": 30,
                                            "topology.enable.message.timeouts": False})
    topology, conf = _topology(length=Count(10_000), slide=Count(5)).build()
    validate_topology("windows", topology, {**conf, "topology.message.timeout.secs": 30})


# -- through local mode --------------------------------------------------------------------------------

FAST = {"task.heartbeat.frequency.secs": 0.05, "topology.acker.executors": 1}


class FailFirstWindow(Bolt):
    """Fails the first window sum it gets (so its window's spout tuples replay), acks the rest."""

    auto_ack = False

    def prepare(self, conf: Any, context: Any) -> None:
        self.sums: list[tuple[int, int]] = []

    def execute(self, tup: Tuple) -> None:
        self.sums.append(tup.values)
        if len(self.sums) == 1:
            self.fail(tup)
        else:
            self.ack(tup)


class CountsOf(Bolt):
    def prepare(self, conf: Any, context: Any) -> None:
        self.sizes: list[int] = []

    def execute(self, tup: Tuple) -> None:
        self.sizes.append(tup["size"])


def test_a_tumbling_count_window_in_local_mode_acks_expired_trees_and_replays_a_failed_window() -> None:
    t = Topology("tumbling")
    numbers = t.spout("numbers", Numbers, args=[20, 1])
    sums = t.bolt("sums", Sums).shuffle(numbers).with_tumbling_window(Count(5))
    t.bolt("sink", FailFirstWindow).shuffle(sums)
    with LocalTopology(t, FAST) as local:
        spout, sink = local.component("numbers"), local.component("sink")
        # 25 deliveries (20, and the failed window's 5 again) in 5 windows; the last window never expires.
        wait_until(lambda: len(spout.acked) == 15 and len(sink.sums) == 5, 30, "every expired window's trees acked")
        assert sorted(spout.failed) == [0, 1, 2, 3, 4]  # the first window's sum failed: its inputs replay
        assert sink.sums[0] == (10, 5)
        assert sum(total for total, _ in sink.sums) == sum(range(20)) + 10


def test_a_tumbling_duration_window_in_local_mode_windows_every_tuple_once_and_acks_them_all() -> None:
    t = Topology("timed")
    numbers = t.spout("numbers", Numbers, args=[200, 1])
    sums = t.bolt("sums", Sums).shuffle(numbers).with_tumbling_window(Duration(100))
    t.bolt("sink", CountsOf).shuffle(sums)
    with LocalTopology(t, FAST) as local:
        spout, sink = local.component("numbers"), local.component("sink")
        wait_until(lambda: len(spout.acked) == 200, 30, "every tuple acked as its window expired")
        assert sum(sink.sizes) == 200 and spout.failed == []


class Stamped(Spout):
    """Emits ``(n, ts)`` for n = 0..9 at ts 10 s + n s, then, once the ``late`` gate opens, one tuple stamped 1 ms:
    older than any watermark by then."""

    outputs = ["n", "ts"]

    def open(self, conf: Any, context: Any) -> None:
        self.todo = [(n, 10_000 + 1000 * n) for n in range(10)]
        self.acked: list[int] = []
        self.late_sent = False

    def next_tuple(self) -> None:
        if self.todo:
            n, ts = self.todo.pop(0)
            self.emit([n, ts], msg_id=n)
        elif GATES["late"].is_set() and not self.late_sent:
            self.late_sent = True
            self.emit([99, 1], msg_id=99)

    def ack(self, msg_id: int) -> None:
        self.acked.append(msg_id)


def test_an_event_time_window_in_local_mode_sends_a_late_tuple_down_its_late_stream() -> None:
    GATES["late"] = threading.Event()
    t = Topology("stamped")
    stamped = t.spout("stamped", Stamped)
    sums = t.bolt("sums", Sums).shuffle(stamped).with_tumbling_window(
        Duration.seconds(2), timestamp_field="ts", watermark_interval=Duration(20), late_stream="late"
    )
    t.bolt("windows", Seen).shuffle(sums)
    t.bolt("late", Seen).shuffle(sums, stream="late")
    with LocalTopology(t, FAST) as local:
        spout, windows, late = local.component("stamped"), local.component("windows"), local.component("late")
        # The watermark reaches 19 s: the windows ending at 10, 12, ... 18 s are evaluated, in event time.
        wait_until(lambda: len(windows.seen) == 5, 30, "the windows up to the watermark")
        assert [values for _, _, values in windows.seen] == [(0, 1), (3, 2), (7, 2), (11, 2), (15, 2)]
        GATES["late"].set()
        wait_until(lambda: late.seen, 30, "the late tuple on the late stream")
        assert late.seen == [("sums", "late", ([99, 1],))]
        # Acked: the late tuple at once, and what left the window; 7 and 8 are in the last window evaluated, 9 in
        # none yet (at 19 s): they leave with windows a later watermark closes.
        wait_until(lambda: sorted(spout.acked) == [0, 1, 2, 3, 4, 5, 6, 99], 30, "the late and the expired acked")
