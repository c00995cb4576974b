"""Which store a task's state opens (Storm's ``StateFactory``): ``topology.state.provider`` names it, Storm's
class names accepted for the providers Storm has, and ``topology.state.provider.config`` configures it.

    state = open_state("count-3", conf)     # the namespace: "<component>-<task>", as Storm's

A provider is a name here and a store module beside this one (:class:`~squall.api.state.keyvalue.StateStore`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from squall.api.state.keyvalue import KeyValueState, StateError, StateStore
from squall.api.state.memory import MemoryStore
from squall.api.state.sqlite import SqliteStore

__all__ = ["ALIASES", "PROVIDERS", "open_state", "provider_config", "provider_name"]

#: Storm's provider class names, as the providers they name here.
ALIASES = {"org.apache.storm.state.InMemoryKeyValueStateProvider": "memory"}


def _memory(namespace: str, conf: Mapping[str, Any], settings: Mapping[str, Any]) -> StateStore:
    return MemoryStore()  # Storm's in-memory provider takes no settings and ignores any


def _sqlite(namespace: str, conf: Mapping[str, Any], settings: Mapping[str, Any]) -> StateStore:
    unknown = sorted(set(settings) - {"directory"})
    if unknown:
        raise StateError(f'topology.state.provider.config: the sqlite provider takes only "directory", not {unknown}')
    local_dir = Path(conf.get("storm.local.dir") or ".")
    directory = settings.get("directory")
    if directory is None:
        where = local_dir / "state" / str(conf.get("topology.name") or "local")
    elif isinstance(directory, str) and directory:
        where = local_dir / directory  # an absolute directory stays itself
    else:
        raise StateError(f'topology.state.provider.config: "directory" must be a path, got {directory!r}')
    return SqliteStore(where / f"{namespace}.sqlite3")


#: Provider name → how it opens a namespace's store from the topology conf and the provider's settings.
PROVIDERS: Mapping[str, Callable[[str, Mapping[str, Any], Mapping[str, Any]], StateStore]] = {
    "memory": _memory,
    "sqlite": _sqlite,
}


def provider_name(conf: Mapping[str, Any]) -> str:
    """The provider ``conf`` names, Storm's class names read as theirs."""
    name = conf.get("topology.state.provider") or "memory"
    name = ALIASES.get(name, name)
    if name not in PROVIDERS:
        known = ", ".join(repr(p) for p in [*PROVIDERS, *ALIASES])
        raise StateError(f"topology.state.provider {name!r} is not a state provider: use one of {known}")
    return name


def provider_config(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``topology.state.provider.config`` as a dict: a map, or a JSON string of one (as Storm writes it)."""
    settings = conf.get("topology.state.provider.config")
    if settings is None:
        return {}
    if isinstance(settings, str):
        try:
            settings = json.loads(settings)
        except ValueError as exc:
            raise StateError(f"topology.state.provider.config is not valid JSON: {exc}") from None
    if not isinstance(settings, Mapping):
        raise StateError(f"topology.state.provider.config must be a map of settings, got {settings!r}")
    return dict(settings)


def open_state(namespace: str, conf: Mapping[str, Any]) -> KeyValueState:
    """The state of ``namespace`` (``<component>-<task>``) in the store the topology conf names."""
    store = PROVIDERS[provider_name(conf)](namespace, conf, provider_config(conf))
    return KeyValueState(namespace, store)
