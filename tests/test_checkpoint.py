"""Storm's checkpoint protocol as pure state machines: the checkpoint spout's coordinator (events in, saves and
emits out, on a simulated clock) and a stateful task's side (which step, which held inputs it releases)."""

from __future__ import annotations

from squall.core.clock import SimulatedClock
from worker.checkpoint import INITIAL, Action, BoltCheckpoint, Coordinator, Emit, Phase, Save, Step, TxState

COMMITTED, PREPARING, COMMITTING = Phase.COMMITTED, Phase.PREPARING, Phase.COMMITTING
PREPARE, COMMIT, ROLLBACK, INITSTATE = Action.PREPARE, Action.COMMIT, Action.ROLLBACK, Action.INITSTATE


def recovered(state: TxState = INITIAL, clock: SimulatedClock | None = None) -> Coordinator:
    coordinator = Coordinator(state, interval_secs=1.0)
    now = (clock or SimulatedClock()).monotonic()
    assert coordinator.poll(now) == [Emit(state.txid, INITSTATE)]
    assert coordinator.acked(state.txid) == []
    assert not coordinator.recovering
    return coordinator


def test_every_start_is_a_recovery_first_initstate_then_checkpoints() -> None:
    clock = SimulatedClock()
    coordinator = Coordinator(INITIAL, interval_secs=1.0)
    assert coordinator.recovering
    assert coordinator.poll(clock.monotonic()) == [Emit(-1, INITSTATE)]
    assert coordinator.poll(clock.monotonic()) == [], "one action in flight at a time"
    assert coordinator.acked(-1) == []
    assert coordinator.poll(clock.monotonic()) == [Save(TxState(0, PREPARING)), Emit(0, PREPARE)]


def test_a_checkpoint_saves_each_phase_before_the_next_action_and_waits_the_interval() -> None:
    clock = SimulatedClock()
    coordinator = recovered(clock=clock)
    assert coordinator.poll(clock.monotonic()) == [Save(TxState(0, PREPARING)), Emit(0, PREPARE)]
    assert coordinator.acked(0) == [Save(TxState(0, COMMITTING))]
    assert coordinator.poll(clock.monotonic()) == [Emit(0, COMMIT)], "commit at once, no interval"
    assert coordinator.acked(0) == [Save(TxState(0, COMMITTED))]
    clock.advance(0.9)
    assert coordinator.poll(clock.monotonic()) == [], "the interval counts from the last checkpoint's start"
    clock.advance(0.1)
    assert coordinator.poll(clock.monotonic()) == [Save(TxState(1, PREPARING)), Emit(1, PREPARE)]


def test_a_failed_prepare_rolls_back_reinitializes_then_prepares_the_same_txid_again() -> None:
    clock = SimulatedClock()
    coordinator = recovered(clock=clock)
    coordinator.poll(clock.monotonic())
    coordinator.failed(0)
    assert coordinator.recovering
    assert coordinator.poll(clock.monotonic()) == [Emit(0, ROLLBACK)]
    assert coordinator.acked(0) == [Save(TxState(-1, COMMITTED))]
    assert coordinator.poll(clock.monotonic()) == [Emit(-1, INITSTATE)]
    assert coordinator.acked(-1) == []
    clock.advance(1.0)
    assert coordinator.poll(clock.monotonic()) == [Save(TxState(0, PREPARING)), Emit(0, PREPARE)]


def test_a_failed_commit_is_rolled_forward() -> None:
    clock = SimulatedClock()
    coordinator = recovered(clock=clock)
    coordinator.poll(clock.monotonic())
    coordinator.acked(0)
    assert coordinator.poll(clock.monotonic()) == [Emit(0, COMMIT)]
    coordinator.failed(0)
    assert coordinator.poll(clock.monotonic()) == [Emit(0, COMMIT)], "some tasks may have committed: commit all"
    assert coordinator.acked(0) == [Save(TxState(0, COMMITTED))]
    assert coordinator.poll(clock.monotonic()) == [Emit(0, INITSTATE)]


