"""Topology code packages: a zip of Python modules and packages that workers import from (zipimport).

The package is what ``beginFileUpload`` carries (Storm's "jar"): its root holds the modules, so a
worker that puts the zip on ``sys.path`` imports ``wordcount`` or ``mypkg.bolts`` exactly as the
developer did. Only source travels; byte code and caches are left out. A directory named ``resources``
travels whole as ``resources/`` (Storm's jar resources): the working directory of the topology's shell
(multilang) components, scripts and data files included (:func:`squall.core.local_state.resources_dir`).

A package may also say what its topology needs installed: a ``requirements.txt`` or a ``pyproject.toml``
(its ``[project] dependencies``) at its root, and wheels under ``wheels/``. Each supervisor builds the
topology a Python environment from them before its workers start (:mod:`supervisor.environments`); shipped
wheels make that build need no network.

    build_package(["wordcount.py", "resources"], "/tmp/wc.zip")   # resources/splitsentence.js too
    build_package(["wc.py", "requirements.txt", "wheels"], "/tmp/wc.zip")   # wc.py, requirements.txt, wheels/*.whl
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable
from pathlib import Path

#: The directory of a package that holds its shell components' scripts and files (Storm's jar resources).
RESOURCES = "resources"

_SKIP_DIRS = {"__pycache__", ".git", ".venv", ".pytest_cache"}

#: At a package's root: what its topology needs installed (pip's requirements file format).
REQUIREMENTS = "requirements.txt"
#: At a package's root: a project whose ``[project] dependencies`` its topology needs installed.
PYPROJECT = "pyproject.toml"
#: A directory of the package holding wheels (``*.whl``) its requirements are installed from, offline.
WHEELS = "wheels"


def build_package(sources: Iterable[str | Path], dest: str | Path) -> Path:
    """Zip each source — a ``.py`` file, a package directory, a ``resources`` directory (whole), a
    ``requirements.txt`` or ``pyproject.toml`` (at the root under that name), or a directory named ``wheels``
    (its ``*.whl``) — at the root of ``dest``."""
    dest = Path(dest)
    names: set[str] = set()
    with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for source in map(Path, sources):
            if source.is_file() and (source.suffix == ".py" or source.name in (REQUIREMENTS, PYPROJECT)):
                files = [(source, source.name)]
            elif source.is_dir() and source.name == WHEELS:
                files = [(path, f"{WHEELS}/{path.name}") for path in sorted(source.glob("*.whl"))]
                if not files:
                    raise ValueError(
                        f"{source} holds no wheel (*.whl): build them with pip wheel -r {REQUIREMENTS} -w {source}"
                    )
            elif source.is_dir() and ((source / "__init__.py").exists() or source.name == RESOURCES):
                files = [
                    (path, str(path.relative_to(source.parent)))
                    for path in sorted(source.rglob("*"))
                    if path.is_file() and not _SKIP_DIRS.intersection(path.parts) and path.suffix != ".pyc"
                ]
            elif not source.exists():
                raise ValueError(f"{source}: no such file or directory")
            else:
                raise ValueError(
                    f"{source} is neither a .py file nor a package directory (with __init__.py), "
                    f"nor a {RESOURCES}/ directory, a {REQUIREMENTS}, {PYPROJECT} or {WHEELS} directory"
                )
            for path, name in files:
                if name in names:
                    raise ValueError(f"{name} would be in the package twice")
                names.add(name)
                archive.write(path, name)
    return dest
