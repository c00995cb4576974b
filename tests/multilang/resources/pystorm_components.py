"""pystorm components for the multilang tests, run the way streamparse runs them:
``streamparse_run [-s msgpack] pystorm_components.<Class>`` in the package's ``resources/`` directory.

The ``test.*`` keys of the topology conf steer them: ``test.count`` (how many numbers the spout emits),
``test.marker.dir`` and ``test.trouble.n`` (the input on which a bolt hangs or crashes, once: a marker
file says it already did, so the restarted subprocess goes on).
"""

import os
import time

from pystorm import Bolt, Spout


class NumberSpout(Spout):
    """Emits ``[n]`` for n in ``range(test.count)``, reliably (message id n), replaying failed ones first."""

    def initialize(self, conf, context):
        self.fresh = iter(range(int(conf["test.count"])))
        self.replays = []

    def next_tuple(self):
        n = self.replays.pop(0) if self.replays else next(self.fresh, None)
        if n is not None:
            self.emit([n], tup_id=n)

    def fail(self, tup_id):
        self.replays.append(tup_id)


class PassThrough(Bolt):
    """Emits every input's values again, anchored to it, then acks it (pystorm's auto_anchor and auto_ack)."""

    def process(self, tup):
        self.emit(list(tup.values))


class TaskIds(Bolt):
    """Emits ``[n, task ids of the previous emit]`` asking for task ids; logs and reports a metric."""

    def initialize(self, conf, context):
        self.logger.info("TaskIds ready in %s", os.getcwd())

    def process(self, tup):
        targets = self.emit([tup.values[-1], -1], need_task_ids=True)
        self.emit([tup.values[-1], targets[0]])
        self.report_metric("last", tup.values[-1])


def _trouble_once(conf, n):
    """True the first time input ``test.trouble.n`` comes, in any subprocess of the test."""
    if n != conf["test.trouble.n"]:
        return False
    marker = os.path.join(conf["test.marker.dir"], "troubled")
    if os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True


class HangsOnce(PassThrough):
    """Stops answering (sleeps forever) on input ``test.trouble.n``, the first time it comes."""

    def initialize(self, conf, context):
        self.conf = conf

    def process(self, tup):
        if _trouble_once(self.conf, tup.values[-1]):
            time.sleep(3600)
        super().process(tup)


class CrashesOnce(PassThrough):
    """Raises on input ``test.trouble.n``, the first time it comes: pystorm reports the error, fails the
    input and exits."""

    def initialize(self, conf, context):
        self.conf = conf

    def process(self, tup):
        if _trouble_once(self.conf, tup.values[-1]):
            raise RuntimeError(f"cannot handle {tup.values[-1]}")
        super().process(tup)


class NumberSpoutInTrouble(NumberSpout):
    """NumberSpout that, about to emit ``test.trouble.n`` the first time, hangs (``test.trouble`` = "hang") or
    raises ("crash")."""

    def initialize(self, conf, context):
        super().initialize(conf, context)
        self.conf = conf

    def emit(self, tup, **kwargs):
        if _trouble_once(self.conf, tup[-1]):
            if self.conf["test.trouble"] == "hang":
                time.sleep(3600)
            raise RuntimeError(f"cannot emit {tup[-1]}")
        return super().emit(tup, **kwargs)
