"""``python -m supervisor`` (what ``storm supervisor`` runs): the supervisor daemon in the foreground.

SIGTERM and Ctrl-C stop the daemon but not its workers: a supervisor restart adopts them.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Sequence

import structlog

from squall.cli import common_options, interrupt, load_or_exit
from squall.logs import configure_logging
from supervisor.daemon import Supervisor

log = structlog.get_logger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    args = common_options("storm supervisor", "Run the supervisor daemon.").parse_args(argv)
    conf = load_or_exit(args)
    configure_logging("supervisor", level=conf["squall.log.level"], fmt=conf["squall.log.format"])
    signal.signal(signal.SIGTERM, interrupt)
    daemon = Supervisor(conf).start()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        log.info("supervisor stopping")
    finally:
        daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
