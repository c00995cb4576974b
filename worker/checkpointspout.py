"""The ``$checkpointspout`` task (Storm's CheckpointSpout): a spout, run by the spout executor as any spout, that
drives the checkpoint protocol (:class:`worker.checkpoint.Coordinator`) and keeps the transaction's state in the
topology's state provider, namespace ``$checkpointspout-<task>``, key ``__state``, as Storm does."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from squall.api.component import Spout, TopologyContext
from squall.api.state.keyvalue import KeyValueState
from squall.api.state.providers import open_state
from squall.core.system_ids import CHECKPOINT_FIELDS, CHECKPOINT_STREAM
from squall.core.topology import MIN_CHECKPOINT_INTERVAL_MS
from worker.checkpoint import Coordinator, Emit, Save, TxState

#: The key of the transaction's state in the spout's namespace (Storm's).
TX_STATE_KEY = "__state"


class CheckpointSpout(Spout):
    outputs = {CHECKPOINT_STREAM: list(CHECKPOINT_FIELDS)}

    state: KeyValueState
    coordinator: Coordinator

    def open(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        self.state = open_state(f"{context.component_id}-{context.task_id}", conf)
        record = self.state.get(TX_STATE_KEY)
        interval_ms = max(MIN_CHECKPOINT_INTERVAL_MS, int(conf["topology.state.checkpoint.interval.ms"]))
        self.coordinator = Coordinator(TxState.from_record(record), interval_ms / 1000)
        if record is None:
            self._save(self.coordinator.state)
        self.log.info("checkpoint spout recovering", state=self.coordinator.state.to_record(), interval_ms=interval_ms)

    def next_tuple(self) -> None:
        self._do(self.coordinator.poll(time.monotonic()))

    def ack(self, msg_id: Any) -> None:
        recovering = self.coordinator.recovering
        self._do(self.coordinator.acked(msg_id))
        if recovering and not self.coordinator.recovering:
            self.log.info("checkpoint spout recovered", state=self.coordinator.state.to_record())

    def fail(self, msg_id: Any) -> None:
        if not self.coordinator.recovering:
            self.log.info("checkpoint failed: recovering", txid=msg_id, state=self.coordinator.state.to_record())
        self.coordinator.failed(msg_id)

    def close(self) -> None:
        self.state.close()

    def _do(self, steps: Sequence[Save | Emit]) -> None:
        for step in steps:
            if isinstance(step, Save):
                self._save(step.state)
            else:
                self.emit([step.txid, step.action.value], CHECKPOINT_STREAM, msg_id=step.txid)

    def _save(self, state: TxState) -> None:
        self.state.put(TX_STATE_KEY, state.to_record())
        self.state.commit()
