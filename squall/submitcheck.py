"""What ``storm jar`` checks before it uploads: the topology loads, and it imports from its package alone.

A topology that loads on the developer's machine can still fail on every worker: a module it imports
sits beside it but was not packaged (``--include`` forgotten), and the workers would crash-loop on it.
:func:`check_package` finds that at submit. It starts one fresh interpreter the way a supervisor starts
a worker — the working directory a code directory holding only the package, the package first on
``sys.path`` (:func:`squall.local_state.put_code_on_path`, the worker's own rule), the installed
libraries and this environment, minus the topology's own directory — and there imports the topology
module and every component class the topology names.

Every failure is a :class:`SubmitCheckError`: one line for the user (``wc.py:12: invalid syntax``, or
the module to ``--include``) and the traceback for ``--verbose``.

    topology = load_for_submit("wc.py", "topology", [])
    package = build_package(["wc.py", "helpers.py"], "/tmp/wc.zip")
    check_package(package, "wc.py", "topology", topology)   # SubmitCheckError if a worker could not import it
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import traceback
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import squall
from squall.classcheck import Kind, NotAComponentClass, resolve
from squall.dsl import Topology, load_topology, shown_path, topology_module
from squall.local_state import CODE_FILES, put_code_on_path
from squall.package import RESOURCES
from squall.thrift import storm

#: A topology module that takes longer than this to import is reported rather than waited for.
CHECK_TIMEOUT_SECS = 60.0

_SQUALL_DIR = str(Path(squall.__file__).resolve().parent) + os.sep

T = TypeVar("T")

#: How a traceback's file is shown to the user, or None for a file that is not the user's.
Shown = Callable[[str], "str | None"]


class SubmitCheckError(Exception):
    """The topology cannot be submitted as it is: ``line`` says why in one line (file:line where there is
    one, and the fix); ``details`` is the traceback behind it, for ``--verbose``.

        try:
            check_package(package, "wc.py", "topology", topology)
        except SubmitCheckError as exc:
            print(f"storm jar: {exc.line}")   # storm jar: module 'helpers' is imported by wc.py but ...
    """

    def __init__(self, line: str, details: str = "") -> None:
        super().__init__(line)
        self.line = line
        self.details = details


def load_for_submit(source: str, topology: str = "topology", args: Sequence[Any] = ()) -> Topology:
    """:func:`squall.dsl.load_topology` and ``build()``, with any failure of the user's code as a
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
        raise SubmitCheckError(one_line(exc, _user_files(source)), _traceback(exc)) from None


def check_package(package: Path, source: str, topology: str, loaded: Topology, *,
                  timeout_secs: float = CHECK_TIMEOUT_SECS) -> None:
    """Import the topology module of ``source`` and every component class of ``loaded`` from ``package``
    alone, in a fresh interpreter set up as a worker is; :class:`SubmitCheckError` if any import fails."""
    user_dir, module, _ = topology_module(source, topology)
    thrift = loaded.build()[0]
    _check_shell_scripts(package, Path(source).resolve(), thrift)
    request = {"modules": [module], "classes": component_classes(thrift)}
    with tempfile.TemporaryDirectory(prefix="squall-check-") as code:
        (Path(code) / CODE_FILES["code"]).symlink_to(Path(package).resolve())
        result = import_as_a_worker(request, Path(code), env=_worker_env(user_dir), timeout_secs=timeout_secs,
                                    what=f"{module} from the package")
    if "missing" in result:
        name, by = result["missing"], result["imported_by"]
        raise SubmitCheckError(f"module {name!r} is imported by {by} but not in the package: add it with "
                               f"--include {_where(name) or 'PATH'}", result["traceback"])
    if "line" in result:
        raise SubmitCheckError(result["line"], result["traceback"])


def _check_shell_scripts(package: Path, source: Path, topology: storm.StormTopology) -> None:
    """A shell component whose script is in the ``resources/`` beside ``source`` (where ``storm local`` runs it)
    but not in the package would fail on every worker: :class:`SubmitCheckError` naming the ``--include``."""
    beside = (source if source.is_dir() else source.parent) / RESOURCES
    with zipfile.ZipFile(package) as archive:
        shipped = set(archive.namelist())
    for kind, specs in (("spout", topology.spouts), ("bolt", topology.bolts)):
        for cid, spec in sorted(specs.items()):
            shell = (spec.spout_object if kind == "spout" else spec.bolt_object).shell
            script = (shell.script or "").split()[:1] if shell is not None else []
            if script and f"{RESOURCES}/{script[0]}" not in shipped and (beside / script[0]).is_file():
                raise SubmitCheckError(f"shell {kind} {cid!r} runs {script[0]}, which is in {shown_path(beside)} "
                                       f"but not in the package: add --include {shown_path(beside)}")


