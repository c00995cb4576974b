"""An alias of :mod:`squall.dev.local`, kept so code importing ``worker.local`` keeps working:
``from squall import LocalTopology``."""

import sys

import squall.dev.local as home

sys.modules[__name__] = home
