"""A streamparse project directory as a Squall submission: what ``storm jar DIR`` and ``storm local DIR`` run.

A streamparse project (``sparse quickstart wordcount``) holds ``config.json``, ``topologies/<name>.py`` (a
``streamparse.Topology`` subclass) and ``src/`` (its pystorm spouts and bolts). ``sparse submit`` builds the
topology's Thrift form with streamparse's DSL — each Python component a shell component running
``streamparse_run [-s SERIALIZER] module.Class`` — zips ``src/`` as the jar's ``resources/`` with lein and
submits both with the env's options, over SSH. Here the same Thrift topology is read from streamparse's own
DSL and declared again with Squall's (:meth:`squall.api.dsl.Topology.shell_spout` and ``shell_bolt``, the same
streams, groupings, parallelism and component conf), so Squall's checks apply; ``src/`` goes into the code
package under ``resources/``, where the worker starts the shell subprocesses — so ``streamparse_run``
imports the components as it does on Storm. No JVM, no lein, no SSH.

    project = load_project("wordcount")          # its only topology file and its only env
    topology, conf = project.topology.build()    # what nimbus gets
    build_project_package("wordcount", "/tmp/wordcount.zip")   # resources/bolts/wordcount.py, resources/spouts/...

Components must be defined under ``src/`` (workers get ``src/`` only, as streamparse's jar holds only
``src/``); Java components are refused, as is anything else Squall cannot run, with a
:class:`StreamparseProjectError` naming the component and the fix.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squall.api.component import Stream
from squall.api.dsl import ComponentRef, Topology, TopologyError
from squall.core.package import REQUIREMENTS, RESOURCES, WHEELS, build_package

#: The file that makes a directory a streamparse project (``sparse`` itself refuses to run without it).
CONFIG_FILE = "config.json"
#: Where a project keeps its components (streamparse's ``prepare_topology`` copies it into the jar's resources/).
SOURCE_DIR = "src"
#: What ``storm jar`` and ``storm local`` pass as ``--topology`` when given none (the DSL's attribute name):
#: for a project without a ``topologies/topology.py``, its only topology file.
DEFAULT_TOPOLOGY = "topology"
#: The command streamparse's ``Bolt.spec()``/``Spout.spec()`` give Python components.
STREAMPARSE_RUN = "streamparse_run"


class StreamparseProjectError(TopologyError):
    """The directory is not a streamparse project Squall can run as it is; the message says why and what to do::

    load_project("wordcount", topology="typo")
    # StreamparseProjectError: wordcount has no topologies/typo.py (its topologies: wordcount)
    """


def is_project(path: str | Path) -> bool:
    """Whether ``path`` is a streamparse project: a directory with a ``config.json``."""
    return Path(path).is_dir() and (Path(path) / CONFIG_FILE).is_file()


@dataclass(frozen=True)
class StreamparseProject:
    """A loaded project: the topology declared for Squall (named after its file, as streamparse names it)
    and the config.json env whose options and serializer it took (None: no env)."""

    topology: Topology
    env: str | None


def load_project(path: str | Path, topology: str | None = None, env: str | None = None) -> StreamparseProject:
    """Load ``topologies/<topology>.py`` of the project at ``path`` (``topology`` None or
    :data:`DEFAULT_TOPOLOGY`: the project's only one) with the ``env`` of its config.json (None: its only
    env, or no env when it has several), as ``sparse submit -n TOPOLOGY -e ENV`` would. The topology file
    runs with ``src/`` on ``sys.path``; an exception it raises propagates (the caller shows it with the
    user's file and line). The project's modules are forgotten afterwards, so projects with the same module
    names (every quickstart has ``bolts`` and ``spouts``) load one after another in one process."""
    root = Path(path).resolve()
    if not is_project(root):
        raise StreamparseProjectError(f"{path} is not a streamparse project: it has no {CONFIG_FILE}")
    config = _read_config(root)
    name, topology_file = _topology_file(root, config, topology)
    env_name, env_config = _env(root, config, env)
    source = source_path(root)
    if not source.is_dir():
        raise StreamparseProjectError(
            f"{root.name} has no {SOURCE_DIR}/ directory: a streamparse project keeps "
            f"its spouts and bolts there (sparse quickstart makes one)"
        )
    imported = set(sys.modules)
    sys.path.insert(0, str(source))
    try:
        streamparse_class = _topology_class(topology_file)
        declared = Topology(name, conf=_topology_conf(env_config, streamparse_class.config))
        _declare(declared, streamparse_class, _serializer(config, env_config), env_name, source)
    finally:
        sys.path.remove(str(source))
        for module in set(sys.modules) - imported:
            if _defined_under(sys.modules[module], source):
                del sys.modules[module]
    return StreamparseProject(declared, env_name)


def source_path(path: str | Path) -> Path:
    """The project's ``src/``: the code package's ``resources/`` (:func:`build_project_package`); ``storm local
    DIR`` puts it on the PYTHONPATH its shell subprocesses inherit instead."""
    return Path(path).resolve() / SOURCE_DIR


def build_project_package(
    path: str | Path,
    dest: str | Path,
    include: Iterable[str | Path] = (),
    topology: str | None = None,
    env: str | None = None,
) -> Path:
    """The code package of the project at ``path``: its ``src/`` as the package's ``resources/`` (what
    streamparse's jar holds), and any ``include``-d modules or packages at its root. Where ``sparse submit``
    would build a virtualenv on each worker host (``use_virtualenv``, on unless the env turns it off), the
    topology's ``virtualenvs/<name>.txt`` goes in as the package's ``requirements.txt`` and the project's
    ``wheels/`` (if any) with it: each supervisor builds that environment (:mod:`supervisor.environments`)::

        build_project_package("wordcount", "/tmp/wordcount.zip")   # resources/bolts/wordcount.py, ...
    """
    with tempfile.TemporaryDirectory(prefix="squall-project-") as staging:
        resources = Path(staging) / RESOURCES
        shutil.copytree(source_path(path), resources, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        return build_package([resources, *_environment_files(Path(path), Path(staging), topology, env), *include], dest)


def _environment_files(root: Path, staging: Path, topology: str | None, env: str | None) -> list[Path]:
    """The requirements file (as ``requirements.txt``) and ``wheels/`` of the topology's virtualenv, as
    ``sparse submit`` picks them: ``virtualenv_specs``/``virtualenv_name`` (default the topology's name:
    ``topology``, else the project's only topology file's)."""
    config = _read_config(root)
    name = topology if topology not in (None, DEFAULT_TOPOLOGY) else _topology_file(root, config, None)[0]
    _, env_config = _env(root, config, env)
    if not env_config.get("install_virtualenv", env_config.get("use_virtualenv", True)):
        return []
    specs = root / str(config.get("virtualenv_specs", "virtualenvs/"))
    spec = specs / f"{env_config.get('virtualenv_name') or name}.txt"
    files = []
    if spec.is_file():
        files.append(staging / REQUIREMENTS)
        shutil.copyfile(spec, files[-1])
    if (root / WHEELS).is_dir():
        files.append(root / WHEELS)
    return files


# ------------------------------------------------------------------------------------------------
# config.json and the topology file
# ------------------------------------------------------------------------------------------------


def _read_config(root: Path) -> dict[str, Any]:
    try:
        config = json.loads((root / CONFIG_FILE).read_text())
    except ValueError as exc:
        raise StreamparseProjectError(f"{root / CONFIG_FILE} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise StreamparseProjectError(f"{root / CONFIG_FILE} must hold a JSON object")
    return config


def _topology_file(root: Path, config: Mapping[str, Any], topology: str | None) -> tuple[str, Path]:
    specs = root / str(config.get("topology_specs", "topologies/"))
    found = sorted(specs.glob("*.py")) if specs.is_dir() else []
    names = ", ".join(p.stem for p in found) or "none"
    if topology == DEFAULT_TOPOLOGY and not (specs / f"{topology}.py").is_file():
        topology = None
    if topology is not None:
        if not (specs / f"{topology}.py").is_file():
            raise StreamparseProjectError(
                f"{root.name} has no {specs.relative_to(root) / topology}.py (its topologies: {names})"
            )
        return topology, specs / f"{topology}.py"
    if len(found) != 1:
        raise StreamparseProjectError(
            f"{root.name} has {'no' if not found else 'several'} topology files in {specs.relative_to(root)}/ "
            + ("(sparse quickstart makes one)" if not found else f"({names}): name one with --topology NAME")
        )
    return found[0].stem, found[0]


def _env(root: Path, config: Mapping[str, Any], env: str | None) -> tuple[str | None, Mapping[str, Any]]:
    envs = config.get("envs") or {}
    if env is None:
        return next(iter(envs.items())) if len(envs) == 1 else (None, {})
    if env not in envs:
        raise StreamparseProjectError(
            f"{root / CONFIG_FILE} has no env {env!r} (its envs: {', '.join(envs) or 'none'})"
        )
    return env, envs[env]


def _topology_class(topology_file: Path) -> Any:
    """The ``streamparse.Topology`` subclass the file defines (run with ``src/`` on the path, as ``sparse`` runs it)."""
    from streamparse.dsl.topology import Topology as StreamparseTopology, TopologyType

    spec = importlib.util.spec_from_file_location(topology_file.stem, topology_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for value in vars(module).values():
        if isinstance(value, TopologyType) and value is not StreamparseTopology:
            return value
    raise StreamparseProjectError(
        f"{topology_file} defines no streamparse Topology subclass (class WordCount(Topology): ...)"
    )


def _topology_conf(env_config: Mapping[str, Any], topology_config: Mapping[str, Any]) -> dict[str, Any]:
    """The topology conf ``sparse submit`` sends, less what only its SSH deployment uses (virtualenv paths,
    sudo user, the worker host list): the env's ``options``, pystorm's log settings from its ``log``, then
    the Topology class's ``config``."""
    conf = dict(env_config.get("options") or {})
    log = env_config.get("log") or {}
    for key, value in (
        ("path", log.get("path") or env_config.get("log_path")),
        ("file", log.get("file") or env_config.get("log_file")),
    ):
        if value:
            conf[f"pystorm.log.{key}"] = value
    for key in ("max_bytes", "backup_count"):
        if isinstance(log.get(key), int):
            conf[f"pystorm.log.{key}"] = log[key]
    if isinstance(log.get("level"), str):
        conf["pystorm.log.level"] = log["level"].lower()
    conf.update(topology_config)
    if conf.get("topology.debug"):
        conf["pystorm.log.level"] = "debug"
    return conf


def _serializer(config: Mapping[str, Any], env_config: Mapping[str, Any]) -> str | None:
    return env_config.get("serializer", config.get("serializer"))


# ------------------------------------------------------------------------------------------------
# streamparse's Thrift topology, declared with Squall's DSL
# ------------------------------------------------------------------------------------------------


def _declare(declared: Topology, streamparse_class: Any, serializer: str | None, env: str | None, source: Path) -> None:
    refs: dict[str, ComponentRef] = {}
    kinds = (
        ("spout", streamparse_class.thrift_spouts, declared.shell_spout),
        ("bolt", streamparse_class.thrift_bolts, declared.shell_bolt),
    )
    for kind, specs, declare in kinds:
        for cid, spec in specs.items():
            label = f"{kind} {cid!r}"
            shell = _shell(label, spec.spout_object if kind == "spout" else spec.bolt_object, source)
            script = f"-s {serializer} {shell.script}" if serializer else shell.script  # as sparse submit sets it
            refs[cid] = declare(
                cid,
                command=shell.execution_command,
                script=script,
                outputs={
                    sid: Stream(info.output_fields, direct=bool(info.direct))
                    for sid, info in spec.common.streams.items()
                },
                parallelism=_parallelism(label, spec.common.parallelism_hint, env),
                conf=json.loads(spec.common.json_conf or "{}"),
            )
    for cid, spec in streamparse_class.thrift_bolts.items():
        for stream_id, grouping in spec.common.inputs.items():
            _subscribe(refs[cid], refs[stream_id.componentId], stream_id.streamId, grouping)


def _shell(label: str, obj: Any, source: Path) -> Any:
    """The component's ShellComponent, once it is one Squall can run from the package."""
    if obj.shell is None:
        java = obj.java_object.full_class_name if obj.java_object is not None else "serialized Java"
        raise StreamparseProjectError(
            f"{label} is a Java component ({java}): Squall runs no JVM; write it as a "
            "streamparse (pystorm) Bolt or Spout in src/"
        )
    runs_streamparse = obj.shell.execution_command == STREAMPARSE_RUN
    if runs_streamparse and not _defined_under(sys.modules.get(obj.shell.script.rpartition(".")[0]), source):
        raise StreamparseProjectError(
            f"{label} runs {obj.shell.script}, which is not defined in a module under {source}: workers get "
            f"{SOURCE_DIR}/ alone (as in streamparse's jar), so move the class into a module there"
        )
    return obj.shell


def _defined_under(module: Any, directory: Path) -> bool:
    where = getattr(module, "__file__", None)
    return where is not None and Path(where).resolve().is_relative_to(directory)


def _parallelism(label: str, hint: Any, env: str | None) -> Any:
    """streamparse's parallelism hint: an int, or per env ({"prod": 8, "beta": 2}) resolved as sparse submit does."""
    if not isinstance(hint, dict):
        return hint
    if env not in hint:
        raise StreamparseProjectError(
            f"{label}'s parallelism is given per env ({hint}) and "
            + (f"not for env {env!r}" if env else "no env is chosen: choose one with -e ENV")
        )
    return hint[env]


def _subscribe(bolt: Any, source: ComponentRef, stream: str, grouping: Any) -> None:
    """Subscribe with the DSL method of the grouping streamparse chose (its Grouping.GLOBAL is empty fields)."""
    if grouping.fields is not None:
        if grouping.fields:
            bolt.fields(source, *grouping.fields, stream=stream)
        else:
            bolt.global_(source, stream=stream)
        return
    for kind in ("shuffle", "all", "none", "direct", "local_or_shuffle"):
        if getattr(grouping, kind) is not None:
            getattr(bolt, kind)(source, stream=stream)
            return
    raise StreamparseProjectError(
        f"bolt {bolt.id!r} groups {source.id!r} with a Java custom grouping: Squall runs "
        "no JVM; use a built-in grouping (Grouping.fields, SHUFFLE, ALL...)"
    )
