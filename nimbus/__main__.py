"""``python -m nimbus`` (what ``storm nimbus`` runs): the nimbus daemon in the foreground."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from nimbus.daemon import Nimbus
from squall.cli.options import run_daemon


def main(argv: Sequence[str] | None = None) -> int:
    return run_daemon("nimbus", lambda conf: Nimbus(conf).start(), argv)


if __name__ == "__main__":
    sys.exit(main())
