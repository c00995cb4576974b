"""The ``storm`` command line: Storm's verbs, Squall's daemons.

:mod:`squall.cli.main` builds the parser and dispatches; :mod:`squall.cli.options` holds what every entry
point shares (``--config``, ``-c``, the daemon loop); :mod:`squall.cli.operate` the verbs that talk to a
running cluster.
"""
