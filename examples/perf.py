"""storm-perf's benchmark components (``examples/storm-perf`` in Apache Storm), for ``bench/``.

``ConstSpout`` emits the constant "some data", reliably (message id = a counter) as Storm's does;
``IdBolt`` re-emits its input; ``DevNullBolt`` drops it.
"""

from __future__ import annotations

import time
from typing import Any

from squall.component import Bolt, Spout
from squall.dsl import Topology
from squall.tuple import Tuple


class ConstSpout(Spout):
    """``rate`` (tuples/s for the whole component, shared by its tasks) holds it below saturation."""

    outputs = ["str"]

    def __init__(self, value: str = "some data", rate: float | None = None) -> None:
        self.value = [value]
        self.msg_id = 0
        self.rate = rate

    def open(self, conf: Any, context: Any) -> None:
        if self.rate:
            self.per_sec = self.rate / len(context.tasks)
            self.start = time.monotonic()

    def next_tuple(self) -> None:
        if self.rate and self.msg_id >= (time.monotonic() - self.start) * self.per_sec:
            return  # ahead of the rate: emit nothing (the executor waits a millisecond)
        self.msg_id += 1
        self.emit(self.value, msg_id=self.msg_id)


class IdBolt(Bolt):
    outputs = ["str"]

    def execute(self, tup: Tuple) -> None:
        self.emit(tup.values)


class DevNullBolt(Bolt):
    def execute(self, tup: Tuple) -> None:
        pass


def const_null(*, grouping: str = "local_or_shuffle", ackers: int = 0, workers: int = 1, spouts: int = 1,
               bolts: int = 1, id_bolt: bool = False, rate: float | None = None,
               conf: dict[str, Any] | None = None) -> Topology:
    """ConstSpoutNullBoltTopo (or ConstSpoutIdBoltNullBoltTopo with ``id_bolt``)."""
    t = Topology("const-null", conf={"topology.workers": workers, "topology.acker.executors": ackers, **(conf or {})})
    source = t.spout("spout", ConstSpout, kwargs={"rate": rate} if rate else None, parallelism=spouts)
    if id_bolt:
        source = getattr(t.bolt("id", IdBolt, parallelism=bolts), grouping)(source)
    getattr(t.bolt("null", DevNullBolt, parallelism=bolts), grouping)(source)
    return t
