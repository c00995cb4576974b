"""``python -m ui`` (what ``storm ui`` runs): the UI daemon in the foreground."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from squall.core.entry import run_daemon
from ui.server import UiServer


def main(argv: Sequence[str] | None = None) -> int:
    return run_daemon("ui", lambda conf: UiServer(conf).start(), argv)


if __name__ == "__main__":
    sys.exit(main())
