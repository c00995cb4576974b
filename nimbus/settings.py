"""What an operator sets on the running cluster through the leader: the host blacklist (JStorm's) and each
topology's dynamic log levels (Storm's ``set_log_level``).

Each is one ZooKeeper node whose one writer is the leader, read where it takes effect: the assigner reads
``/blacklist`` at every assignment, and a topology's workers watch ``/logconfigs/<id>``.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from nimbus.state import NimbusState
from squall.core.zk import paths
from squall.core.zk.records import Blacklist, LoggerLevel, LoggerLevels

log = structlog.get_logger(__name__)


class Settings:
    """The blacklist and log levels of one nimbus's :class:`~nimbus.state.NimbusState`."""

    def __init__(self, state: NimbusState) -> None:
        self.state = state

    def set_blacklisted(self, host: str, blacklisted: bool) -> None:
        """Add ``host`` to ``/blacklist`` or remove it; the leader is its one writer. The assigner reads it at
        every assignment, so the host gets no new workers from then on; workers already there keep running."""
        state = self.state
        state.require_leader()
        with state.lock:
            hosts = set(self.blacklist())
            wanted = hosts | {host} if blacklisted else hosts - {host}
            if wanted != hosts:
                state.zk.write(paths.BLACKLIST, Blacklist(sorted(wanted)))
        log.info("host blacklisted" if blacklisted else "host off the blacklist", host=host)

    def blacklist(self) -> list[str]:
        return sorted((self.state.zk.read(paths.BLACKLIST, Blacklist) or Blacklist()).hosts)

    def set_log_levels(self, topology_id: str, changes: Mapping[str, LoggerLevel | None]) -> LoggerLevels:
        """Merge ``changes`` (logger → new setting, None: remove it) into ``/logconfigs/<id>``, whose one writer
        is the leader; settings already expired are dropped. The topology's workers watch the node."""
        state = self.state
        state.require_leader()
        with state.lock:
            state.base(topology_id)
            now_ms = int(state.clock.time() * 1000)
            current = state.zk.read(paths.log_config(topology_id), LoggerLevels) or LoggerLevels()
            merged = {
                name: s
                for name, s in {**current.loggers, **changes}.items()
                if s is not None and (not s.expires_ms or s.expires_ms > now_ms)
            }
            state.zk.write(paths.log_config(topology_id), LoggerLevels(merged))
        log.info("log levels set", topology_id=topology_id, loggers={n: s.level for n, s in merged.items()})
        return LoggerLevels(merged)

    def log_levels(self, topology_id: str) -> LoggerLevels:
        self.state.base(topology_id)
        return self.state.zk.read(paths.log_config(topology_id), LoggerLevels) or LoggerLevels()
