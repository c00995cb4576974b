"""Tests for squall.core.config: key table, precedence, discovery, -c parsing and validation."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from squall.core.config.keys import KEYS, KEY_BY_NAME, default_config, describe_keys, redact
from squall.core.config.loading import find_config_file, load_config, parse_override, read_yaml_config
from squall.core.config.schema import TYPES
from squall.core.config.validation import ConfigError, likely_typo, typo_warnings, unknown_keys, validate_conf

REPO = Path(__file__).resolve().parent.parent


def loaded_defaults() -> dict:
    """The built-in defaults as load_config returns them: the local dir resolved against this directory."""
    return {**default_config(), "storm.local.dir": os.path.abspath("storm-local")}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --- the key table -----------------------------------------------------------------------------------


def test_every_default_validates_against_its_own_type():
    for key in KEYS:
        assert key.accepts(key.default), key.name
    validate_conf(default_config(), "defaults")


def test_table_is_well_formed():
    assert len(KEYS) == len(KEY_BY_NAME) >= 60
    for key in KEYS:
        assert key.doc and "\n" not in key.doc, key.name
        assert key.kind in TYPES
        if key.choices is not None:
            assert key.default is None or key.default in key.choices


def test_defaults_are_json_serializable_and_fresh_copies():
    conf = default_config()
    assert json.loads(json.dumps(conf)) == conf
    conf["supervisor.slots.ports"].append(9999)
    assert default_config()["supervisor.slots.ports"] == [6700, 6701, 6702, 6703]
    assert isinstance(default_config()["nimbus.seeds"], list)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("storm.zookeeper.root", "/squall"),
        ("storm.zookeeper.servers", ["localhost"]),
        ("storm.zookeeper.port", 2181),
        ("storm.zookeeper.auth.scheme", None),
        ("storm.zookeeper.auth.payload", None),
        ("storm.local.dir", "storm-local"),
        ("nimbus.seeds", ["localhost"]),
        ("nimbus.thrift.port", 6627),
        ("nimbus.thrift.max_buffer_size", 1048576),
        ("nimbus.assign.timeout.secs", 300),
        ("nimbus.task.timeout.secs", 30),  # Storm's, not JStorm's 120
        ("supervisor.worker.timeout.secs", 30),  # Storm's, not JStorm's 240
        ("supervisor.slots.ports", [6700, 6701, 6702, 6703]),
        ("topology.workers", 1),
        ("topology.acker.executors", None),
        ("topology.max.spout.pending", None),
        ("topology.upgrade.ttl", 86400000),
        ("use.old.assignment", False),
        ("task.on.differ.node", False),
        ("storm.scheduler", "default"),
        ("spark.master", None),
        ("spark.batch.size", 10000),
        ("squall.log.format", "auto"),
    ],
)
def test_notable_defaults(name, value):
    assert default_config()[name] == value


def test_describe_keys_lists_every_key():
    text = describe_keys()
    for key in KEYS:
        assert key.name in text
    only_nimbus = describe_keys("nimbus.")
    assert "nimbus.seeds" in only_nimbus and "topology.workers" not in only_nimbus
    assert describe_keys("no.such.prefix") == ""


def test_redact_masks_secrets_only():
    conf = {"storm.zookeeper.auth.payload": "u:p", "topology.workers": 2, "user.key": "x"}
    assert redact(conf) == {"storm.zookeeper.auth.payload": "***", "topology.workers": 2, "user.key": "x"}
    assert redact(default_config())["storm.zookeeper.auth.payload"] is None


# --- parse_override ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("topology.workers=3", ("topology.workers", 3)),
        ('nimbus.seeds=["a","b"]', ("nimbus.seeds", ["a", "b"])),
        ("topology.debug=true", ("topology.debug", True)),
        ("topology.max.spout.pending=null", ("topology.max.spout.pending", None)),
        ("topology.backpressure.water.mark.high=0.5", ("topology.backpressure.water.mark.high", 0.5)),
        ("storm.zookeeper.root=/other", ("storm.zookeeper.root", "/other")),
        ("spark.master=local[2]", ("spark.master", "local[2]")),
        ('topology.spout.parallelism={"s": 2}', ("topology.spout.parallelism", {"s": 2})),
        ("my.key=a=b=c", ("my.key", "a=b=c")),
        ('my.key="x=1"', ("my.key", "x=1")),
        ("my.key=", ("my.key", "")),
        (" my.key =v", ("my.key", "v")),
    ],
)
def test_parse_override(text, expected):
    assert parse_override(text) == expected


@pytest.mark.parametrize("text", ["topology.workers", "", "novalue"])
def test_parse_override_without_equals_is_an_error(text):
    with pytest.raises(ConfigError, match="key=value"):
        parse_override(text)


def test_parse_override_empty_key_is_an_error():
    with pytest.raises(ConfigError, match="empty"):
        parse_override("=3")


json_scalars = st.none() | st.booleans() | st.integers() | st.text() | st.floats(allow_nan=False, allow_infinity=False)


@given(value=json_scalars)
def test_parse_override_round_trips_json_scalars(value):
    key, parsed = parse_override(f"some.key={json.dumps(value)}")
    assert key == "some.key"
    assert parsed == value and type(parsed) is type(value)


@given(value=st.text())
def test_parse_override_keeps_non_json_text_raw(value):
    try:
        json.loads(value)
    except ValueError:
        assert parse_override(f"k={value}") == ("k", value)


@given(value=st.recursive(json_scalars, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)))
def test_parse_override_round_trips_json_structures(value):
    assert parse_override("k=" + json.dumps(value)) == ("k", value)


# --- discovery ---------------------------------------------------------------------------------------


def test_explicit_path_wins_over_env(tmp_path):
    explicit = write(tmp_path / "explicit.yaml", "topology.workers: 7\n")
    write(tmp_path / "confdir" / "storm.yaml", "topology.workers: 5\n")
    env = {"STORM_CONF_DIR": str(tmp_path / "confdir"), "HOME": str(tmp_path)}
    assert load_config(explicit, env=env)["topology.workers"] == 7


def test_missing_explicit_config_file_is_an_error(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="config file not found") as info:
        load_config(missing, env={})
    assert str(missing) in str(info.value)


def test_storm_conf_dir_is_used(tmp_path):
    write(tmp_path / "confdir" / "storm.yaml", "topology.workers: 5\n")
    write(tmp_path / "home" / ".storm" / "storm.yaml", "topology.workers: 4\n")
    env = {"STORM_CONF_DIR": str(tmp_path / "confdir"), "HOME": str(tmp_path / "home")}
    assert find_config_file(env=env) == tmp_path / "confdir" / "storm.yaml"
    assert load_config(env=env)["topology.workers"] == 5


def test_home_storm_dir_is_the_fallback(tmp_path):
    write(tmp_path / "home" / ".storm" / "storm.yaml", "topology.workers: 4\n")
    # STORM_CONF_DIR set but without a storm.yaml falls through to ~/.storm.
    env = {"STORM_CONF_DIR": str(tmp_path / "empty"), "HOME": str(tmp_path / "home")}
    assert find_config_file(env=env) == tmp_path / "home" / ".storm" / "storm.yaml"
    assert load_config(env=env)["topology.workers"] == 4


def test_no_config_file_gives_defaults(tmp_path):
    env = {"HOME": str(tmp_path)}
    assert find_config_file(env=env) is None
    assert load_config(env=env) == loaded_defaults()
    assert load_config(env={}) == loaded_defaults()


# --- precedence --------------------------------------------------------------------------------------


def test_precedence_defaults_then_yaml_then_overrides(tmp_path):
    yaml_file = write(
        tmp_path / "storm.yaml",
        "topology.workers: 2\nnimbus.thrift.port: 7000\nstorm.zookeeper.root: /from-yaml\n",
    )
    conf = load_config(yaml_file, ["topology.workers=3", "storm.zookeeper.root=/from-cli"], env={})
    assert conf["topology.message.timeout.secs"] == 30  # default layer
    assert conf["nimbus.thrift.port"] == 7000  # yaml layer
    assert conf["topology.workers"] == 3  # -c layer beats yaml
    assert conf["storm.zookeeper.root"] == "/from-cli"


def test_later_override_wins(tmp_path):
    conf = load_config(None, ["topology.workers=2", "topology.workers=4"], env={})
    assert conf["topology.workers"] == 4


def test_mapping_overrides_are_taken_as_typed():
    conf = load_config(None, {"nimbus.thrift.port": 0, "topology.workers": 2}, env={})
    assert conf["nimbus.thrift.port"] == 0 and conf["topology.workers"] == 2


def test_override_can_null_a_nullable_key(tmp_path):
    yaml_file = write(tmp_path / "storm.yaml", "topology.max.spout.pending: 100\n")
    assert load_config(yaml_file, ["topology.max.spout.pending=null"], env={})["topology.max.spout.pending"] is None


def test_numeric_looking_override_for_a_string_key_stays_a_string():
    conf = load_config(None, ["storm.zookeeper.root=2024", "topology.upgrade.component=123"], env={})
    assert conf["storm.zookeeper.root"] == "2024"
    assert conf["topology.upgrade.component"] == "123"


def test_unknown_keys_are_preserved(tmp_path):
    yaml_file = write(tmp_path / "storm.yaml", "my.app.key: {nested: [1, 2]}\n")
    conf = load_config(yaml_file, ["other.user.key=[1,\"x\"]"], env={})
    assert conf["my.app.key"] == {"nested": [1, 2]}
    assert conf["other.user.key"] == [1, "x"]
    assert unknown_keys(conf) == ["my.app.key", "other.user.key"]
    validate_conf({"user.anything": object()}, "topology conf")


def test_empty_yaml_file_is_fine(tmp_path):
    for text in ("", "# only a comment\n", "---\n"):
        yaml_file = write(tmp_path / "storm.yaml", text)
        assert load_config(yaml_file, env={}) == loaded_defaults()


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_non_mapping_yaml_is_an_error(tmp_path, text):
    yaml_file = write(tmp_path / "storm.yaml", text)
    with pytest.raises(ConfigError, match="mapping") as info:
        load_config(yaml_file, env={})
    assert str(yaml_file) in str(info.value)


def test_invalid_yaml_is_an_error(tmp_path):
    yaml_file = write(tmp_path / "storm.yaml", "a: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(yaml_file, env={})


def test_non_string_yaml_keys_are_an_error(tmp_path):
    yaml_file = write(tmp_path / "storm.yaml", "1: one\n")
    with pytest.raises(ConfigError, match="keys must be strings"):
        load_config(yaml_file, env={})


# --- validation --------------------------------------------------------------------------------------


def test_bool_for_int_in_yaml_names_key_type_value_and_file(tmp_path):
    yaml_file = write(tmp_path / "storm.yaml", "topology.workers: true\n")
    with pytest.raises(ConfigError) as info:
        load_config(yaml_file, env={})
    message = str(info.value)
    assert "'topology.workers'" in message
    assert "int" in message
    assert "True" in message and "bool" in message
    assert f"storm.yaml {yaml_file}" in message


def test_string_for_list_from_override_names_the_override():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["supervisor.slots.ports=6700,6701"], env={})
    message = str(info.value)
    assert "'supervisor.slots.ports'" in message
    assert "list of int" in message
    assert "'6700,6701'" in message and "(str)" in message
    assert "-c supervisor.slots.ports=6700,6701" in message


def test_a_list_of_strings_takes_jstorm_s_comma_separated_form():
    conf = load_config(None, ["nimbus.seeds=host1,host2", "topology.upgrade.workers=h1:6700,h2:6701",
                              'storm.zookeeper.servers=["zk1"]', "isolation.scheduler.machines=one"], env={})
    assert conf["nimbus.seeds"] == ["host1", "host2"]
    assert conf["topology.upgrade.workers"] == ["h1:6700", "h2:6701"]
    assert conf["storm.zookeeper.servers"] == ["zk1"]
    assert conf["isolation.scheduler.machines"] == ["one"]


# --- keys that look like typos -------------------------------------------------------------------------


@pytest.mark.parametrize("typo, meant", [
    ("topology.worker", "topology.workers"), ("topology.wrokers", "topology.workers"),
    ("nimbus.seed", "nimbus.seeds"), ("supervisor.slot.ports", "supervisor.slots.ports"),
    ("Topology.Max.Spout.Pending", "topology.max.spout.pending"), ("spark.batch.sizes", "spark.batch.size"),
])
def test_a_near_miss_of_a_known_key_is_named(typo, meant):
    assert likely_typo(typo) == meant


@pytest.mark.parametrize("key", [
    "topology.workers",                       # known
    "topology.my.threshold", "myapp.rate",   # the user's own keys
    "spark.executor.memory",                 # passed on to Spark as is
    "storm.zookeeper.auth.user", "topology.executor.send.buffer.size",  # Storm's, not read by Squall
])
def test_known_keys_and_keys_of_one_s_own_are_no_typos(key):
    assert likely_typo(key) is None


def test_typo_warnings_say_where_each_key_came_from():
    conf = {"topology.worker": 3, "topology.my.threshold": 1, "nimbus.seed": ["a"]}
    assert typo_warnings(conf, {"topology.worker": "-c topology.worker=3", "nimbus.seed": "storm.yaml x"}) == [
        "unknown key nimbus.seed (storm.yaml x); did you mean nimbus.seeds?",
        "unknown key topology.worker (-c topology.worker=3); did you mean topology.workers?",
    ]
    assert typo_warnings(conf, "topology wc conf")[1].endswith("(topology wc conf); did you mean topology.workers?")


def test_load_config_warns_about_typos_in_storm_yaml_and_overrides_and_keeps_them(tmp_path):
    yaml_file = write(tmp_path / "storm.yaml", "supervisor.slot.ports: [1]\nmy.app.key: 1\n")
    warnings: list[str] = []
    conf = load_config(yaml_file, ["topology.worker=3", "topology.workers=2"], env={}, warn=warnings.append)
    assert warnings == [
        f"unknown key supervisor.slot.ports (storm.yaml {yaml_file}); did you mean supervisor.slots.ports?",
        "unknown key topology.worker (-c topology.worker=3); did you mean topology.workers?",
    ]
    assert conf["topology.worker"] == 3 and conf["topology.workers"] == 2, "a warning, not a failure"


# --- the local dir -------------------------------------------------------------------------------------


def test_a_relative_local_dir_is_resolved_once_against_the_invoking_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    conf = load_config(None, ["storm.log.dir=logs"], env={})
    assert conf["storm.local.dir"] == str(tmp_path / "storm-local")
    assert conf["storm.log.dir"] == str(tmp_path / "logs")
    assert load_config(None, ["storm.local.dir=/var/squall"], env={})["storm.local.dir"] == "/var/squall"
    assert load_config(None, env={})["storm.log.dir"] is None, "null: <storm.local.dir>/logs"


def test_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_all_problems_are_reported_together(tmp_path):
    yaml_file = write(tmp_path / "storm.yaml", "topology.debug: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(yaml_file, ["supervisor.slots.ports=[6700, \"x\"]"], env={})
    assert len(info.value.problems) == 2
    assert any("topology.debug" in p and str(yaml_file) in p for p in info.value.problems)
    assert any("supervisor.slots.ports" in p and "-c" in p for p in info.value.problems)


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("topology.workers", True),  # bool is not an int
        ("topology.workers", 1.5),
        ("topology.workers", "2"),
        ("topology.workers", 0),  # below minimum
        ("topology.debug", 1),  # int is not a bool
        ("topology.debug", "true"),
        ("nimbus.seeds", "localhost"),
        ("nimbus.seeds", ["a", 1]),
        ("supervisor.slots.ports", [6700, True]),
        ("supervisor.slots.ports", [6700, "6701"]),
        ("storm.zookeeper.port", 70000),
        ("storm.zookeeper.root", None),  # not nullable
        ("storm.scheduler", "random"),  # not a choice
        ("squall.log.format", "xml"),
        ("nimbus.task.timeout.secs", 0),  # durations must be > 0
        ("nimbus.task.timeout.secs", True),
        ("nimbus.task.timeout.secs", math.nan),
        ("topology.backpressure.water.mark.high", 1.5),
        ("topology.spout.parallelism", {"s": "2"}),
        ("topology.spout.parallelism", [1]),
        ("topology.acker.executors", -1),
    ],
)
def test_wrong_values_are_rejected(name, bad):
    with pytest.raises(ConfigError, match=name.replace(".", r"\.")):
        validate_conf({name: bad}, "topology conf")


@pytest.mark.parametrize(
    ("name", "good"),
    [
        ("nimbus.task.timeout.secs", 30),  # int where a float is expected
        ("nimbus.task.timeout.secs", 0.25),  # sub-second, for fast tests
        ("topology.backpressure.water.mark.high", 1),
        ("topology.acker.executors", 0),  # disables acking
        ("topology.acker.executors", None),
        ("nimbus.thrift.port", 0),  # bind a free port
        ("supervisor.slots.ports", (6700, 6701)),  # tuples from Python callers
        ("topology.spout.parallelism", {"s": 2}),
        ("use.userdefine.assignment", [{"hostName": "h", "port": 6700}]),
    ],
)
def test_valid_values_are_accepted(name, good):
    validate_conf({name: good}, "topology conf")


def test_validate_conf_uses_the_given_source_label():
    with pytest.raises(ConfigError, match="topology conf: config key 'topology.workers'"):
        validate_conf({"topology.workers": "3"}, "topology conf")


def test_validate_conf_per_key_sources_default_to_built_in():
    with pytest.raises(ConfigError, match="built-in defaults"):
        validate_conf({"topology.workers": "3"}, {})


def test_non_string_conf_keys_are_rejected():
    with pytest.raises(ConfigError, match="not a string"):
        validate_conf({3: "x"}, "topology conf")


# --- the example cluster config ----------------------------------------------------------------------


def test_example_storm_yaml_loads_and_uses_only_known_keys():
    example = REPO / "deploy" / "storm.yaml"
    raw = read_yaml_config(example)
    assert unknown_keys(raw) == []
    conf = load_config(example, env={})
    assert conf["nimbus.seeds"] == ["localhost"]
    assert conf["supervisor.slots.ports"] == [6700, 6701, 6702, 6703]


def test_example_storm_yaml_supports_a_second_supervisor_on_one_host():
    example = REPO / "deploy" / "storm.yaml"
    conf = load_config(
        example,
        ["supervisor.slots.ports=[6710,6711,6712,6713]", "storm.local.dir=storm-local/sup2"],
        env={},
    )
    assert conf["supervisor.slots.ports"] == [6710, 6711, 6712, 6713]
    assert conf["storm.local.dir"] == os.path.abspath("storm-local/sup2")
