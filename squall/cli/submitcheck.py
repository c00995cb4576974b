"""What ``storm jar`` checks before it uploads: the topology loads, and it imports from its package alone.

A topology that loads on the developer's machine can still fail on every worker: a module it imports
sits beside it but was not packaged (``--include`` forgotten), and the workers would crash-loop on it.
:func:`check_package` finds that at submit. It starts one fresh interpreter the way a supervisor starts
a worker — the working directory a code directory holding only the package, the package first on
``sys.path`` (:func:`squall.core.local_state.put_code_on_path`, the worker's own rule), the installed
libraries and this environment, minus the topology's own directory — and there imports the topology
module and every component class the topology names.

Every failure is a :class:`SubmitCheckError`: one line for the user (``wc.py:12: invalid syntax``, or
the module to ``--include``) and the traceback for ``--verbose``.

    topology = load_for_submit("wc.py", "topology", [])
    package = build_package(["wc.py", "helpers.py"], "/tmp/wc.zip")
    check_package(package, "wc.py", "topology", topology)   # SubmitCheckError if a worker could not import it
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import os
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from squall.api.dsl import Topology, TopologyError, mistyped_argument
from squall.api.importcheck import (
    SQUALL_DIR,
    Shown,
    SubmitCheckError,
    component_classes,
    import_as_a_worker,
    one_line,
    traceback_text,
)
from squall.compat.streamparse_project import is_project, load_project
from squall.core.local_state import CODE_FILES
from squall.core.package import RESOURCES
from squall.core.thrift import storm

#: A topology module that takes longer than this to import is reported rather than waited for.
CHECK_TIMEOUT_SECS = 60.0

T = TypeVar("T")


def load_for_submit(source: str, topology: str = "topology", args: Sequence[Any] = ()) -> Topology:
    """:func:`load_topology` and ``build()``, with any failure of the user's code as a
    :class:`SubmitCheckError` naming the file and line it happened at."""

    def load() -> Topology:
        loaded = load_topology(source, topology, args)
        loaded.build()
        return loaded

    return load_user_code(source, load)


def load_user_code(source: str, load: Callable[[], T]) -> T:
    """``load()``, which runs user code from ``source`` (a file or directory), with any failure as a
    :class:`SubmitCheckError` naming the user's file and line::

        project = load_user_code("wordcount", lambda: load_project("wordcount"))
    """
    try:
        return load()
    except Exception as exc:  # user code may raise anything while it is imported or builds its topology
        raise SubmitCheckError(one_line(exc, _user_files(source)), traceback_text(exc)) from None


def check_package(
    package: Path, source: str, topology: str, loaded: Topology, *, timeout_secs: float = CHECK_TIMEOUT_SECS
) -> None:
    """Import the topology module of ``source`` and every component class of ``loaded`` from ``package``
    alone, in a fresh interpreter set up as a worker is; :class:`SubmitCheckError` if any import fails."""
    user_dir, module, _ = topology_module(source, topology)
    thrift = loaded.build()[0]
    _check_shell_scripts(package, Path(source).resolve(), thrift)
    request = {"modules": [module], "classes": component_classes(thrift)}
    with tempfile.TemporaryDirectory(prefix="squall-check-") as code:
        (Path(code) / CODE_FILES["code"]).symlink_to(Path(package).resolve())
        result = import_as_a_worker(
            request, Path(code), env=_worker_env(user_dir), timeout_secs=timeout_secs, what=f"{module} from the package"
        )
    if "missing" in result:
        name, by = result["missing"], result["imported_by"]
        raise SubmitCheckError(
            f"module {name!r} is imported by {by} but not in the package: add it with "
            f"--include {_where(name) or 'PATH'}",
            result["traceback"],
        )
    if "line" in result:
        raise SubmitCheckError(result["line"], result["traceback"])


def _check_shell_scripts(package: Path, source: Path, topology: storm.StormTopology) -> None:
    """A shell component whose script is in the ``resources/`` beside ``source`` (where ``storm local`` runs it)
    but not in the package would fail on every worker: :class:`SubmitCheckError` naming the ``--include``."""
    beside = (source if source.is_dir() else source.parent) / RESOURCES
    with zipfile.ZipFile(package) as archive:
        shipped = set(archive.namelist())
    spouts = {cid: spec.spout_object for cid, spec in topology.spouts.items()}
    for kind, objects in (("spout", spouts), ("bolt", {cid: spec.bolt_object for cid, spec in topology.bolts.items()})):
        for cid, obj in sorted(objects.items()):
            shell = obj.shell
            script = (shell.script or "").split()[:1] if shell is not None else []
            if script and f"{RESOURCES}/{script[0]}" not in shipped and (beside / script[0]).is_file():
                raise SubmitCheckError(
                    f"shell {kind} {cid!r} runs {script[0]}, which is in {shown_path(beside)} "
                    f"but not in the package: add --include {shown_path(beside)}"
                )


# ------------------------------------------------------------------------------------------------
# The parent: what to check, where the user's files are
# ------------------------------------------------------------------------------------------------


def _user_files(source: str) -> Shown:
    """The user's files are those beside the topology file or package."""
    root = Path(source).resolve().parent

    def shown(filename: str) -> str | None:
        path = Path(filename)
        return shown_path(path) if path.is_relative_to(root) and not filename.startswith(SQUALL_DIR) else None

    return shown


