"""Development tools: local mode (a topology in one process), the dev cluster, a dev ZooKeeper and the
Spark Connect helper. They compose the daemons, so they sit above them (see docs/internals/index.md).
"""
