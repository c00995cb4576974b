"""A mkdocs hook that writes the reference pages' generated parts from the code, at build time.

A page asks for a part with a marker line, ``<!-- reference: NAME -->``, and keeps its prose hand-written
around it; the hook replaces the marker with the Markdown of :data:`GENERATORS` ``[NAME]``. So the CLI,
configuration, REST, Thrift and wire references cannot drift from the parser, the key table, the OpenAPI
document, the IDL and the wire modules: they are made from them on every build. An unknown marker fails the build.

The generators are plain functions of the code (no mkdocs needed), which tests/test_docs_reference.py calls too.
:class:`SphinxRoles` does for the API page's docstrings what :func:`rst_to_markdown` does for the wire page's.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from griffe import Extension, Object

ROOT = Path(__file__).resolve().parents[2]

MARKER = re.compile(r"^<!-- reference: ([a-z-]+) -->$", re.MULTILINE)


def cell(text: object) -> str:
    """``text`` as one Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def plain(text: str) -> str:
    """Text from the code as Markdown that shows it as written: outside its `code` spans, ``<``, ``&`` and ``*``
    are not markup (``<storm.local.dir>`` is no HTML tag, ``/**/`` no bold, ``[-w N] [-n N]`` no link)."""
    parts = re.split(r"(`[^`]*`)", text)
    for i in range(0, len(parts), 2):
        parts[i] = (
            parts[i]
            .replace("&", "&amp;")
            .replace("<", "&lt;")
            .replace(">", "&gt;")
            .replace("*", "\\*")
            .replace("[", "\\[")
        )
    return "".join(parts)


