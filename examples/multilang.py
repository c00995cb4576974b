"""Shell (multilang) components: Storm's word count with its split step in Node.js, and the pass-through
topology of the multilang benchmark.

``examples/resources/`` is the package's ``resources/`` directory, where shell components run: ``storm local``
finds it beside this file, ``storm jar`` ships it with ``--include examples/resources``::

    storm local examples/multilang.py
    storm jar examples/multilang.py --include examples/resources

The Node.js bolt (``splitsentence.js``) speaks the protocol through ``multilang.js``, a small client in the
manner of Storm's storm.js; any language that reads and writes JSON on stdin/stdout can do the same.
"""

from __future__ import annotations

from examples import perf, wordcount
from squall import Topology


def topology(rounds: int | None = None, workers: int = 1, splitters: int = 2) -> Topology:
    """Sentences (Python) → split (Node.js, ``node splitsentence.js``) → count (Python)."""
    t = Topology("multilang-wordcount", conf={"topology.workers": workers})
    sentences = t.spout("sentences", wordcount.SentenceSpout, args=[rounds] if rounds else [])
    split = t.shell_bolt(
        "split", command="node", script="splitsentence.js", outputs=["word"], parallelism=splitters
    ).shuffle(sentences)
    t.bolt("count", wordcount.WordCount, parallelism=2).fields(split, "word")
    return t


def passthrough(
    command: str = "streamparse_run", serializer: str = "json", ackers: int = 1, bolts: int = 1
) -> Topology:
    """ConstSpout → a pystorm pass-through bolt (``passthrough.py``) → DevNullBolt: the multilang hot path alone.
    ``command`` runs pystorm components (streamparse_run); ``serializer`` is ``json`` or ``msgpack``."""
    t = Topology("multilang-passthrough", conf={"topology.acker.executors": ackers})
    spout = t.spout("spout", perf.ConstSpout)
    shell = t.shell_bolt(
        "pass", command=command, script=f"-s {serializer} passthrough.PassThrough", outputs=["str"], parallelism=bolts
    ).local_or_shuffle(spout)
    t.bolt("null", perf.DevNullBolt).local_or_shuffle(shell)
    return t
