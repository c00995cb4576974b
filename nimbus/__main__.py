"""``python -m nimbus`` (what ``storm nimbus`` runs): the nimbus daemon in the foreground."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Sequence

import structlog

from nimbus.daemon import Nimbus
from squall.cli import common_options, interrupt, load_or_exit
from squall.logs import configure_logging

log = structlog.get_logger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    args = common_options("storm nimbus", "Run the nimbus daemon.").parse_args(argv)
    conf = load_or_exit(args)
    configure_logging("nimbus", level=conf["squall.log.level"], fmt=conf["squall.log.format"])
    signal.signal(signal.SIGTERM, interrupt)
    daemon = Nimbus(conf).start()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        log.info("nimbus stopping")
    finally:
        daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
