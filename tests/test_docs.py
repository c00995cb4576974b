"""The API teaches itself: ``help()``/``pydoc`` work on every public name a topology author touches, every
public class and method says what it is for, and every class shows a short example. The documentation's Python
runs as written: every block of the README, Getting started and the Guide (tests/test_readme.py runs their shell
lines, and a block needing another test's cluster or server is run by that test), and only the README may say why
one is not run."""

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
from support import REPO, SESSION_PAGES, CodeBlock, code_blocks, run_doc_pages, shell_lines, wait_until
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
# The documentation's code: every Python block of the README, Getting started and the Guide runs here, every shell
# block in tests/test_readme.py's session, unless its page gives it to another test (run by) or, in the README
# only, marks it not run and says why
# ------------------------------------------------------------------------------------------------

#: The Guide's pages whose Python blocks are, in this order, the module ``parity.py`` they describe.
PARITY_PAGES = ("docs/guide/reliability.md", "docs/guide/groupings.md", "docs/guide/testing.md", "docs/guide/batches.md")
RUN_LANGS = ("python", "sh")
#: The pages every code block of which a test runs: none may be marked not run.
ALL_RUN = ("docs/getting-started/", "docs/guide/")


def doc_blocks() -> list[CodeBlock]:
    return [block for page in run_doc_pages() for block in code_blocks(page)]


def test_every_python_and_shell_block_of_the_runnable_docs_is_run_or_says_why_not() -> None:
    """A block is run by a test below, by tests/test_readme.py or by the test its page gives it to, or, in the README
    only, its page says why not: a new block is run by default, and one a test would miss fails here. A shell line of
    another page (the README's, say) runs in the session as the same line. A fence without a language could hide
    code, so none has one."""
    blocks = doc_blocks()
    assert {"README.md", "docs/getting-started/dev-cluster.md", "docs/guide/batches.md"} <= {b.page for b in blocks}
    assert [b.page for b in blocks if not b.lang] == [], "every fence names its language (python, sh, yaml, json...)"
    assert [b.page for b in blocks if not b.run_by_default and b.lang not in RUN_LANGS] == [], \
        "only code is marked"
    assert [b.page for b in blocks if b.not_run is not None and b.page.startswith(ALL_RUN)] == [], (
        "every block of Getting started and the Guide runs: give it to the test that has what it needs with "
        "<!-- run by tests/test_x.py --> instead of marking it not run"
    )
    session = {line for page in SESSION_PAGES for line in shell_lines(REPO / page)}
    elsewhere = {line: page for page in run_doc_pages() if str(page.relative_to(REPO)) not in SESSION_PAGES
                 for line in shell_lines(page)}
    assert "storm local examples/wordcount.py --local-ttl 10" in elsewhere, "the README and Getting started show it"
    assert {line: page for line, page in elsewhere.items() if line not in session} == {}, (
        "a shell line outside the session's pages is run as one of the session's lines: add it to the dev "
        "cluster's session or give its block to the test that runs it"
    )


def test_a_block_given_to_another_test_is_read_from_its_page_by_that_test() -> None:
    """``<!-- run by tests/test_x.py -->`` names a test file that exists and reads the page's blocks
    (support.blocks_run_by), so the block it runs is the page's, not a copy."""
    given = {(b.page, b.run_by) for b in doc_blocks() if b.run_by is not None}
    assert {"docs/getting-started/first-topology.md", "docs/guide/spark.md"} <= {page for page, _ in given}
    for page, test in given:
        source = (REPO / test).read_text() if (REPO / test).is_file() else ""
        assert "blocks_run_by(" in source and f'"{page}"' in source, f"{test} does not run {page}'s block"


def page_modules() -> list[str]:
    """The pages whose Python blocks run as one module each (the parity pages run together, below)."""
    return [page for page in dict.fromkeys(b.page for b in doc_blocks() if b.lang == "python" and b.run_by_default)
            if page not in PARITY_PAGES]


def python_code(page: str) -> str:
    return "\n\n".join(b.code for b in code_blocks(REPO / page) if b.lang == "python" and b.run_by_default)


@pytest.mark.parametrize("page", page_modules())
def test_each_page_s_python_blocks_run_as_written(page: str, tmp_path: Path) -> None:
    """The page's Python blocks, in order, as one module imported in a fresh interpreter from a scratch directory
    (imported, as a worker imports a topology's modules), with the checkout importable (``examples`` too)."""
    (tmp_path / "page.py").write_text(python_code(page))
    done = subprocess.run([sys.executable, "-c", "import page"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"})
    assert done.returncode == 0, f"{page}:\n{done.stderr}"


def test_the_guide_s_parity_module_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python blocks of the reliability, groupings, testing and batch pages, in order, are the module
    ``parity.py`` they describe: importing it runs the component tests they show; its topology then processes
    every number in local mode, and runs with the ``storm local`` line the batch page gives."""
    pages = "\n".join((REPO / page).read_text() for page in PARITY_PAGES)
    assert "parity.py" in pages
    (tmp_path / "parity.py").write_text("\n\n".join(python_code(page) for page in PARITY_PAGES))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        parity = importlib.import_module("parity")   # runs every block, the asserts of the testing block too
        with LocalTopology(parity.t, {"task.heartbeat.frequency.secs": 0.05}) as local:
            spouts = [local.component("numbers", i) for i in range(2)]
            wait_until(lambda: all(not s.todo and not s.in_flight for s in spouts), 60, "every number acked")
    finally:
        sys.modules.pop("parity", None)
    command = re.search(r"`storm (local parity\.py [^`]*)`", pages)
    assert command, "the pages say how to run the module with storm local"
    done = subprocess.run([sys.executable, "-m", "squall.cli", *command.group(1).split(), "--local-ttl", "1"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr


def test_the_state_page_s_word_count_counts_on_across_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state page's Python blocks as a module: importing it runs its run_bolt check; its own check then runs
    the topology twice over one storm.local.dir, the second run counting on from the first's SQLite files."""
    (tmp_path / "statepage.py").write_text(python_code("docs/guide/state.md"))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        importlib.import_module("statepage").counts_on_across_runs()
    finally:
        sys.modules.pop("statepage", None)


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
