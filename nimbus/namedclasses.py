"""The classes a submitted topology names, checked at submit without running the topology's code.

Workers import each named ``module`` and call its ``class`` with the topology's JSON arguments, so nimbus
refuses, with an InvalidTopologyException naming the component and before anything is stored, a topology
whose names could not be component or grouping classes (:mod:`squall.api.classcheck`):

- A module of the uploaded package (its top-level name is in the zip: workers put the package first on
  ``sys.path``) must be in the zip and define the class with a ``class`` statement. Nimbus reads the
  source and never imports it: nimbus runs no user code. Whether that class is a Spout or Bolt subclass is
  decided by the package's code when it runs, so the worker checks it before building the component.
- Any other module comes from the installed environment, the same on nimbus and the workers. A fresh
  interpreter, with the allow-listed environment (:mod:`squall.core.environment`) and no package, imports it
  and resolves the class (:func:`squall.api.classcheck.resolve`): ``os.system`` or ``subprocess.Popen``
  named as a spout is refused here. The interpreter runs only when a topology names such a module.

    check_named_classes(Path("wc.zip"), topology)   # InvalidTopologyException naming the component
    check_named_classes(None, topology)             # no package: every module must be installed
"""

from __future__ import annotations

import ast
import os
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from squall.api.importcheck import SubmitCheckError, component_classes, import_as_a_worker
from squall.core.environment import user_code_environment
from squall.core.thrift import storm

#: The fresh interpreter that resolves installed classes gets this long.
INSTALLED_CHECK_TIMEOUT_SECS = 20.0


def check_named_classes(package: Path | None, topology: Any) -> None:
    """Refuse ``topology`` (validated) when a class it names could not be built by a worker from ``package``
    and the installed environment (see the module doc)."""
    installed = []
    with zipfile.ZipFile(package) if package is not None else nullcontext() as archive:
        names = set(archive.namelist()) if archive is not None else set()
        tops = {name.split("/", 1)[0].removesuffix(".py").removesuffix(".pyc") for name in names}
        for label, module, name, kind in component_classes(topology):
            if archive is None or module.partition(".")[0] not in tops:
                installed.append((label, module, name, kind))
                continue
            path = _module_file(module, names)
            if path is None:
                raise _missing(module, label)
            if path.endswith(".py") and not _defines_class(archive.read(path), name):
                raise _invalid(
                    f"{label} names {module}.{name}, which {path} in the package does not define with "
                    "a class statement: a topology may name only component and grouping classes"
                )
    if installed:
        _check_installed(installed)


def _module_file(module: str, names: set[str]) -> str | None:
    """The zip member a worker imports ``module`` from (source or byte code), or None."""
    base = module.replace(".", "/")
    candidates = (f"{base}.py", f"{base}/__init__.py", f"{base}.pyc", f"{base}/__init__.pyc")
    return next((name for name in candidates if name in names), None)


def _defines_class(source: bytes, name: str) -> bool:
    """Whether a module's source binds ``name`` with a ``class`` statement at module level (inside ``if``,
    ``try`` or ``with`` blocks too, never inside a function or class)."""
    try:
        return any(
            isinstance(node, ast.ClassDef) and node.name == name for node in _module_level(ast.parse(source).body)
        )
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    for node in body:
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from _module_level(getattr(node, field, []))
        for block in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
            yield from _module_level(block.body)


def _check_installed(classes: list[tuple[str, str, str, Any]]) -> None:
    with tempfile.TemporaryDirectory(prefix="squall-classes-") as empty:
        try:
            answer = import_as_a_worker(
                {"modules": [], "classes": classes},
                Path(empty),
                env=user_code_environment(os.environ),
                timeout_secs=INSTALLED_CHECK_TIMEOUT_SECS,
                what="the installed modules the topology names",
            )
        except SubmitCheckError as exc:
            raise _invalid(exc.line) from None
    if "missing" in answer:
        missing = answer["missing"]
        for label, module, _, _ in classes:
            if module == missing or module.startswith(missing + "."):
                raise _missing(module, label)
        raise _invalid(f"module {missing!r}, which {answer['imported_by']} imports, is not installed on nimbus")
    if "line" in answer:
        raise _invalid(f"{answer['line']} (checked on nimbus)")


def _missing(module: str, label: str) -> storm.InvalidTopologyException:
    return _invalid(
        f"the package has no module {module!r}, which {label} is imported from; package the "
        "topology's sources with it (storm jar does)"
    )


def _invalid(msg: str) -> storm.InvalidTopologyException:
    return storm.InvalidTopologyException(msg=msg)
