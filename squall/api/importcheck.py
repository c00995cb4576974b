"""Whether a worker could import what a topology names: its modules and component classes, imported in a fresh
interpreter set up as a worker is (working directory a code directory, the package first on ``sys.path``).

Nimbus asks it of the classes a submitted topology names; ``storm jar`` of the package it is about to upload
(:mod:`squall.cli.submitcheck`). Every failure is a :class:`SubmitCheckError`: one line for the user and the
traceback behind it.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import squall
from squall.api.classcheck import Kind, NotAComponentClass, resolve
from squall.core.extras import extra_for
from squall.core.local_state import CODE_FILES, put_code_on_path
from squall.core.thrift import storm

#: Where Squall's own files are: a frame there is not the user's.
SQUALL_DIR = str(Path(squall.__file__).resolve().parent) + os.sep

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


def import_as_a_worker(
    request: Mapping[str, Any], code: Path, *, env: Mapping[str, str], timeout_secs: float, what: str
) -> dict[str, Any]:
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
        done = subprocess.run(
            [sys.executable, "-m", __name__],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            cwd=code,
            env=dict(env),
            timeout=timeout_secs,
        )
    except subprocess.TimeoutExpired:
        raise SubmitCheckError(
            f"importing {what} took more than {timeout_secs:g}s: does it do work at import "
            "time? Move that into open() or prepare()"
        ) from None
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
    ours = bool(frames) and frames[-1].filename.startswith(SQUALL_DIR)
    if (missing := extra_for(exc)) is not None:  # user code importing pyspark without squall[spark]
        return where + str(missing)
    return where + (str(exc) if ours else f"{type(exc).__name__}: {exc}")


def component_classes(topology: storm.StormTopology) -> list[tuple[str, str, str, Kind]]:
    """(label, module, class, kind) of every Python class a worker imports to run ``topology`` (a validated
    one: custom groupings are JSON, see :func:`squall.core.topology.validate_topology`)."""
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
                    found.append(
                        (f"the custom grouping of {kind} {cid!r}", custom["module"], custom["class"], "custom grouping")
                    )
    return found


def traceback_text(exc: BaseException) -> str:
    """The full traceback of ``exc``, for ``--verbose``."""
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
        return filename[len(package) :] if filename.startswith(package) else None

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
            return {"missing": exc.name, "imported_by": by, "traceback": traceback_text(exc)}
        return {"line": one_line(exc, shown), "traceback": traceback_text(exc)}
    return {}


def _main() -> int:
    request = json.loads(sys.stdin.read())
    out, sys.stdout = sys.stdout, sys.stderr  # what user modules print must not mix with the answer
    out.write(json.dumps(_import_as_a_worker(request)))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
