"""The logviewer daemon (``storm logviewer``, Storm's): the worker and daemon logs of this host over HTTP, on
``logviewer.host``:``logviewer.port`` (8000), beside the host's supervisor.

:mod:`logviewer.files` reads the log directory (``storm.log.dir``, else ``<storm.local.dir>/logs``) — only it,
every read bounded; :mod:`logviewer.app` routes HTTP requests; :mod:`logviewer.server` serves them
(``python -m logviewer``, what ``storm logviewer`` runs). The UI links each worker to its log here, and
``storm logs`` reads them through it; the UI links each nimbus and supervisor to its own log
(``/daemonlog?file=nimbus.log``) here too.
"""
