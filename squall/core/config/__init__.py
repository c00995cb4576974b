"""Configuration: every key Squall reads, how a conf is loaded, and what is wrong with one.

The public surface, one name from each home::

    from squall.core.config import ConfigError, load_config
    conf = load_config("storm.yaml", ["topology.workers=3"])   # defaults < storm.yaml < -c key=value

- :mod:`~squall.core.config.schema`: what a key is (kind, default, bounds) and which values it accepts;
- :mod:`~squall.core.config.keys`: the table of every key, its default and why, and the views of a conf it
  gives (defaults, secrets masked or left out);
- :mod:`~squall.core.config.validation`: :class:`ConfigError`, a conf's values checked against the table,
  likely typos of known keys;
- :mod:`~squall.core.config.loading`: storm.yaml found and read, ``-c`` overrides parsed, all merged.

Squall's own modules import each name from its home; this package re-exports them for users' code.
"""

from __future__ import annotations

from squall.core.config.keys import KEY_BY_NAME, KEYS, default_config, describe_keys, redact, without_secrets
from squall.core.config.loading import find_config_file, load_config, parse_override, read_yaml_config
from squall.core.config.schema import TYPES, Key
from squall.core.config.validation import ConfigError, likely_typo, typo_warnings, unknown_keys, validate_conf

__all__ = [
    "ConfigError",
    "Key",
    "KEYS",
    "KEY_BY_NAME",
    "TYPES",
    "default_config",
    "describe_keys",
    "find_config_file",
    "load_config",
    "parse_override",
    "read_yaml_config",
    "likely_typo",
    "redact",
    "typo_warnings",
    "unknown_keys",
    "validate_conf",
    "without_secrets",
]
