"""The environment of a process that runs topology code: an allow-list, never the daemon's whole environment.

A daemon's environment may hold what topology code must not see: cloud or database credentials, tokens,
``SSH_AUTH_SOCK``. A worker (and the interpreter nimbus checks a topology's installed classes in) gets
only what a Python process, Spark and the system need — the names below, ``LC_*``, and the names an
operator adds — so a component that reads ``os.environ`` finds no credential of the daemon's.

    user_code_environment({"PATH": "/usr/bin", "AWS_SECRET_ACCESS_KEY": "x"})   # {"PATH": "/usr/bin"}
    user_code_environment(os.environ, extra=["HTTPS_PROXY"])                     # ... plus HTTPS_PROXY
    with_own_scripts({"PATH": "/usr/bin:/bin"})    # {"PATH": "/srv/squall/.venv/bin:/usr/bin:/bin"}
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterable, Mapping

#: Passed on when set: the process basics, Python's, and what Spark/Java need to start.
ALLOWED = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "VIRTUAL_ENV",
        "JAVA_HOME",
        "SPARK_HOME",
        "SPARK_CONF_DIR",
        "SPARK_LOCAL_IP",
        "SPARK_LOCAL_DIRS",
        "HADOOP_CONF_DIR",
        "PYSPARK_PYTHON",
        "PYSPARK_DRIVER_PYTHON",
    }
)
#: Passed on when set, by prefix: the locale categories.
ALLOWED_PREFIXES = ("LC_",)


def user_code_environment(environ: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """The variables of ``environ`` a process running topology code may see: :data:`ALLOWED`, ``LC_*``
    and the names in ``extra``."""
    allowed = ALLOWED | set(extra)
    return {name: value for name, value in environ.items() if name in allowed or name.startswith(ALLOWED_PREFIXES)}


def with_own_scripts(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with this interpreter's scripts directory first on PATH (unless PATH has it already): where
    the console scripts of the packages this process imports are (``streamparse_run``), so a shell component
    finds them however its worker was started: a service manager starts the supervisor by the absolute path
    of a virtualenv's ``storm``, with a PATH that holds no virtualenv."""
    scripts = sysconfig.get_path("scripts")
    path = environ.get("PATH", os.defpath)
    if scripts in path.split(os.pathsep):
        return dict(environ)
    return {**environ, "PATH": os.pathsep.join(filter(None, (scripts, path)))}
