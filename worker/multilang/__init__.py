"""Shell (multilang) spouts and bolts: subprocesses speaking Storm's multilang protocol, as pystorm,
streamparse and Storm's own storm.py / storm.js speak it.

A ``shell`` component (``ShellComponent``: ``execution_command`` and ``script``) runs as the process
``[execution_command, script]``, the command found on the worker's ``PATH`` (the ``bin/`` of the Python the
worker runs on comes first there: a per-topology virtualenv's, else the supervisor's), in the code package's
``resources/`` directory, with the worker's allow-listed environment. Its executor is a
:class:`~worker.executor.spout.SpoutExecutor` or :class:`~worker.executor.bolt.BoltExecutor` whose user code is the
subprocess, so routing, anchoring, acking, stats and errors are the ones Python components get.

The protocol, from the worker's side (JSON messages each ended by a line ``end``, or MessagePack objects
back to back when ``topology.multilang.serializer`` names a MessagePack serializer):

* handshake: ``{"conf", "pidDir", "context"}`` → the child creates ``<pidDir>/<pid>`` and answers ``{"pid"}``;
* bolt: each input goes as ``{"id", "comp", "stream", "task", "tuple"}``; the child answers, whenever it likes,
  ``emit`` (``anchors`` = input ids, ``stream``, ``task`` for a direct emit, ``need_task_ids``), ``ack``,
  ``fail``, ``log``, ``error``, ``metrics`` and ``sync``; every second a heartbeat tuple (stream
  ``__heartbeat``, task -1) asks for a ``sync``;
* spout: ``next``, ``ack``, ``fail``, ``activate``, ``deactivate`` commands, each answered by ``emit``\\ s (with
  an ``id`` when reliable), ``log``, ``error``, ``metrics`` and a closing ``sync``. Commands are pipelined: the
  acks that came back since the last round go in one write with the ``next``;
* a non-direct emit is answered with the list of task ids it went to unless it says ``"need_task_ids": false``.

When the child stops answering for ``topology.subprocess.timeout.secs`` (default
``supervisor.worker.timeout.secs``), exits or breaks the protocol, it is killed, the error is reported like
any component error (``/taskerrors``, the UI), the bolt's in-flight tuples fail (their spouts replay them) and
a new subprocess starts after the crash backoff supervisors use for workers (:mod:`squall.core.restarts`);
with ``topology.worker.exit.on.error`` the worker stops instead, as Storm's does.

The hot path: one reader thread per subprocess decodes what it writes (stdout, and stderr lines into the
log) and wakes the task thread; the task thread encodes a round's inputs and writes them in one
non-blocking write, holding at most ``topology.shellbolt.max.pending`` unwritten tuples.

    t.shell_bolt("split", command="node", script="splitsentence.js", outputs=["word"]).shuffle(spout)

The modules, as Storm divides the same work (its ShellProcess, ShellBolt, ShellSpout and serializers):

- :mod:`~worker.multilang.protocol`: the codecs and messages (pure);
- :mod:`~worker.multilang.process`: one subprocess and its pipes (:class:`~worker.multilang.process.ShellProcess`);
- :mod:`~worker.multilang.host`: what shell spouts and bolts share: start, handshake, the messages both get,
  timeouts, death and restart;
- :mod:`~worker.multilang.bolt` and :mod:`~worker.multilang.spout`: the shell bolt's and shell spout's executors.
"""
