"""How soon something that keeps dying is started again: the crash backoff shared by a supervisor's
workers and a worker's multilang subprocesses, so both crash-loop at the same pace.

    [restart_delay_secs(n) for n in range(1, 6)]   # [0.0, 1.0, 2.0, 4.0, 8.0]
"""

from __future__ import annotations

#: Retry delay after the second consecutive death (the first restart is immediate), doubled per further
#: failure up to the cap.
BACKOFF_FIRST_SECS = 1.0
BACKOFF_MAX_SECS = 60.0


def restart_delay_secs(failures: int) -> float:
    """Seconds to wait before the next start after ``failures`` deaths in a row (1 = the first death)."""
    return 0.0 if failures <= 1 else min(BACKOFF_FIRST_SECS * 2 ** (failures - 2), BACKOFF_MAX_SECS)
