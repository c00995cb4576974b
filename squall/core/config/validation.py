"""What is wrong with a conf: the typed error every config problem raises, each known key's value checked
against its declared type, and keys that look like typos of known ones.

Unknown keys are kept untouched: topologies carry their own user keys through the same conf maps. One that
looks like a typo of a known key (``topology.worker``) gets a warning naming that key (:func:`typo_warnings`).
"""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable, Mapping
from typing import Any

from squall.core.config.keys import KEY_BY_NAME

__all__ = [
    "ConfigError",
    "DEFAULTS_SOURCE",
    "likely_typo",
    "short_repr",
    "typo_warnings",
    "unknown_keys",
    "validate_conf",
]

DEFAULTS_SOURCE = "built-in defaults"
"""Source label used in error messages for values nobody set explicitly."""


class ConfigError(ValueError):
    """A config file, override or value is unusable; the message says which key and where from::

    try:
        conf = load_config("storm.yaml")
    except ConfigError as exc:
        print(exc.problems)      # every problem found, one line each
    """

    def __init__(self, message: str, problems: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.problems: list[str] = list(problems) or [message]


def unknown_keys(conf: Mapping[str, Any]) -> list[str]:
    """Keys of `conf` that are not in the table, sorted; daemons may warn about likely typos."""
    return sorted(str(k) for k in conf if k not in KEY_BY_NAME)


#: How alike (difflib's ratio) an unknown key must be to a known one to be taken for its typo. A typo is an
#: edit or two away (topology.wrokers: 0.94); Storm keys Squall does not read sit just below
#: (storm.zookeeper.auth.user 0.885 from storm.zookeeper.auth.scheme, topology.executor.send.buffer.size 0.87
#: from topology.executor.receive.buffer.size) and must not draw a false "did you mean".
TYPO_CUTOFF = 0.9


def likely_typo(name: str) -> str | None:
    """The known key that ``name`` is most likely a typo of; None for a known key or a key of the user's own.

    >>> likely_typo("topology.worker"), likely_typo("topology.workers"), likely_typo("topology.my.threshold")
    ('topology.workers', None, None)
    """
    if name in KEY_BY_NAME:
        return None
    match = difflib.get_close_matches(name.lower(), KEY_BY_NAME, n=1, cutoff=TYPO_CUTOFF)
    return match[0] if match else None


def typo_warnings(conf: Mapping[str, Any], source: str | Mapping[str, str] = "config") -> list[str]:
    """One line per key of ``conf`` that looks like a typo of a known key, naming where it came from.

    ``source`` labels the keys as in :func:`validate_conf` (one label, or one per key). Topologies define
    keys of their own (``topology.my.threshold``), so an unknown key alone is no mistake: only a near miss is.

    >>> typo_warnings({"topology.worker": 3}, "topology wc conf")
    ['unknown key topology.worker (topology wc conf); did you mean topology.workers?']
    """
    warnings = []
    for name in sorted(str(k) for k in conf):
        if (match := likely_typo(name)) is not None:
            origin = source if isinstance(source, str) else source.get(name, DEFAULTS_SOURCE)
            warnings.append(f"unknown key {name} ({origin}); did you mean {match}?")
    return warnings


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = 8


def short_repr(value: Any) -> str:
    """``value``'s repr, cut short: keeps a message readable when someone passes a huge value."""
    return _REPR.repr(value)


def validate_conf(conf: Mapping[Any, Any], source: str | Mapping[str, str] = "config") -> None:
    """Check every known key in `conf` against its declared type; unknown keys pass untouched.

    `source` labels where values came from in error messages: one label for the whole conf (e.g.
    "topology conf"), or a per-key mapping (keys missing from it are labelled as built-in defaults).
    Raises ConfigError listing every problem, one per line.
    """
    problems = []
    # sorted, so the same conf gives the same message whatever order it was built in
    for name, value in sorted(conf.items(), key=lambda item: str(item[0])):
        origin = source if isinstance(source, str) else source.get(name, DEFAULTS_SOURCE)
        if not isinstance(name, str):
            problems.append(f"{origin}: config key {short_repr(name)} is not a string")
            continue
        key = KEY_BY_NAME.get(name)
        if key is None or key.accepts(value):
            continue
        problems.append(
            f"{origin}: config key {name!r} expects {key.type_name}, got {short_repr(value)} ({type(value).__name__})"
        )
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems), problems)
