"""The optional stacks of the ``squall`` package, and the one line naming the extra to install when one is missing.

``pip install squall`` gives the API, the core, the daemons (nimbus, supervisor, worker) and local mode. Three
stacks are extras, installed only where they run:

* ``squall[spark]``: Spark bolts and ``storm spark-connect`` (pyspark with Spark Connect, pyarrow, pandas:
  several hundred MB, and a JVM to run them);
* ``squall[ui]``: ``storm ui`` and ``storm logviewer`` (starlette, uvicorn, jinja2, prometheus_client);
* ``squall[kafka]``: the Kafka spout (confluent-kafka, librdkafka's client).

Only the stacks' own modules import them at module level (``ui``, ``logviewer`` and :mod:`squall.core.httpd`,
the web stack's adapter); Spark is imported inside the functions that run a Spark job. Whatever starts
something that needs a stack checks for it first with :func:`require`, so a missing stack is told at once,
as one line naming the extra, not as a traceback from a worker or a daemon's import::

    require("ui", "the UI")
    # MissingExtra: the UI needs the web stack (starlette, uvicorn not installed): pip install 'squall[ui]'
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "MissingExtra", "extra_for", "missing_modules", "require"]

#: Each extra: what its stack is called in messages, and the top-level modules it installs that Squall imports.
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "spark": ("Spark", ("pyspark", "pyarrow", "pandas")),
    "ui": ("the web stack", ("starlette", "uvicorn", "jinja2", "prometheus_client")),
    "kafka": ("the Kafka client", ("confluent_kafka",)),
}


class MissingExtra(ImportError):
    """Something needs an optional stack that is not installed; the message names the extra that installs it.

    try:
        require("spark", "bolt 'windows'")
    except MissingExtra as exc:
        print(exc)   # bolt 'windows' needs Spark (pyspark not installed): pip install 'squall[spark]'
    """

    def __init__(self, message: str, extra: str) -> None:
        super().__init__(f"{message}: pip install 'squall[{extra}]'")
        self.extra = extra


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra``'s stack that this environment cannot import (found without importing them)."""
    return [name for name in EXTRAS[extra][1] if importlib.util.find_spec(name) is None]


def require(extra: str, what: str) -> None:
    """Nothing when ``extra``'s stack is installed, else :class:`MissingExtra` saying that ``what`` needs it."""
    if missing := missing_modules(extra):
        raise MissingExtra(f"{what} needs {EXTRAS[extra][0]} ({', '.join(missing)} not installed)", extra)


def extra_for(exc: BaseException) -> MissingExtra | None:
    """The :class:`MissingExtra` that ``exc`` means when it is a failed import of a stack's module (user code's
    ``from pyspark.sql import DataFrame`` without ``squall[spark]``), else None::

        extra_for(ModuleNotFoundError("No module named 'pyspark'", name="pyspark"))
        # MissingExtra: No module named 'pyspark' (it comes with Spark): pip install 'squall[spark]'
    """
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.partition(".")[0]
    for extra, (stack, modules) in EXTRAS.items():
        if top in modules:
            return MissingExtra(f"No module named {top!r} (it comes with {stack})", extra)
    return None
