"""The reference pages are generated from the code (docs/hooks/reference.py) and cover all of it: every ``storm``
verb and option, every config key, REST endpoint, Thrift method and type, ZooKeeper path, wire constant and
public API name, each with its description; and the pages build in mkdocs's strict mode."""

import argparse
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import squall
from squall.cli.habits import NO_SUCH_VERB
from squall.core.config import keys as config_keys
from squall.core.config.schema import Key
from squall.core.thrift import storm
from squall.core.zk import paths

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"


def _load_hook():
    spec = importlib.util.spec_from_file_location("docs_reference_hook", ROOT / "docs" / "hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


hook = _load_hook()


def undocumented_cli(parser: argparse.ArgumentParser) -> list[str]:
    """What the CLI page misses of ``parser``, or shows without a help text."""
    verbs = hook.storm_verbs(parser)
    page = hook.cli_markdown(parser)
    problems = []
    shown = {name for verb in verbs for name in (verb.name, *verb.aliases)}
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    problems += [f"verb {name} not on the page" for name in subparsers.choices if name not in shown | set(NO_SUCH_VERB)]
    for verb in verbs:
        if f"\n### {verb.name}\n" not in page:
            problems.append(f"verb {verb.name} has no section")
        if not verb.help:
            problems.append(f"verb {verb.name} has no help")
        for option in verb.options:
            if hook.cell(hook.code(option.name)) not in page:
                problems.append(f"{verb.name} {option.name} not on the page")
            if not option.help:
                problems.append(f"{verb.name} {option.name} has no help")
    return problems


def test_rst_habits_of_docstrings_become_markdown():
    assert hook.rst_to_markdown(
        "Read :class:`~squall.api.tuple.TupleBatch` with ``rows``, see :mod:`worker.wire` "
        "and :func:`the proof <transfer_proof>`::"
    ) == "Read `TupleBatch` with `rows`, see `worker.wire` and `the proof`:"
    assert hook.plain("a <dir> /**/ [-w N] `keep <this> *`") == "a &lt;dir&gt; /\\*\\*/ \\[-w N] `keep <this> *`"


def test_a_marker_names_its_generated_part_and_an_unknown_one_fails():
    page = "# CLI\n\nProse.\n\n<!-- reference: cli -->\n\nMore prose.\n"
    rendered = hook.render(page)
    assert rendered.startswith("# CLI\n\nProse.\n\n## Options of every command") and rendered.endswith("More prose.\n")
    with pytest.raises(ValueError, match="unknown reference marker 'clii'"):
        hook.render("<!-- reference: clii -->")


def test_every_storm_verb_and_option_is_on_the_cli_page_with_its_help():
    assert undocumented_cli(hook.storm_parser()) == []
    verbs = {verb.name for verb in hook.storm_verbs()}
    assert {"jar", "kill", "rebalance", "zktool", "dev-cluster", "help"} <= verbs
    assert not verbs & set(NO_SUCH_VERB)  # Storm's verbs Squall refuses are listed as refused, not as commands
    assert "`submit`" in hook.cli_markdown()  # an alias is named with its verb


def test_a_verb_or_an_option_added_without_help_fails_the_cli_check():
    parser = hook.storm_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    subparsers.add_parser("frobnicate")  # a new verb, no help
    subparsers.choices["kill"].add_argument("--force", action="store_true")  # a new option, no help
    assert sorted(undocumented_cli(parser)) == ["kill --force has no help", "verb frobnicate has no help"]


def undocumented_keys() -> list[str]:
    page = hook.config_markdown()
    return [f"{key.name}: not on the page" for key in config_keys.KEYS if f"`{key.name}`" not in page] + [
        f"{key.name}: no description" for key in config_keys.KEYS if not key.doc.strip()
    ]


def test_every_config_key_is_on_the_configuration_page_with_its_type_default_and_doc():
    assert undocumented_keys() == []
    page = hook.config_markdown()
    workers = config_keys.KEY_BY_NAME["topology.workers"]
    assert f"| `topology.workers` | {workers.type_name} | `1` | Storm, JStorm |" in page.replace(
        '<span id="topology.workers"></span>', ""
    )
    assert sum(len(keys) for keys in hook.key_groups().values()) == len(config_keys.KEYS)


def test_a_key_added_without_a_description_or_a_section_fails_the_configuration_check(monkeypatch):
    monkeypatch.setattr(config_keys, "KEYS", (*config_keys.KEYS, Key("topology.frob", "int", 1, "", "squall")))
    assert undocumented_keys() == ["topology.frob: no description"]
    monkeypatch.setattr(config_keys, "KEYS", (*config_keys.KEYS, Key("frob.level", "int", 1, "Frob.", "squall")))
    with pytest.raises(ValueError, match="frob.level has no section"):
        hook.config_markdown()


def test_every_rest_endpoint_is_on_the_rest_page():
    page = hook.rest_markdown()
    document = hook.openapi()
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            assert f"### {method.upper()} `{path}`" in page
            for parameter in operation.get("parameters", []):
                assert f"`{parameter['name']}`" in page
    for schema in document["components"]["schemas"]:
        assert f"### {schema}\n" in page


def _thrift_names(module) -> set[str]:
    return {name for name, value in vars(module).items() if hasattr(value, "thrift_spec") or hasattr(value, "_NAMES_TO_VALUES")}


def test_every_thrift_method_and_type_is_on_the_thrift_page():
    page = hook.thrift_markdown()
    methods = {name.removesuffix("_args") for name in vars(storm.Nimbus) if name.endswith("_args")}
    for method in methods:
        assert f"#### {method}\n" in page
    for name in _thrift_names(storm) - {"Nimbus"}:
        assert f"### {name}\n" in page
    assert "| 100 | `list<string> partial_key` | Squall addition " in page
    assert "| 100 | `optional ExecutorStats stats` | Squall: " in page


def test_the_thrift_page_names_squalls_additions_as_storms_idl_lacks_them():
    from streamparse.thrift import storm_thrift as storm_idl

    declarations = hook.thrift_declarations()
    storm_methods = {name.removesuffix("_args") for name in vars(storm_idl.Nimbus) if name.endswith("_args")}
    ours = {d.name: d.section for d in declarations if d.kind == "method"}
    assert {name for name, section in ours.items() if section == "Storm 1.x calls"} == set(ours) & storm_methods
    intro = (REFERENCE / "thrift.md").read_text().split("<!-- reference: thrift -->")[0]
    additions = intro.split("## Squall's additions")[1]
    ours_only = _thrift_names(storm) - _thrift_names(storm_idl)
    named = {name for name in _thrift_names(storm) if f"`{name}`" in additions}
    assert named == ours_only


def test_every_zookeeper_path_in_the_code_is_on_the_zookeeper_page():
    page = (REFERENCE / "zookeeper.md").read_text()
    roots = [value for name, value in vars(paths).items() if name.isupper() and isinstance(value, str)]
    assert len(roots) >= 14
    for root in roots:
        assert f"`{root}`" in page or f"`{root}/" in page, root
    children = set(re.findall(r'_child\([^,]+, "(\w+)"\)', inspect.getsource(paths)))  # fixed names below a node
    assert children == {"conf", "upgrading_workers", "upgraded_workers"}
    for child in children:
        assert f"/{child}" in page


def test_every_wire_constant_is_on_the_wire_page_with_what_it_is():
    page = hook.wire_markdown()
    public = {
        name
        for module in hook.wire_modules()
        for name, value in vars(module).items()
        if name.isupper() and isinstance(value, (int, str, bytes))
    }
    described = {name for module in hook.wire_modules() for name, _, comment in hook.constants(module) if comment}
    assert public == described
    assert all(f"| `{name}` |" in page for name in public)
    for module in hook.wire_modules():
        assert hook.rst_to_markdown(inspect.cleandoc(module.__doc__)) in page


def test_every_name_squall_exports_is_on_the_api_page():
    page = (REFERENCE / "api.md").read_text()
    for name in squall.__all__:
        home = squall._HOMES[name]
        assert f"::: {home}.{name}\n" in page or (f"::: {home}\n" in page and name in page), name


@pytest.mark.slow
def test_the_site_builds_in_strict_mode_with_the_generated_reference(tmp_path):
    """The site as `make docs` builds it, the hook and mkdocstrings included: a broken link, a bad docstring or a
    generator error fails the build."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    site = tmp_path / "site" / "reference"
    assert "storm rebalance" in (site / "cli" / "index.html").read_text()
    assert "topology.message.timeout.secs" in (site / "configuration" / "index.html").read_text()
    api = (site / "api" / "index.html").read_text()
    assert 'id="squall.api.component.Bolt"' in api
    assert ":class:" not in api and ":func:" not in api  # Sphinx roles became Markdown
    assert "/api/v1/topology/{id}/rebalance/{wait_time}" in (site / "rest-api" / "index.html").read_text()
    assert "beginCodeDownload" in (site / "thrift" / "index.html").read_text()
    assert "MAX_MESSAGE_BYTES" in (site / "wire" / "index.html").read_text()
