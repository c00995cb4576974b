"""``python -m worker``: see :mod:`worker.process`."""

import sys

from worker.process import main

sys.exit(main())
