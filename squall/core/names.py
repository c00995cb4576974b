"""The one rule for topology names, component ids and stream ids, shared by the DSL and nimbus.

JStorm's topology-name character set. For ids it drops what JStorm allows but Squall cannot use
safely: "/" (ZooKeeper paths), ":" (``component:stream`` and ``host:port``), "$" (shell expansion in
``storm rebalance -e id=n``) and "<>()#" (shell metacharacters).
"""

from __future__ import annotations

import json
import string

from squall.core.system_ids import RESERVED_PREFIX

#: Longest name or id: names go into znode paths and topology ids.
MAX_ID_LENGTH = 128
SAFE_CHARS = frozenset(string.ascii_letters + string.digits + "._-")
_RULE = f"use 1 to {MAX_ID_LENGTH} characters from A-Z a-z 0-9 . _ -"


def quote(value: object) -> str:
    """User text for a message: JSON-escaped (control characters stay visible), cut at 80 characters."""
    text = str(value)
    return json.dumps(text if len(text) <= 80 else text[:80] + "…", ensure_ascii=False)


def is_system(ident: str) -> bool:
    """Whether a component or stream id is a system one (``__acker``, ``__tick``), which views leave out.

    >>> is_system("__acker"), is_system("split")
    (True, False)
    """
    return ident.startswith(RESERVED_PREFIX)


def id_problem(text: str) -> str | None:
    """Why ``text`` is not a safe name or id, or None when it is."""
    if not isinstance(text, str):
        return f"it must be a string, got {type(text).__name__}"
    if not text:
        return f"{_RULE} (it is empty)"
    if len(text) > MAX_ID_LENGTH:
        return f"{_RULE} (it is {len(text)} characters long)"
    bad = "".join(dict.fromkeys(c for c in text if c not in SAFE_CHARS))
    if bad:
        return f"{_RULE} (it contains {', '.join(quote(c) for c in bad)})"
    return None
