"""The UI daemon (``storm ui``): Storm's UI REST API (``/api/v1/...``) and HTML pages over what nimbus reports.

:mod:`ui.source` asks nimbus over Thrift, :mod:`ui.shapes` turns its structs into Storm's JSON (adding executors'
numbers up with :mod:`ui.stats`), :mod:`ui.pages` renders pages from that JSON (templates/, static/; the topology's
picture is laid out by :mod:`ui.graph`), :mod:`ui.metrics` makes Prometheus's ``/metrics`` from the same numbers,
:mod:`ui.params` reads request parameters, :mod:`ui.app` routes HTTP requests, :mod:`ui.openapi` describes the API
and :mod:`ui.server` serves it (``python -m ui``, what ``storm ui`` runs).
"""
