"""The API teaches itself: ``help()``/``pydoc`` work on every public name a topology author touches, every
public class and method says what it is for, and every class shows a short example. The README's
"Writing components" section runs as written."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import pydoc
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import squall
from support import REPO, wait_until
from squall.dev.local import LocalTopology


def api_module(name: str) -> str:
    """The module a user imports ``squall``'s exported ``name`` from: where it is defined, or the package that
    re-exports its modules' names as its public surface (``squall.core.config``)."""
    module = inspect.getmodule(getattr(squall, name)).__name__
    package = module.rpartition(".")[0]
    return package if name in getattr(sys.modules[package], "__all__", ()) else module


#: The modules of the user API: where each name ``squall`` exports (``squall.__all__``) is imported from.
API_MODULES = sorted({api_module(name) for name in squall.__all__})


def public_names(module: ModuleType) -> list[str]:
    """``__all__`` where the module has one, else its own top-level names without a leading underscore."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [name for name, value in vars(module).items()
            if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__]


def public_classes() -> list[tuple[str, type]]:
    found = []
    for module_name in API_MODULES:
        module = importlib.import_module(module_name)
        found += [(f"{module_name}.{name}", getattr(module, name)) for name in public_names(module)
                  if inspect.isclass(getattr(module, name))]
    return found


def public_members(cls: type) -> list[tuple[str, Any]]:
    """Methods and properties ``cls`` itself defines (not inherited, not dunder or private)."""
    return [(name, value) for name, value in vars(cls).items()
            if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))]


def has_example(doc: str) -> bool:
    """Whether a (cleaned) docstring holds a code example: an indented block, a literal block after
    ``::`` (cleaning strips its indent when nothing else is indented), or a doctest."""
    return "::\n\n" in doc or ">>>" in doc or any(line.startswith("    ") for line in doc.splitlines())


CLASSES = public_classes()


def test_the_api_modules_have_public_classes_to_check() -> None:
    names = {name.rsplit(".", 1)[1] for name, _ in CLASSES}
    assert {"Spout", "Bolt", "Tuple", "Topology", "BoltRun", "SparkBolt", "LocalTopology"} <= names


def test_every_name_squall_exports_is_importable_from_it() -> None:
    namespace: dict[str, Any] = {}
    exec("from squall import *", namespace)  # noqa: S102
    assert set(squall.__all__) <= set(namespace)


def test_type_checkers_see_every_name_squall_exports() -> None:
    """What ``squall`` loads on first use is also imported under ``TYPE_CHECKING``, from the same module and
    re-exported explicitly (``import X as X``), so mypy and IDEs know ``from squall import Spout``."""
    tree = ast.parse(Path(squall.__file__).read_text())
    blocks = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    assert len(blocks) == 1, "squall/__init__.py has one `if TYPE_CHECKING:` block of the names it exports"
    declared = {alias.asname: node.module for node in blocks[0].body if isinstance(node, ast.ImportFrom)
                for alias in node.names if alias.asname == alias.name}
    assert declared == squall._HOMES


@pytest.mark.parametrize("module_name", API_MODULES)
def test_pydoc_renders_every_api_module(module_name: str) -> None:
    module = importlib.import_module(module_name)
    text = pydoc.render_doc(module, renderer=pydoc.plaintext)
    assert inspect.getdoc(module).splitlines()[0] in text
    functions = [name for name in public_names(module) if inspect.isfunction(getattr(module, name))]
    undocumented = [name for name in functions if not inspect.getdoc(getattr(module, name))]
    assert not undocumented, f"{module_name}: public functions without a docstring: {undocumented}"


@pytest.mark.parametrize(("name", "cls"), CLASSES, ids=[name for name, _ in CLASSES])
def test_help_shows_each_public_class_with_its_docstrings_and_an_example(name: str, cls: type) -> None:
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    doc = inspect.getdoc(cls)
    assert doc and doc.splitlines()[0] in text, f"{name} has no docstring of its own"
    assert has_example(doc), f"{name}'s docstring shows no example (an indented block, or one after '::')"
    undocumented = [member for member, value in public_members(cls) if not inspect.getdoc(value)]
    assert not undocumented, f"{name}: public methods without a docstring: {undocumented}"
    for member, value in public_members(cls):
        assert inspect.getdoc(value).splitlines()[0] in text, f"help({name}) does not show {member}'s docstring"


# ------------------------------------------------------------------------------------------------
# The README's "Writing components" section
# ------------------------------------------------------------------------------------------------

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_section(title: str) -> str:
    """The README's ``## title`` section, up to the next ``## `` heading."""
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end == -1 else text[start:end]


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)


def test_writing_components_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The section's Python blocks, in order, are the module ``parity.py`` it describes: importing it runs
    the component tests it shows; its topology then processes every number in local mode, and runs with
    the section's ``storm local`` line."""
    section = readme_section("Writing components")
    blocks = python_blocks(section)
    assert len(blocks) >= 5 and "parity.py" in section
    (tmp_path / "parity.py").write_text("\n\n".join(blocks))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        parity = importlib.import_module("parity")   # runs every block, the asserts of the testing block too
        with LocalTopology(parity.t, {"task.heartbeat.frequency.secs": 0.05}) as local:
            spouts = [local.component("numbers", i) for i in range(2)]
            wait_until(lambda: all(not s.todo and not s.in_flight for s in spouts), 60, "every number acked")
    finally:
        sys.modules.pop("parity", None)
    command = re.search(r"`storm (local parity\.py [^`]*)`", section)
    assert command, "the section says how to run the module with storm local"
    done = subprocess.run([sys.executable, "-m", "squall.cli", *command.group(1).split(), "--local-ttl", "1"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr


def test_the_import_paths_the_readme_once_taught_still_work() -> None:
    """Each old path is the module at its new home (one module object), and importing it adds no module of its own."""
    code = ("import importlib, squall.api.dsl, squall.api.tuple, squall.core.config, squall.dev.local\n"
            "from squall.dsl import Topology\n"
            "from squall.tuple import Tuple\n"
            "from squall.config import load_config\n"
            "from worker.local import LocalTopology\n"
            "import squall.component, squall.spark, squall.testing, squall.submitter, squall.package\n"
            "import squall.nimbus_client\n"
            "assert Topology is squall.api.dsl.Topology and Tuple is squall.api.tuple.Tuple\n"
            "assert load_config is squall.core.config.load_config and LocalTopology is squall.dev.local.LocalTopology\n"
            "assert importlib.import_module('squall.dsl') is squall.api.dsl\n"
            "assert squall.component is squall.api.component\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr


def test_importing_squall_loads_neither_the_api_nor_the_thrift_contract() -> None:
    """A daemon importing ``squall.core`` pays for the core alone; the DSL parses the IDL on first use."""
    code = ("import sys, squall.core.clock, squall.api.dsl\n"
            "assert 'squall.dev.local' not in sys.modules and 'squall.api.spark' not in sys.modules\n"
            "assert 'squall.core.thrift' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
