"""Executors: one per task. Each owns its component, its receive queue and its timers, implements the
component's :class:`~squall.api.component.Collector`, and does a slice of work per ``step``.

The package is Storm's ``executor`` package in Squall's shape, one job a module:

* :mod:`~worker.executor.base`: what every executor shares (:class:`~worker.executor.base.Executor`: outputs,
  heartbeats to the topology master, error reporting);
* :mod:`~worker.executor.spout` and :mod:`~worker.executor.bolt`: the spout and bolt executors;
* :mod:`~worker.executor.routing`: a task's output streams and where each row goes;
* :mod:`~worker.executor.acking`: what a task tells the ackers in a step;
* :mod:`~worker.executor.stats`: a task's counters and the stats it reports.

The queues between threads are :mod:`worker.queues`; the error throttle is :mod:`worker.throttle`.

The hot path is built for batches: an emit appends its row to the :class:`~squall.api.tuple.TupleBatch` its
target task gets at the end of the task thread's round (:class:`~worker.queues.Outbox`), and a bolt's inputs come
a batch at a time, run through ``execute_batch`` or ``execute`` per row in one loop, with a Tuple made per row only
for the user's call. A local target gets the batches as they are; a remote worker gets their columns, encoded
once per message by the sender. Tracking follows Storm exactly: a fresh 64-bit edge id per (anchor, target),
XORed into the anchor's ``ackVal`` and into the new tuple's root → id map; acks and fails go to the acker task
that owns the root (``root % ackers``, the same in every worker), gathered over a step into one message per
acker (:class:`~worker.executor.acking.AckOut`).
"""
