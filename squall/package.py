"""Topology code packages: a zip of Python modules and packages that workers import from (zipimport).

The package is what ``beginFileUpload`` carries (Storm's "jar"): its root holds the modules, so a
worker that puts the zip on ``sys.path`` imports ``wordcount`` or ``mypkg.bolts`` exactly as the
developer did. Only source travels; byte code and caches are left out.

A package may also carry a ``resources/`` directory, as a Storm jar does: the files multilang (shell)
components need. The worker starts their subprocesses in it, so ``streamparse_run bolts.wordcount.WordCountBolt``
imports ``resources/bolts/wordcount.py`` as on Storm (a streamparse project's ``src/`` goes there).
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable
from pathlib import Path

_SKIP_DIRS = {"__pycache__", ".git", ".venv", ".pytest_cache"}

#: The directory of a package that holds its multilang components' files (Storm's jar layout).
RESOURCES = "resources"


def build_package(sources: Iterable[str | Path], dest: str | Path, *, resources: str | Path | None = None) -> Path:
    """Zip each source — a ``.py`` file or a package directory — at the root of ``dest``, and everything
    in the directory ``resources`` (when given) under ``resources/``::

        build_package(["wc.py", "helpers.py"], "/tmp/wc.zip")
        build_package([], "/tmp/wc.zip", resources="myproject/src")   # resources/bolts/wordcount.py ...
    """
    dest = Path(dest)
    names: set[str] = set()
    with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for source in map(Path, sources):
            if source.is_file() and source.suffix == ".py":
                files = [(source, source.name)]
            elif source.is_dir() and (source / "__init__.py").exists():
                files = _tree(source, source.name)
            else:
                raise ValueError(f"{source} is neither a .py file nor a package directory (with __init__.py)")
            _write(archive, files, names)
        if resources is not None:
            if not Path(resources).is_dir():
                raise ValueError(f"{resources} is not a directory: resources must be one")
            _write(archive, _tree(Path(resources), RESOURCES), names)
    return dest


def _tree(directory: Path, prefix: str) -> list[tuple[Path, str]]:
    """(file, name in the zip) for each source file under ``directory``, named under ``prefix``."""
    return [(path, f"{prefix}/{path.relative_to(directory)}") for path in sorted(directory.rglob("*"))
            if path.is_file() and not _SKIP_DIRS.intersection(path.relative_to(directory).parts)
            and path.suffix != ".pyc"]


def _write(archive: zipfile.ZipFile, files: list[tuple[Path, str]], names: set[str]) -> None:
    for path, name in files:
        if name in names:
            raise ValueError(f"{name} would be in the package twice")
        names.add(name)
        archive.write(path, name)
