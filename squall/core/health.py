"""The words of a topology's health (its ``sched_status``): reasons joined by :data:`REASONS_SEP`, the errors reason
last. Nimbus writes it (:func:`nimbus.queries.health`); Storm clients show it whole; the UI splits it.
"""

from __future__ import annotations

#: Each reason of :func:`nimbus.queries.health` is one of these, joined by this.
REASONS_SEP = "; "
#: How the errors reason starts (always the last reason: a page shows it apart, :func:`split_health`).
ERRORS_PREFIX = "errors: "


def split_health(sched_status: str | None) -> tuple[str | None, str | None]:
    """A health text (:func:`nimbus.queries.health`) as (its other reasons, its errors reason), each None when
    absent: a page shows errors in their own column.

    >>> split_health("failing: 1 of 2 workers down; errors: split (3 s ago): KeyError: 'x'; y")
    ('failing: 1 of 2 workers down', "errors: split (3 s ago): KeyError: 'x'; y")
    """
    text = sched_status or ""
    if text.startswith(ERRORS_PREFIX):
        return None, text
    before, sep, errors = text.partition(REASONS_SEP + ERRORS_PREFIX)
    return before or None, ERRORS_PREFIX + errors if sep else None