def test_a_restart_resumes_from_the_stored_phase() -> None:
    now = SimulatedClock().monotonic()
    preparing = Coordinator(TxState(5, PREPARING), interval_secs=1.0)
    assert preparing.poll(now) == [Emit(5, ROLLBACK)]
    assert preparing.acked(5) == [Save(TxState(4, COMMITTED))]
    assert preparing.poll(now) == [Emit(4, INITSTATE)]
    committing = Coordinator(TxState(5, COMMITTING), interval_secs=1.0)
    assert committing.poll(now) == [Emit(5, COMMIT)]
    assert committing.acked(5) == [Save(TxState(5, COMMITTED))]
    assert committing.poll(now) == [Emit(5, INITSTATE)]


def test_an_ack_of_another_txid_changes_nothing_but_lets_the_next_action_go() -> None:
    clock = SimulatedClock()
    coordinator = recovered(clock=clock)
    coordinator.poll(clock.monotonic())
    assert coordinator.acked(7) == []
    assert coordinator.state == TxState(0, PREPARING)
    assert coordinator.poll(clock.monotonic()) == [Emit(0, PREPARE)], "sent again"


def test_the_stored_record_is_a_map_and_no_record_is_storms_first_state() -> None:
    state = TxState(3, COMMITTING)
    assert state.to_record() == {"txid": 3, "phase": "COMMITTING"}
    assert TxState.from_record(state.to_record()) == state
    assert TxState.from_record(None) == TxState(-1, COMMITTED)


def test_inputs_before_initstate_are_held_then_released_in_order() -> None:
    bolt: BoltCheckpoint[str] = BoltCheckpoint()
    assert not bolt.arrived("a") and not bolt.arrived("b")
    step = bolt.decide(INITSTATE, -1)
    assert step is Step.INIT
    assert bolt.completed(step, -1).execute == ["a", "b"]
    assert bolt.arrived("c"), "executed at once after init"
    assert bolt.decide(INITSTATE, -1) is Step.NOTHING, "init once: a later INITSTATE leaves the state be"


def test_acks_are_held_until_the_commit_of_the_checkpoint_prepared_after_them() -> None:
    bolt: BoltCheckpoint[str] = BoltCheckpoint()
    bolt.completed(bolt.decide(INITSTATE, -1), -1)
    bolt.acked("a")
    assert bolt.completed(bolt.decide(PREPARE, 0), 0).ack == []
    bolt.acked("b")  # after the prepare: its change is not in txid 0
    assert bolt.completed(bolt.decide(COMMIT, 0), 0).ack == ["a"]
    assert bolt.completed(bolt.decide(PREPARE, 1), 1).ack == []
    assert bolt.completed(bolt.decide(COMMIT, 1), 1).ack == ["b"]


def test_a_rollback_fails_every_held_ack() -> None:
    bolt: BoltCheckpoint[str] = BoltCheckpoint()
    bolt.completed(bolt.decide(INITSTATE, -1), -1)
    bolt.acked("a")
    bolt.completed(bolt.decide(PREPARE, 0), 0)
    bolt.acked("b")
    release = bolt.completed(bolt.decide(ROLLBACK, 0), 0)
    assert release.fail == ["a", "b"] and release.ack == []
    assert bolt.decide(INITSTATE, -1) is Step.NOTHING, "the INITSTATE of the txid before is not old"
    assert bolt.completed(bolt.decide(COMMIT, 1), 1).ack == [], "nothing left held"


def test_a_prepare_before_initstate_is_refused_and_old_txids_are_only_acked() -> None:
    bolt: BoltCheckpoint[str] = BoltCheckpoint()
    assert bolt.decide(PREPARE, 3) is Step.REFUSE, "a restarted task: fail it, so the topology recovers"
    bolt.completed(Step.REFUSE, 3)
    assert bolt.decide(INITSTATE, 2) is Step.OLD
    assert bolt.decide(ROLLBACK, 3) is Step.ROLLBACK
    bolt.completed(Step.ROLLBACK, 3)
    assert bolt.decide(INITSTATE, 2) is Step.INIT