def import_as_a_worker(request: Mapping[str, Any], code: Path, *, env: Mapping[str, str], timeout_secs: float,
                       what: str) -> dict[str, Any]:
    """Import ``request["modules"]`` and resolve ``request["classes"]`` ((label, module, class, kind) each, see
    :func:`component_classes`) in a fresh interpreter whose working directory is the code directory
    ``code``, as a worker would; its answer: ``{}`` when all went well, ``missing``/``imported_by`` for a
    module not found, else ``line`` (and ``traceback``). A child that hangs or dies is a
    :class:`SubmitCheckError` (``what`` names what it imported, for the message).

        import_as_a_worker({"modules": [], "classes": [("spout 's'", "os", "system", "spout")]}, Path(tmp),
                           env={"PATH": "/usr/bin"}, timeout_secs=20, what="the installed classes")
        # {"line": "spout 's' names os.system, a builtin function, not a Spout subclass: ...", ...}
    """
    try:
        done = subprocess.run([sys.executable, "-m", __name__], input=json.dumps(request), capture_output=True,
                              text=True, cwd=code, env=dict(env), timeout=timeout_secs)
    except subprocess.TimeoutExpired:
        raise SubmitCheckError(f"importing {what} took more than {timeout_secs:g}s: does it do work at import "
                               "time? Move that into open() or prepare()") from None
    try:
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer
    except ValueError:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise SubmitCheckError(f"importing {what} failed: {last}", done.stderr) from None


def one_line(exc: BaseException, shown: Shown) -> str:
    """``file:line: message`` for an error raised while loading user code.

    The place is the innermost frame in a user file (``shown`` says which files are and how to name
    them); a syntax error names its own. Squall's own checks (``TopologyError``...) already say what
    is wrong, so only an exception raised outside Squall is prefixed with its type.
    """
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{shown(exc.filename) or exc.filename}:{exc.lineno}: {exc.msg}"
    frames = traceback.extract_tb(exc.__traceback__)
    where = next((f"{name}:{frame.lineno}: " for frame in reversed(frames) if (name := shown(frame.filename))), "")
    ours = bool(frames) and frames[-1].filename.startswith(_SQUALL_DIR)
    return where + (str(exc) if ours else f"{type(exc).__name__}: {exc}")


# ------------------------------------------------------------------------------------------------
# The parent: what to check, where the user's files are
# ------------------------------------------------------------------------------------------------


def component_classes(topology: storm.StormTopology) -> list[tuple[str, str, str, Kind]]:
    """(label, module, class, kind) of every Python class a worker imports to run ``topology`` (a validated
    one: custom groupings are JSON, see :func:`squall.topology.validate_topology`)."""
    found: list[tuple[str, str, str, Kind]] = []
    kinds: tuple[tuple[Kind, Any], ...] = (("spout", topology.spouts), ("bolt", topology.bolts))
    for kind, specs in kinds:
        for cid, spec in sorted(specs.items()):
            python = (spec.spout_object if kind == "spout" else spec.bolt_object).python_object
            if python is not None:
                found.append((f"{kind} {cid!r}", python.module_name, python.class_name, kind))
            for grouping in spec.common.inputs.values():
                if grouping.custom_serialized:
                    custom = json.loads(grouping.custom_serialized)
                    found.append((f"the custom grouping of {kind} {cid!r}", custom["module"], custom["class"],
                                  "custom grouping"))
    return found


def _user_files(source: str) -> Shown:
    """The user's files are those beside the topology file or package."""
    root = Path(source).resolve().parent

    def shown(filename: str) -> str | None:
        path = Path(filename)
        return shown_path(path) if path.is_relative_to(root) and not filename.startswith(_SQUALL_DIR) else None

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
    kept = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep)
            if entry and Path(entry).resolve() != user_dir]
    env["PYTHONPATH"] = os.pathsep.join(kept)
    return env


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


# ------------------------------------------------------------------------------------------------
# The child: a worker's interpreter
# ------------------------------------------------------------------------------------------------


def _import_as_a_worker(request: dict[str, Any]) -> dict[str, Any]:
    """Import what a worker imports, from the code directory that is the working directory."""
    code = Path.cwd()
    put_code_on_path(code)
    package = str(code / CODE_FILES["code"]) + os.sep

    def shown(filename: str) -> str | None:
        return filename[len(package):] if filename.startswith(package) else None

    label = ""
    try:
        for module in request["modules"]:
            label = module
            importlib.import_module(module)
        for label, module, name, kind in request["classes"]:
            resolve(module, name, kind, label)
    except NotAComponentClass as exc:
        return {"line": str(exc), "traceback": ""}
    except Exception as exc:  # user code may raise anything at import
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            frames = traceback.extract_tb(exc.__traceback__)
            by = next((name for frame in reversed(frames) if (name := shown(frame.filename))), label)
            return {"missing": exc.name, "imported_by": by, "traceback": _traceback(exc)}
        return {"line": one_line(exc, shown), "traceback": _traceback(exc)}
    return {}


def _main() -> int:
    request = json.loads(sys.stdin.read())
    out, sys.stdout = sys.stdout, sys.stderr  # what user modules print must not mix with the answer
    out.write(json.dumps(_import_as_a_worker(request)))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
