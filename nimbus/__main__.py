"""``python -m nimbus`` (what ``storm nimbus`` runs): the nimbus daemon in the foreground, serving its Thrift
handler."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from nimbus.daemon import Nimbus
from nimbus.service import NimbusService
from squall.core.entry import run_daemon


def main(argv: Sequence[str] | None = None) -> int:
    return run_daemon("nimbus", lambda conf: Nimbus(conf).start(NimbusService), argv)


if __name__ == "__main__":
    sys.exit(main())
