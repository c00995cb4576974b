"""Loading a conf: built-in defaults < storm.yaml < ``-c key=value``, validated once it is whole.

Precedence as in Storm's ``Utils.readStormConfig``. A ``-c`` value is parsed as JSON when it parses, otherwise
kept as the raw string. storm.yaml is found through ``--config``, ``$STORM_CONF_DIR`` or ``~/.storm``.

A relative ``storm.local.dir`` (the default ``storm-local``) or ``storm.log.dir`` is resolved once, when
the conf is loaded, against the directory the command runs in, so every process a daemon starts (workers
run in their code directory) receives the same absolute path. Storm resolves it against ``storm.home``,
its install directory; a pip-installed Squall has none, and the invoking directory plays that part.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from squall.core.config.keys import KEY_BY_NAME, default_config
from squall.core.config.validation import ConfigError, short_repr, typo_warnings, validate_conf

__all__ = ["find_config_file", "load_config", "parse_override", "read_yaml_config"]


def parse_override(text: str) -> tuple[str, Any]:
    """Split a `-c key=value` option at the first '='; the value is JSON when it parses, else the raw string.

    So `topology.workers=3` gives 3, `nimbus.seeds=["a","b"]` a list, `topology.debug=true` True,
    `storm.zookeeper.root=/x` the string "/x" and `a=b=c` the key "a" with value "b=c".
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep:
        raise ConfigError(f"-c {text!r}: expected key=value (no '=' found)")
    if not key:
        raise ConfigError(f"-c {text!r}: the key before '=' is empty")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


def find_config_file(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path | None:
    """Locate storm.yaml: explicit `path` (must exist), else $STORM_CONF_DIR/storm.yaml, else ~/.storm/storm.yaml.

    Returns None when no file is found and none was asked for explicitly.
    """
    if path is not None:
        explicit = Path(path).expanduser()
        if not explicit.is_file():
            raise ConfigError(f"config file not found: {explicit}")
        return explicit
    env = os.environ if env is None else env
    candidates = []
    if env.get("STORM_CONF_DIR"):
        candidates.append(Path(env["STORM_CONF_DIR"]) / "storm.yaml")
    if env.get("HOME"):
        candidates.append(Path(env["HOME"]) / ".storm" / "storm.yaml")
    return next((c for c in candidates if c.is_file()), None)


def read_yaml_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read one storm.yaml; empty is fine, a non-mapping top level or non-string keys are not."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping of key: value, got {type(data).__name__}")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"config file {path}: keys must be strings, got {short_repr(bad)}")
    return data


def _override_value(key: str, raw_text: str, value: Any) -> Any:
    """Read a `-c` value the way its key needs it, where JSON alone would get it wrong.

    A str-typed key keeps the raw string when JSON turned it into a number or bool, so
    `-c storm.local.dir=2024` or `-c topology.upgrade.component=123` mean the string. A list-of-str key
    takes a comma-separated string as its items, as JStorm's command line does
    (`-c topology.upgrade.workers=host1:6700,host2:6700`, `-c nimbus.seeds=nimbus1,nimbus2`).
    """
    spec = KEY_BY_NAME.get(key)
    if spec is not None and spec.kind == "list[str]" and isinstance(value, str) and value:
        return value.split(",")
    if spec is None or spec.kind != "str" or not isinstance(value, (int, float)):
        return value
    raw = raw_text.partition("=")[2]
    if not spec.accepts(value) and spec.accepts(raw):
        return raw
    return value


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Iterable[str] | Mapping[str, Any] = (),
    env: Mapping[str, str] | None = None,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Build a daemon/CLI conf: built-in defaults < storm.yaml < overrides, then validate it.

    `path` is --config (a missing file is an error); without it storm.yaml is looked up via
    $STORM_CONF_DIR then ~/.storm. `overrides` are `-c key=value` strings (or an already-typed
    mapping, for programmatic callers). `env` defaults to os.environ and is injectable for tests.
    `warn` gets one line per storm.yaml or override key that looks like a typo of a known key.
    Relative local and log dirs come back absolute (see the module doc).

    >>> conf = load_config(None, ["topology.workers=3"], env={})
    >>> conf["topology.workers"], Path(conf["storm.local.dir"]).is_absolute()
    (3, True)
    """
    conf = default_config()
    origins: dict[str, str] = {}

    found = find_config_file(path, env)
    if found is not None:
        for key, value in read_yaml_config(found).items():
            conf[key] = value
            origins[key] = f"storm.yaml {found}"

    if isinstance(overrides, Mapping):
        for key, value in overrides.items():
            conf[key] = value
            origins[key] = "overrides"
    else:
        for text in overrides:
            key, value = parse_override(text)
            conf[key] = _override_value(key, text, value)
            origins[key] = f"-c {text}"

    validate_conf(conf, origins)
    if warn is not None:
        for line in typo_warnings({key: conf[key] for key in origins}, origins):
            warn(line)
    for key in ("storm.local.dir", "storm.log.dir"):
        if conf[key] is not None:
            conf[key] = os.path.abspath(conf[key])
    return conf
