"""storm-perf's benchmark components (``examples/storm-perf`` in Apache Storm), for ``bench/``.

``ConstSpout`` emits the constant "some data", reliably (message id = a counter) as Storm's does;
``IdBolt`` re-emits its input; ``DevNullBolt`` drops it.
"""

from __future__ import annotations

from typing import Any

from squall.component import Bolt, Spout
from squall.dsl import Topology
from squall.tuple import Tuple


class ConstSpout(Spout):
    outputs = ["str"]

    def __init__(self, value: str = "some data") -> None:
        self.value = [value]
        self.msg_id = 0

    def next_tuple(self) -> None:
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
               bolts: int = 1, id_bolt: bool = False, conf: dict[str, Any] | None = None) -> Topology:
    """ConstSpoutNullBoltTopo (or ConstSpoutIdBoltNullBoltTopo with ``id_bolt``)."""
    t = Topology("const-null", conf={"topology.workers": workers, "topology.acker.executors": ackers, **(conf or {})})
    source = t.spout("spout", ConstSpout, parallelism=spouts)
    if id_bolt:
        source = getattr(t.bolt("id", IdBolt, parallelism=bolts), grouping)(source)
    getattr(t.bolt("null", DevNullBolt, parallelism=bolts), grouping)(source)
    return t
