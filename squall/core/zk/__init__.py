"""ZooKeeper state: path layout, typed records and the client wrapper."""