def _where(module: str) -> str | None:
    """The file or package directory ``module`` (its top-level package) came from here, for ``--include``."""
    top = module.partition(".")[0]
    path = getattr(sys.modules.get(top), "__file__", None)
    if path is None:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return None
        path = spec.origin if spec is not None and spec.has_location else None
    if path is None:
        return None
    found = Path(path)
    return shown_path(found.parent if found.name == "__init__.py" else found)


def _worker_env(user_dir: Path) -> dict[str, str]:
    """This environment as a supervisor started from here would pass it on, without ``user_dir`` on
    ``PYTHONPATH``: the topology's own directory is what must travel in the package."""
    env = dict(os.environ)
    kept = [
        entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry and Path(entry).resolve() != user_dir
    ]
    env["PYTHONPATH"] = os.pathsep.join(kept)
    return env


def topology_module(path: str | Path, topology: str = "topology") -> tuple[Path, str, str]:
    """(directory to import from, module name, attribute) of a topology file or package, as
    :func:`load_topology` reads them; a package's code package holds the module under the same name.

        topology_module("examples/wordcount.py")            # (…/examples, "wordcount", "topology")
        topology_module("mypkg", "mypkg.topo:build")        # (…, "mypkg.topo", "build")
    """
    source = Path(path).resolve()
    if source.is_file() and source.suffix == ".py":
        return source.parent, source.stem, topology
    if source.is_dir() and (source / "__init__.py").exists():
        module, _, attribute = topology.rpartition(":")
        return source.parent, module or source.name, attribute
    if not source.exists():
        raise FileNotFoundError(
            f"{path}: no such file or directory (give a topology's .py file, its package "
            "directory or a streamparse project)"
        )
    raise FileNotFoundError(
        f"{path} is neither a .py file nor a package directory (with __init__.py) nor a "
        "streamparse project (a directory with config.json)"
    )


def shown_path(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when under it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def load_topology(path: str | Path, topology: str = "topology", args: Sequence[Any] = ()) -> Topology:
    """The :class:`Topology` that a topology file or package defines, for ``storm jar`` and ``storm local``.

    ``path`` is a ``.py`` file (``topology`` names an attribute of it) or a package directory
    (``topology`` is ``module:attribute``, or an attribute of the package itself). The attribute is a
    Topology, or a function called with ``args`` that returns one. The file's directory goes on
    ``sys.path`` and the module is imported under its own name, so its components are importable
    the way workers import them from the code package.

    ``path`` may also be a streamparse project directory (see :mod:`squall.compat.streamparse_project`):
    ``topology`` then names its ``topologies/<topology>.py``; left at its default, the project's only one.
    """
    if is_project(path):
        return load_project(path, topology).topology
    directory, module_name, attribute = topology_module(path, topology)
    sys.path.insert(0, str(directory))
    module = importlib.import_module(module_name)
    if not hasattr(module, attribute):
        close = difflib.get_close_matches(attribute, [name for name in dir(module) if not name.startswith("_")], n=1)
        flag = "--topology MODULE:ATTR names a module's" if Path(path).is_dir() else "--topology ATTR names the"
        raise TypeError(
            f"{path}: {module_name} has no {attribute!r}"
            + (f"; did you mean {close[0]}?" if close else "")
            + f" ({flag} Topology or the function returning it)"
        )
    found = getattr(module, attribute)
    if callable(found) and not isinstance(found, Topology):
        if inspect.isfunction(found) and (problem := mistyped_argument(found, args, {})):
            code = found.__code__
            raise TopologyError(
                f"{shown_path(Path(code.co_filename))}:{code.co_firstlineno}: {attribute}()'s "
                f"{problem} (arguments are JSON when they parse: 10, 2.5, true, null, else text)"
            )
        found = found(*args)
    if not isinstance(found, Topology):
        raise TypeError(
            f"{path}: {topology} must be a squall.Topology or a function returning one, got {type(found).__name__}"
        )
    return found
