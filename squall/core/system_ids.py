"""Every id Squall reserves for itself: system components, their streams and the system task, in one place.

Ids starting with :data:`RESERVED_PREFIX` are the system's; a user's component or stream may not use it
(:mod:`squall.core.names` checks). The values are Storm's where Storm has the same thing, so Storm tools
reading a topology see the names they know: Storm's checkpoint ids start with ``$``, a character no user id
may contain.
"""

from __future__ import annotations

#: The prefix of every system component and stream id.
RESERVED_PREFIX = "__"

#: The stream a component emits on when it names none.
DEFAULT_STREAM = "default"

#: The system components every topology gets (see :func:`squall.core.topology.system_topology`).
ACKER = "__acker"
TOPOLOGY_MASTER = "__topology_master"

#: The acker's streams: a spout tuple's tree starts, is acked, fails, or (a bolt's ``reset_timeout``, Storm's
#: resetTimeout) has its timeout restarted, forwarded by the root's acker to the spout task.
ACK_INIT_STREAM = "__ack_init"
ACK_ACK_STREAM = "__ack_ack"
ACK_FAIL_STREAM = "__ack_fail"
ACK_RESET_TIMEOUT_STREAM = "__ack_reset_timeout"

#: Every task's heartbeat (its stats) to the topology master.
MASTER_HEARTBEAT_STREAM = "__master_task_heartbeat"

#: Where tuples that no component emitted come from (Storm's ``__system`` and ``SYSTEM_TASK_ID``): tick tuples,
#: every ``topology.tick.tuple.freq.secs`` seconds with one value, that period; and shell heartbeats.
SYSTEM_COMPONENT = "__system"
SYSTEM_TASK = -1
TICK_STREAM = "__tick"

#: The pseudo-stream of the heartbeat tuples a shell bolt's subprocess answers (Storm's multilang ``__heartbeat``).
SHELL_HEARTBEAT_STREAM = "__heartbeat"

#: The checkpoint spout a topology with stateful bolts gets (Storm's CheckpointSpout ids), and its stream: each
#: tuple is one step of the checkpoint protocol, ``(txid, action)``, sent to every task of every stateful bolt.
CHECKPOINT_SPOUT = "$checkpointspout"
CHECKPOINT_STREAM = "$checkpoint"
CHECKPOINT_FIELDS = ("txid", "action")
#: The component-conf key that makes a bolt stateful (the DSL sets it for a StatefulBolt): what tells
#: :func:`squall.core.topology.system_topology` to add the checkpoint spout and subscribe the bolt to it.
STATEFUL_KEY = "squall.stateful"
