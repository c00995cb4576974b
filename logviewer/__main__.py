"""``python -m logviewer`` (what ``storm logviewer`` runs): the logviewer daemon in the foreground."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from logviewer.server import LogviewerServer
from squall.core.entry import run_daemon


def main(argv: Sequence[str] | None = None) -> int:
    return run_daemon("logviewer", lambda conf: LogviewerServer(conf).start(), argv)


if __name__ == "__main__":
    sys.exit(main())
