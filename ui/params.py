"""The UI's request parameters, checked before nimbus is asked: the stats window and ``sys`` flag of the
pages, a wait-time, Storm's rebalance body, and a JSONP callback. A bad one is :class:`BadRequest`, whose message
says what the parameter takes (the API answers it with 400, a page with its error page).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from squall.core.stats import ALL_TIME, WINDOWS
from squall.core.thrift import storm

#: Storm's ``sys`` parameter: these values include system components and streams.
SYS_ON = ("1", "true")
#: The largest count or wait nimbus takes: its Thrift fields are 32-bit.
MAX_I32 = 2**31 - 1


class BadRequest(ValueError):
    """A parameter or body the API cannot use; the message says which and what it takes."""


#: A JSONP callback: a JavaScript name, or names joined by dots (``jQuery3.cb``), ASCII, nothing else.
CALLBACK = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z_$][A-Za-z0-9_$]*)*")
MAX_CALLBACK_CHARS = 64


def jsonp_callback(query: Mapping[str, str]) -> str | None:
    """Storm's ``callback`` parameter: the function a JSONP answer calls (None: plain JSON). Only a plain
    (dotted) JavaScript name is taken, so the answer can never be more than one call of it.

    >>> jsonp_callback({"callback": "jQuery.cb_1"}), jsonp_callback({})
    ('jQuery.cb_1', None)
    """
    callback = query.get("callback")
    if callback is None:
        return None
    if len(callback) > MAX_CALLBACK_CHARS or not CALLBACK.fullmatch(callback):
        raise BadRequest(
            f"callback must be a JavaScript function name (letters, digits, _ and $, names joined by "
            f"dots, not starting with a digit), at most {MAX_CALLBACK_CHARS} characters"
        )
    return callback


def window_and_sys(query: Mapping[str, str]) -> tuple[str, bool]:
    """The ``window`` (Storm's keys: ``600``, ``10800``, ``86400`` or ``:all-time``, the default) and ``sys``
    (default off) query parameters.

    >>> window_and_sys({"sys": "1"}), window_and_sys({"window": "600"})
    ((':all-time', True), ('600', False))
    """
    window = query.get("window", ALL_TIME)
    if window not in WINDOWS:
        raise BadRequest(
            f"window {window!r} is not kept; give one of {', '.join(WINDOWS)} "
            "(the last 10 minutes, 3 hours, 1 day, or all time)"
        )
    return window, query.get("sys", "0").lower() in SYS_ON


def supervisor_query(query: Mapping[str, str]) -> dict[str, str]:
    """Which supervisor a supervisor page is about: Storm's ``id`` or ``host`` parameter (``id`` wins).

    >>> supervisor_query({"host": "h1"})
    {'host': 'h1'}
    """
    if query.get("id"):
        return {"supervisor_id": query["id"]}
    if query.get("host"):
        return {"host": query["host"]}
    raise BadRequest("give the supervisor's id (?id=ID, as /api/v1/supervisor/summary lists them) or ?host=HOST")


def wait_secs(text: str) -> int:
    """A ``wait-time`` path segment: whole seconds, 0 or more."""
    if not text.isdigit() or int(text) > MAX_I32:
        raise BadRequest(f"wait-time must be whole seconds from 0 to {MAX_I32}, got {text!r}")
    return int(text)


def rebalance_options(wait: int, body: bytes) -> Any:
    """Storm's rebalance body, ``{"rebalanceOptions": {"numWorkers": 2, "executors": {"count": 4}}}`` (all
    optional; an executor count may be a numeric string, as in Storm's example), as ``RebalanceOptions``.

    >>> rebalance_options(5, b'{"rebalanceOptions": {"executors": {"count": "4"}}}').num_executors
    {'count': 4}
    """
    try:
        request = json.loads(body) if body.strip() else {}
    except ValueError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    options = request.get("rebalanceOptions", {}) if isinstance(request, dict) else None
    if not isinstance(options, dict):
        raise BadRequest('expected {"rebalanceOptions": {"numWorkers": N, "executors": {"component": N}}}')
    unknown = sorted(set(options) - {"numWorkers", "executors"})
    if unknown:
        raise BadRequest(f"unknown rebalanceOptions {', '.join(unknown)}; give numWorkers and/or executors")
    workers = options.get("numWorkers")
    if workers is not None:
        workers = _count(workers, "numWorkers")
    executors = options.get("executors")
    if executors is not None:
        if not isinstance(executors, dict):
            raise BadRequest('executors must be an object of component to count, e.g. {"count": 4}')
        executors = {str(c): _count(n, f"executors.{c}") for c, n in executors.items()}
    return storm.RebalanceOptions(wait_secs=wait, num_workers=workers, num_executors=executors or None)


def _count(value: Any, what: str) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_I32:
        raise BadRequest(f"{what} must be a whole number from 1 to {MAX_I32}, got {value!r}")
    return value
