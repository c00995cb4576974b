"""The simulated clock fires timers in order, at the right simulated time; the real one fires for real."""

from __future__ import annotations

import threading

import pytest

from squall.core.clock import RealClock, SimulatedClock
from support import wait_until


def test_timers_fire_in_due_order_at_their_due_time() -> None:
    clock = SimulatedClock()
    fired: list[tuple[str, float]] = []
    clock.call_later(5, lambda: fired.append(("c", clock.monotonic())))
    clock.call_later(1, lambda: fired.append(("a", clock.monotonic())))
    clock.call_later(3, lambda: fired.append(("b", clock.monotonic())))

    clock.advance(2)
    assert fired == [("a", 1.0)]
    assert clock.monotonic() == 2.0

    clock.advance(10)
    assert fired == [("a", 1.0), ("b", 3.0), ("c", 5.0)]
    assert clock.monotonic() == 12.0


def test_ties_fire_in_scheduling_order() -> None:
    clock = SimulatedClock()
    fired: list[int] = []
    for i in range(5):
        clock.call_later(1, lambda i=i: fired.append(i))
    clock.advance(1)
    assert fired == [0, 1, 2, 3, 4]


def test_timer_added_by_a_callback_fires_within_the_same_advance() -> None:
    clock = SimulatedClock()
    fired: list[float] = []

    def first() -> None:
        fired.append(clock.monotonic())
        clock.call_later(2, lambda: fired.append(clock.monotonic()))

    clock.call_later(1, first)
    clock.advance(3)
    assert fired == [1.0, 3.0]


def test_cancelled_timer_never_fires() -> None:
    clock = SimulatedClock()
    fired: list[str] = []
    timer = clock.call_later(1, lambda: fired.append("x"))
    timer.cancel()
    clock.advance(5)
    assert fired == []
    assert clock.pending() == 0


def test_call_every_repeats_until_cancelled() -> None:
    clock = SimulatedClock()
    ticks: list[float] = []
    periodic = clock.call_every(10, lambda: ticks.append(clock.monotonic()))
    clock.advance(35)
    assert ticks == [10.0, 20.0, 30.0]
    periodic.cancel()
    clock.advance(100)
    assert ticks == [10.0, 20.0, 30.0]
    assert clock.pending() == 0


def test_call_every_survives_a_failing_callback() -> None:
    clock = SimulatedClock()
    calls: list[float] = []

    def flaky() -> None:
        calls.append(clock.monotonic())
        raise RuntimeError("boom")

    clock.call_every(1, flaky)
    clock.advance(3)
    assert calls == [1.0, 2.0, 3.0]


def test_wall_time_moves_with_simulated_time() -> None:
    clock = SimulatedClock(start=1_000.0)
    clock.advance(42.5)
    assert clock.time() == 1_042.5


def test_time_cannot_go_backwards() -> None:
    with pytest.raises(ValueError):
        SimulatedClock().advance(-1)


def test_sleep_on_simulated_clock_returns_only_after_advance() -> None:
    clock = SimulatedClock()
    woke = threading.Event()
    sleeper = threading.Thread(target=lambda: (clock.sleep(30), woke.set()))
    sleeper.start()
    wait_until(lambda: clock.pending() == 1, what="the sleeper to arm its timer")
    assert not woke.is_set()
    clock.advance(29)
    assert not woke.is_set()
    clock.advance(1)
    assert woke.wait(5)
    sleeper.join(5)


def test_real_clock_fires_in_order() -> None:
    clock = RealClock()
    fired: list[str] = []
    done = threading.Event()
    clock.call_later(0.05, lambda: fired.append("second"))
    clock.call_later(0.0, lambda: fired.append("first"))
    clock.call_later(0.1, done.set)
    assert done.wait(5)
    assert fired == ["first", "second"]
