"""The ``storm`` command line: Storm's verbs, Squall's daemons.

:mod:`squall.cli.main` builds the parser and dispatches; :mod:`squall.cli.options` holds the parser's shared
options and argument types (on top of :mod:`squall.core.entry`, what every process's entry shares);
:mod:`squall.cli.operate` the verbs that talk to a running cluster; :mod:`squall.cli.submit` ``storm jar`` and
``update_topology`` (package, upload, submit); :mod:`squall.cli.local` ``storm local``;
:mod:`squall.cli.submitcheck` how ``storm jar`` and ``storm local`` load a topology file and check its package.
"""
