"""The UI daemon (``storm ui``): Storm's UI REST API (``/api/v1/...``) over what nimbus reports.

:mod:`ui.source` asks nimbus over Thrift, :mod:`ui.shapes` turns its structs into Storm's JSON,
:mod:`ui.app` routes HTTP requests between the two, :mod:`ui.openapi` describes the API and
:mod:`ui.server` serves it (``python -m ui``, what ``storm ui`` runs).
"""