def code(text: object) -> str:
    """``text`` as inline code, whatever backticks it holds."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}" if fence == "`" else f"{fence} {text} {fence}"


def rst_to_markdown(text: str) -> str:
    """A docstring's reStructuredText habits as Markdown: ``code``, :role:`~a.b.name` (as `name`), ``::`` blocks."""
    text = re.sub(r":[a-z]+:`~?([^`<]*?)\s*<([^`>]*)>`", r"`\1`", text)
    text = re.sub(r":[a-z]+:`~([^`]*)`", lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    text = re.sub(r":[a-z]+:`([^`]*)`", r"`\1`", text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    return re.sub(r"(\S)::$", r"\1:", text, flags=re.MULTILINE)


class SphinxRoles(Extension):
    """A griffe extension (mkdocstrings' ``extensions``) giving the API page's docstrings :func:`rst_to_markdown`."""

    def on_instance(self, *, obj: Object, **_: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)


# --- the storm command ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One argument of a verb as the reference shows it."""

    name: str  # "-w, --workers N" or a positional's metavar
    help: str
    default: str  # "" when there is none worth showing


@dataclass(frozen=True)
class Verb:
    name: str
    aliases: tuple[str, ...]
    help: str
    usage: str
    options: tuple[Option, ...]


def storm_parser() -> argparse.ArgumentParser:
    from squall.cli.main import build_parser

    return build_parser()[0]


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _shown(action: argparse.Action) -> bool:
    return action.help != argparse.SUPPRESS and not isinstance(action, argparse._SubParsersAction)


def _option(action: argparse.Action, parser: argparse.ArgumentParser) -> Option:
    formatter = parser._get_formatter()
    if action.option_strings:
        name = ", ".join(action.option_strings)
        if action.nargs != 0:
            name += " " + formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
    else:
        name = formatter._format_args(action, formatter._get_default_metavar_for_positional(action))
    default = action.default
    shown = action.nargs != 0 and default not in (None, [], argparse.SUPPRESS)
    return Option(name, action.help or "", "" if not shown else default if isinstance(default, str) else repr(default))


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip()


def storm_verbs(parser: argparse.ArgumentParser | None = None) -> list[Verb]:
    """Every verb ``storm`` takes (Storm's habits it refuses left out), each with its own options: those every
    verb takes (:func:`common_options`) are shown once, not under each verb."""
    from squall.cli.habits import NO_SUCH_VERB

    parser = parser or storm_parser()
    subparsers = _subparsers(parser)
    helps = {choice.dest: choice.help or "" for choice in subparsers._choices_actions}
    common = {option for action in parser._actions for option in action.option_strings}
    names: dict[int, list[str]] = {}
    for name, sub in subparsers.choices.items():
        if name not in NO_SUCH_VERB:
            names.setdefault(id(sub), []).append(name)
    verbs = []
    for name, *aliases in names.values():
        sub = subparsers.choices[name]
        own = [a for a in sub._actions if _shown(a) and not common.intersection(a.option_strings)]
        options = tuple(_option(action, sub) for action in own)
        verbs.append(Verb(name, tuple(aliases), helps.get(name, ""), _usage(sub), options))
    return verbs


def common_options(parser: argparse.ArgumentParser | None = None) -> list[Option]:
    """The options every verb takes, before or after it."""
    parser = parser or storm_parser()
    return [_option(action, parser) for action in parser._actions if _shown(action)]


def cli_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    from squall.cli.habits import NO_SUCH_OPTION, NO_SUCH_VERB

    parser = parser or storm_parser()
    verbs = storm_verbs(parser)
    parts = [
        f"## Options of every command\n\nBefore or after the verb: {code(_usage(parser))}\n",
        table(["option", "what it does"], [(code(o.name), plain(o.help)) for o in common_options(parser)]),
        "\n## Commands\n",
        table(["command", "what it does"], [(f"[{code(v.name)}](#{v.name})", plain(v.help)) for v in verbs]),
    ]
    for verb in verbs:
        aliases = f" (also {', '.join(code(a) for a in verb.aliases)})" if verb.aliases else ""
        parts += [f"\n### {verb.name}\n", f"{plain(verb.help)}{aliases}\n"]
        parts.append(f"```text\n{verb.usage}\n```\n")
        if verb.options:
            rows = [(code(o.name), plain(o.help), code(o.default) if o.default else "") for o in verb.options]
            parts.append(table(["argument", "what it does", "default"], rows))
    parts += [
        "\n## Storm's habits Squall refuses\n",
        "Each is refused before anything runs, with exit status 2 and this line:\n",
        table(["command", "what to do instead"], [(code(n), plain(why)) for n, why in NO_SUCH_VERB.items()]),
        "",
        table(["option", "what to do instead"], [(code(n), plain(why)) for n, why in NO_SUCH_OPTION.items()]),
    ]
    return "\n".join(parts)


# --- configuration ------------------------------------------------------------------------------------------

#: The configuration page's sections: a key goes to the first whose prefixes it starts with.
KEY_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ZooKeeper", ("storm.zookeeper.",)),
    ("Cluster, local state and logging", ("storm.", "squall.")),
    ("Nimbus", ("nimbus.",)),
    ("Supervisor", ("supervisor.",)),
    ("Worker and task", ("worker.", "task.")),
    ("Topology", ("topology.",)),
    ("Scheduling (JStorm's keys)", ("use.", "isolation.", "jstorm.")),
    ("UI", ("ui.",)),
    ("Logviewer and log access", ("logviewer.", "logs.")),
    ("Spark", ("spark.",)),
)

ORIGINS = {"both": "Storm, JStorm", "storm": "Storm", "jstorm": "JStorm", "squall": "Squall", "spark": "Spark"}


def key_groups() -> dict[str, list[Any]]:
    """Every key of the table under its section's title, in the table's order; a key no section takes is an
    error naming it (give it a section in :data:`KEY_GROUPS`)."""
    from squall.core.config.keys import KEYS

    groups: dict[str, list[Any]] = {title: [] for title, _ in KEY_GROUPS}
    for key in KEYS:
        title = next((title for title, prefixes in KEY_GROUPS if key.name.startswith(prefixes)), None)
        if title is None:
            raise ValueError(f"config key {key.name} has no section on the configuration page: add one to KEY_GROUPS")
        groups[title].append(key)
    return groups


def _default(key: Any) -> str:
    import json

    return "null" if key.default is None else json.dumps(key.default_value())


def config_markdown() -> str:
    parts = []
    for title, keys in key_groups().items():
        rows = [
            (
                f'<span id="{k.name}"></span>{code(k.name)}',
                k.type_name,
                code(_default(k)),
                ORIGINS[k.origin],
                plain(k.doc) + (" *Secret: masked in logs and getNimbusConf.*" if k.secret else ""),
            )
            for k in keys
        ]
        parts += [f"## {title}\n", table(["key", "type", "default", "from", "what it does"], rows), ""]
    return "\n".join(parts)


# --- the UI's REST API ----------------------------------------------------------------------------------------


def openapi() -> dict[str, Any]:
    from ui.openapi import document

    return document()


def schema_text(schema: Mapping[str, Any]) -> str:
    """A JSON schema in a few words, a reference as a link to its section."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "const" in schema:
        return code(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(code(v) for v in schema["enum"])
    if "oneOf" in schema:
        return " or ".join(schema_text(s) for s in schema["oneOf"])
    kind = schema.get("type", "any")
    text = " or ".join(kind) if isinstance(kind, list) else kind
    if kind == "array":
        text = "array of " + schema_text(schema["items"])
    elif kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        text = "map to " + schema_text(schema["additionalProperties"])
    if "pattern" in schema:
        text += f" matching {code(schema['pattern'])}"
    return text


def _fields(schema: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """(name, type, description) of an object's keys, nested objects' keys as ``outer.inner``."""
    for name, sub in schema.get("properties", {}).items():
        inner = sub.get("items", sub) if sub.get("type") == "array" else sub
        yield prefix + name, schema_text(sub), sub.get("description", "")
        if "properties" in inner:
            yield from _fields(inner, f"{prefix}{name}{'[]' if inner is not sub else ''}.")


def rest_markdown() -> str:
    doc = openapi()
    parts = [f"{doc['info']['description']} OpenAPI {doc['openapi']}.\n", "## Endpoints\n"]
    for path, methods in doc["paths"].items():
        for method, operation in methods.items():
            parts += [
                f"### {method.upper()} `{path}`\n",
                plain(operation["summary"][:1].upper() + operation["summary"][1:]),
            ]
            if operation.get("parameters"):
                parameters = [_parameter(p) for p in operation["parameters"]]
                parts += ["", table(["parameter", "in", "required", "type", "what it is"], parameters)]
            if "requestBody" in operation:
                body = operation["requestBody"]["content"]["application/json"]["schema"]
                parts += ["", "Request body (JSON, optional):", "", table(["key", "type"], _body_rows(body))]
            responses = [
                (code(status), plain(response["description"]), ", ".join(_content(response.get("content", {}))))
                for status, response in sorted(operation["responses"].items())
            ]
            parts += ["", table(["status", "when", "body"], responses), ""]
    parts.append("## Schemas\n")
    for name, schema in doc["components"]["schemas"].items():
        parts.append(f"### {name}\n")
        fields = [(code(name), kind, plain(what)) for name, kind, what in _fields(schema)]
        if fields:
            parts.append(table(["key", "type", "what it is"], fields))
        else:
            parts.append(plain(schema.get("description", "")) or schema_text(schema))
        parts.append("")
    return "\n".join(parts)


def _parameter(parameter: Mapping[str, Any]) -> tuple[str, ...]:
    required = "yes" if parameter.get("required") else "no"
    kind = schema_text(parameter.get("schema", {}))
    return code(parameter["name"]), parameter["in"], required, kind, plain(parameter.get("description", ""))


def _body_rows(schema: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(code(name), kind) for name, kind, _ in _fields(schema)]


def _content(content: Mapping[str, Any]) -> Iterator[str]:
    for media, body in content.items():
        yield f"{schema_text(body['schema'])} ({media})"


# --- the Thrift contract ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    id: int
    text: str  # as declared: "required string name"
    note: str


@dataclass(frozen=True)
class Declaration:
    kind: str  # struct, union, exception, enum, method
    name: str
    section: str
    note: str
    text: str  # a method's signature, else ""
    fields: tuple[Field, ...]


_HEADER = re.compile(r"^// -{20,}\n// (.+)\n// -{20,}$", re.MULTILINE)
_BLOCK = re.compile(r"^(struct|union|exception|enum|service) (\w+) \{\n(.*?)^\}", re.MULTILINE | re.DOTALL)


def _comment(lines: Sequence[str]) -> str:
    return " ".join(line.strip().removeprefix("//").strip() for line in lines)


def _members(body: str) -> Iterator[tuple[str, str]]:
    """(comment, member) of a block: a member is one statement (up to ``;``, a method's over several lines)."""
    comments: list[str] = []
    statement: list[str] = []
    for line in body.splitlines():
        stripped = line.strip()
        if stripped.startswith("//") and not statement:
            comments.append(stripped)
        elif stripped:
            statement.append(stripped)
            if stripped.endswith((";", ",")) or re.fullmatch(r"\w+ = \d+", stripped):
                yield _comment(comments), " ".join(statement).rstrip(";,")
                comments, statement = [], []
        elif not statement:
            comments = []


def thrift_declarations(idl: str | None = None) -> list[Declaration]:
    """The IDL's types and the service's methods, each with its comment and section, in the IDL's order."""
    idl = idl if idl is not None else (ROOT / "idl" / "storm.thrift").read_text()
    sections = [(m.start(), m.group(1)) for m in _HEADER.finditer(idl)]
    declarations = []
    for block in _BLOCK.finditer(idl):
        kind, name, body = block.groups()
        section = next((title for start, title in reversed(sections) if start < block.start()), "")
        before = idl[: block.start()].rstrip("\n").splitlines()
        note: list[str] = []
        while before and before[-1].startswith("//") and not before[-1].startswith("// ---"):
            note.insert(0, before.pop())
        if kind != "service":
            fields = tuple(_field(kind, comment, member) for comment, member in _members(body))
            declarations.append(Declaration(kind, name, section, _comment(note), "", fields))
            continue
        group = ""
        for comment, member in _methods(body):
            if comment.startswith("--- "):
                group = comment.removeprefix("--- ").split(":")[0].split(";")[0].rstrip(" -")
                continue
            method = re.match(r"(?:\S+(?:<[^>]*>)?) (\w+)\(", member)
            assert method is not None, member
            declarations.append(Declaration("method", method.group(1), group, comment, member, ()))
    return declarations


def _field(kind: str, comment: str, member: str) -> Field:
    if kind == "enum":
        name, value = member.split(" = ")
        return Field(int(value), name, comment)
    number, text = member.split(":", 1)
    return Field(int(number), text.strip(), comment)


def _methods(body: str) -> Iterator[tuple[str, str]]:
    """(comment, signature) of a service's methods, and ("--- GROUP ---", "") for each group's heading comment."""
    comments: list[str] = []
    statement: list[str] = []
    for line in body.splitlines():
        stripped = line.strip()
        if stripped.startswith("// ---"):
            yield stripped.removeprefix("//").strip(), ""
        elif stripped.startswith("//") and not statement:
            comments.append(stripped)
        elif stripped:
            statement.append(stripped)
            if stripped.endswith(";"):
                yield _comment(comments), " ".join(statement).rstrip(";")
                comments, statement = [], []
        else:
            comments = []


def _field_note(field: Field) -> str:
    """A field's comment, marked as Squall's when its id says so (ids from 100) and the comment does not."""
    mark = field.id >= 100 and not field.note.startswith("Squall")
    return ("**Squall.** " if mark else "") + plain(field.note)


def thrift_markdown() -> str:
    declarations = thrift_declarations()
    methods = [d for d in declarations if d.kind == "method"]
    parts = ["## The Nimbus service\n"]
    for group in dict.fromkeys(m.section for m in methods):
        parts.append(f"### {group}\n")
        for method in (m for m in methods if m.section == group):
            parts += [f"#### {method.name}\n", f"```thrift\n{method.text}\n```\n"]
            if method.note:
                parts.append(plain(method.note) + "\n")
    section = ""
    for decl in (d for d in declarations if d.kind != "method"):
        if decl.section != section:
            section = decl.section
            parts.append(f"## {section}\n")
        parts.append(f"### {decl.name}\n")
        parts.append(f"{decl.kind}" + (f": {plain(decl.note)}" if decl.note else "") + "\n")
        if decl.kind == "enum":
            parts.append(table(["value", "name"], [(f.id, code(f.text)) for f in decl.fields]))
        elif decl.fields:
            rows = [(f.id, code(f.text), _field_note(f)) for f in decl.fields]
            parts.append(table(["id", "field", "notes"], rows))
        parts.append("")
    return "\n".join(parts)


# --- the worker wire --------------------------------------------------------------------------------------------


def constants(module: ModuleType) -> list[tuple[str, object, str]]:
    """(name, value, ``#:`` comment) of a module's public constants of plain values (numbers, text, bytes)."""
    source = inspect.getsource(module)
    lines = source.splitlines()
    found: list[tuple[str, object, str]] = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.Assign):
            continue
        names = [t.id for target in node.targets for t in getattr(target, "elts", [target]) if isinstance(t, ast.Name)]
        comment: list[str] = []
        row = node.lineno - 2
        while row >= 0 and lines[row].startswith("#:"):
            comment.insert(0, lines[row].removeprefix("#:").strip())
            row -= 1
        for name in names:
            value = getattr(module, name)
            if name.isupper() and isinstance(value, (int, str, bytes)) and not isinstance(value, bool):
                found.append((name, value, " ".join(comment)))
    return found


def wire_modules() -> list[ModuleType]:
    import worker.handshake
    import worker.wire

    return [worker.handshake, worker.wire]


def wire_markdown() -> str:
    parts = []
    for module in wire_modules():
        doc = inspect.cleandoc(module.__doc__ or "")
        parts += [f"## {code(module.__name__)}\n", rst_to_markdown(doc), ""]
    rows = [
        (code(name), code(f"{value:,}" if isinstance(value, int) else repr(value)), rst_to_markdown(comment))
        for module in wire_modules()
        for name, value, comment in constants(module)
    ]
    parts += ["## Constants and limits\n", table(["name", "value", "what it is"], rows), ""]
    return "\n".join(parts)


GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli_markdown,
    "configuration": config_markdown,
    "rest-api": rest_markdown,
    "thrift": thrift_markdown,
    "wire": wire_markdown,
}


def render(markdown: str) -> str:
    """``markdown`` with each marker replaced by its generated part."""

    def generated(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"unknown reference marker {name!r}: one of {', '.join(GENERATORS)}")
        return GENERATORS[name]()

    return MARKER.sub(generated, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs's hook: a page's Markdown before it is rendered, from this checkout's code (first on the path,
    before any installed copy, whatever directory mkdocs runs in)."""
    if sys.path[0] != str(ROOT):
        sys.path.insert(0, str(ROOT))
    return render(markdown)
