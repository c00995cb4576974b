"""What every Squall process shares: configuration, clocks, names and system ids, logs, the Thrift contract
(client and server), ZooKeeper state, TLS, authorization, HTTP serving, local state and daemon entry.

The bottom layer: it imports nothing else of Squall's (see docs/internals/index.md).
"""
