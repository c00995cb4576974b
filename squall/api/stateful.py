"""Stateful bolts (Storm's ``IStatefulBolt`` and ``BaseStatefulBolt``): a bolt whose key-value state is saved
at every checkpoint and given back, as last committed, after a failure.

    class WordCount(StatefulBolt):
        outputs = ["word", "count"]

        def execute(self, tup):
            count = self.state.get(tup["word"], 0) + 1
            self.state.put(tup["word"], count)
            self.emit([tup["word"], count])

A topology with a stateful bolt gets Storm's checkpoint spout, ``$checkpointspout``, which every
``topology.state.checkpoint.interval.ms`` has every stateful task prepare, then commit, its state (two phases,
their progress kept in the same store); a failure rolls every task back to the last commit and the spouts
replay. The bolt's inputs are acked once the state they changed is committed, so a replayed input is one whose
change was rolled back: each input counts at least once (see docs/guide/state.md).
"""

from __future__ import annotations

from squall.api.component import Bolt
from squall.api.state.keyvalue import KeyValueState

__all__ = ["StatefulBolt"]


class StatefulBolt(Bolt):
    """A bolt with state (Storm's ``BaseStatefulBolt``). The worker calls ``prepare``, then ``init_state``
    with the state as last committed, then ``execute`` for each input; inputs that arrive before
    ``init_state`` wait for it. The hooks run on the bolt's thread before each step of a checkpoint.

    Emits must be anchored (under ``auto_ack``, the default, an emit in ``execute`` is anchored to its input;
    an unanchored one raises), so an input whose change is rolled back replays with everything it caused::

        class Totals(StatefulBolt):
            def init_state(self, state):
                super().init_state(state)              # kept as self.state
                self.seen = sum(1 for _ in state)      # read it once, keep a field

            def execute(self, tup):
                self.state.put(tup["user"], tup["total"])
    """

    #: The state, as ``init_state`` was given it.
    state: KeyValueState

    def init_state(self, state: KeyValueState) -> None:
        """The state, as last committed (empty at first), once before the first input and never again (a
        rollback resets it in place). Keeps it as ``self.state``; override to read it into your own fields."""
        self.state = state

    def pre_prepare(self, txid: int) -> None:
        """Checkpoint ``txid`` is about to prepare the state: put in it what you keep elsewhere."""

    def pre_commit(self, txid: int) -> None:
        """Checkpoint ``txid`` is about to commit the prepared state."""

    def pre_rollback(self) -> None:
        """The state is about to go back to its last commit: drop what you derived from it since."""
