"""The ``storm`` command's parser and argument types: ``--config`` and ``-c`` before and after the verb, conf
files given to a verb, topology function arguments. What every process's entry shares is in
:mod:`squall.core.entry`."""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from squall.api.dsl import Topology
from squall.core.config.validation import ConfigError, typo_warnings
from squall.core.entry import AFTER_VERB, config_options, warn_on_stderr


def parse_executor(text: str) -> tuple[str, int]:
    """``-e comp=3`` → ("comp", 3); split at the last ``=`` as Storm does."""
    component, sep, count = text.rpartition("=")
    if not sep or not component or not count.isdigit() or int(count) < 1:
        raise argparse.ArgumentTypeError(f"expected COMPONENT=N with N >= 1, got {text!r}")
    return component, int(count)


def non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return int(text)


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {text!r}")
    return int(text)


def json_or_text(text: str) -> Any:
    """Topology function arguments, like ``-c`` values: JSON when they parse, else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def conf_file_json(path: str | None, warn: Callable[[str], None] = warn_on_stderr) -> str:
    """A YAML (or JSON) conf file as the JSON string nimbus takes (restart, update, rebalance); empty without one.

    A file that cannot be read, or holds no mapping, is a ConfigError naming it; keys that look like typos of
    known ones go to ``warn``.
    """
    if path is None:
        return ""
    try:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the conf file {path}: {exc}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path} must hold a mapping of config keys")
    for line in typo_warnings(loaded, path):
        warn(line)
    return json.dumps(loaded)


def topology_typos(topology: Topology) -> list[str]:
    """Keys of a topology's conf, and of each component's, that look like typos of known keys (one line each)."""
    thrift, conf = topology.build()
    lines = typo_warnings(conf, f"topology {topology.name} conf")
    commons = {cid: spec.common for specs in (thrift.spouts, thrift.bolts) for cid, spec in specs.items()}
    for component, common in sorted(commons.items()):
        lines += typo_warnings(json.loads(common.json_conf or "{}"), f"component {component} conf")
    return lines


def command_line_overrides(conf: Mapping[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The ``-c key=value`` settings of this command line (parsed and checked by the conf loader)."""
    return {key: conf[key] for key in (o.split("=", 1)[0] for o in args.overrides)}


class VerbParser(argparse.ArgumentParser):
    """The parser of one ``storm`` verb: it takes ``--config`` and ``-c`` too, whoever adds the verb."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**kwargs, "parents": [*kwargs.get("parents", ()), config_options(after_verb=True)]})


class CommandLine(argparse.ArgumentParser):
    """``storm``'s parser: ``--config`` and ``-c`` before the verb and after it, as Storm takes them.

    Every ``-c`` applies, in command-line order (a later one for the same key wins); a ``--config`` after
    the verb wins over one before it. ``shared`` parent parsers go to the top level and every verb alike::

        parser = CommandLine(prog="storm")
        verbs = parser.add_subparsers(dest="command")
        verbs.add_parser("list")        # a VerbParser
        parser.parse_args(["-c", "a=1", "list", "-c", "a=2"]).overrides   # ['a=1', 'a=2']
    """

    def __init__(self, *, shared: Sequence[argparse.ArgumentParser] = (), **kwargs: Any) -> None:
        self._shared = list(shared)
        super().__init__(**{**kwargs, "parents": [*kwargs.get("parents", ()), *shared, config_options()]})

    def add_subparsers(self, **kwargs: Any) -> Any:
        verb_parser = functools.partial(VerbParser, parents=self._shared)  # called as argparse calls a class
        return super().add_subparsers(parser_class=verb_parser, **kwargs)  # type: ignore[call-overload]  # a partial builds as the class

    def parse_known_args(  # type: ignore[override]  # Namespace only, where argparse's overloads take any object
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        after = vars(parsed)
        parsed.overrides = [*parsed.overrides, *after.pop(AFTER_VERB["overrides"], [])]
        parsed.config = after.pop(AFTER_VERB["config"], parsed.config)
        return parsed, extras
