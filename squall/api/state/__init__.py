"""State a bolt keeps across failures (Storm's ``org.apache.storm.state``): the key-value state a
:class:`~squall.api.stateful.StatefulBolt` gets, and the stores that hold it.

The work is divided as Storm divides it, with the store behind a narrow interface so a new provider is one
module:

* :mod:`~squall.api.state.keyvalue`: :class:`~squall.api.state.keyvalue.KeyValueState`, what the bolt sees
  (``put``, ``get``, ``delete``, iteration; msgpack keys and values) and Storm's two-phase commit over a store,
  and :class:`~squall.api.state.keyvalue.StateStore`, what a store must do (committed entries, one prepared set
  apart, the prepare and commit txids);
* :mod:`~squall.api.state.memory` and :mod:`~squall.api.state.sqlite`: the stores (in memory, Storm's
  default; SQLite files on the worker's host);
* :mod:`~squall.api.state.providers`: ``topology.state.provider`` and its config to a store (Storm's
  ``StateFactory``).
"""
