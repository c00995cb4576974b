"""``python -m supervisor`` (what ``storm supervisor`` runs): the supervisor daemon in the foreground.

SIGTERM and Ctrl-C stop the daemon but not its workers: a supervisor restart adopts them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from squall.core.entry import run_daemon
from supervisor.daemon import Supervisor


def main(argv: Sequence[str] | None = None) -> int:
    return run_daemon("supervisor", lambda conf: Supervisor(conf).start(), argv)


if __name__ == "__main__":
    sys.exit(main())
