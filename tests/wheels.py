"""Wheels made in a test, offline: a made-up distribution that no host has installed, to ship in a package."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Mapping
from pathlib import Path


def make_wheel(directory: Path, name: str, version: str, modules: Mapping[str, str]) -> Path:
    """A pure-Python wheel of distribution ``name`` holding ``modules`` (path in the wheel → source), in
    ``directory``: what ``pip wheel`` would build from a project of those modules, without a build backend."""
    directory.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {**modules,
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: squall-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={_digest(text.encode())},{len(text.encode())}" for path, text in files.items()]
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return wheel


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
