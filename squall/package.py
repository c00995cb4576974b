"""Topology code packages: a zip of Python modules and packages that workers import from (zipimport).

The package is what ``beginFileUpload`` carries (Storm's "jar"): its root holds the modules, so a
worker that puts the zip on ``sys.path`` imports ``wordcount`` or ``mypkg.bolts`` exactly as the
developer did. Only source travels; byte code and caches are left out. A directory named ``resources``
travels whole as ``resources/`` (Storm's jar resources): the working directory of the topology's shell
(multilang) components, scripts and data files included (:func:`squall.local_state.resources_dir`).

    build_package(["wordcount.py", "resources"], "/tmp/wc.zip")   # resources/splitsentence.js too
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable
from pathlib import Path

#: The directory of a package that holds its shell components' scripts and files (Storm's jar resources).
RESOURCES = "resources"

_SKIP_DIRS = {"__pycache__", ".git", ".venv", ".pytest_cache"}


def build_package(sources: Iterable[str | Path], dest: str | Path) -> Path:
    """Zip each source — a ``.py`` file, a package directory or a ``resources`` directory — at the root of
    ``dest``."""
    dest = Path(dest)
    names: set[str] = set()
    with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for source in map(Path, sources):
            if source.is_file() and source.suffix == ".py":
                files = [(source, source.name)]
            elif source.is_dir() and ((source / "__init__.py").exists() or source.name == RESOURCES):
                files = [(path, str(path.relative_to(source.parent))) for path in sorted(source.rglob("*"))
                         if path.is_file() and not _SKIP_DIRS.intersection(path.parts) and path.suffix != ".pyc"]
            else:
                raise ValueError(f"{source} is neither a .py file, a package directory (with __init__.py) nor a "
                                 f"{RESOURCES}/ directory")
            for path, name in files:
                if name in names:
                    raise ValueError(f"{name} would be in the package twice")
                names.add(name)
                archive.write(path, name)
    return dest
