"""squall/core/storm_thrift.pyi, what mypy and IDEs know of the Thrift classes, says what idl/storm.thrift says."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from thriftpy2.thrift import TException, TType

from squall.core.thrift import storm

STUB = Path(__file__).resolve().parent.parent / "squall" / "core" / "storm_thrift.pyi"

_SCALARS = {TType.BOOL: "bool", TType.BYTE: "int", TType.I16: "int", TType.I32: "int", TType.I64: "int",
            TType.DOUBLE: "float", TType.STRING: "str", TType.BINARY: "bytes"}


def _spelling(ttype: int, sub: Any = None) -> str:
    """A field's Python type as the stub spells it, from thriftpy2's spec of the field."""
    if ttype == TType.STRUCT:
        return sub.__name__
    if ttype in _SCALARS:
        return _SCALARS[ttype]  # an enum field is an I32 holding the member's value
    if ttype in (TType.LIST, TType.SET):
        return f"{'list' if ttype == TType.LIST else 'set'}[{_spelling(*_pair(sub))}]"
    if ttype == TType.MAP:
        key, value = sub
        return f"dict[{_spelling(*_pair(key))}, {_spelling(*_pair(value))}]"
    raise AssertionError(f"a Thrift type the stub does not spell yet: {ttype}")


def _pair(sub: Any) -> tuple[int, Any]:
    return sub if isinstance(sub, tuple) else (sub, None)


def _from_idl() -> dict[str, dict[str, str]]:
    """Every struct, union and exception: its fields and their types (``T | None`` for an optional field)."""
    classes = {}
    for name in dir(storm):
        cls = getattr(storm, name)
        if name.startswith("_") or not hasattr(cls, "thrift_spec") or name == "Nimbus":
            continue
        fields = {}
        for spec in cls.thrift_spec.values():
            ttype, field, *sub, required = spec
            spelled = _spelling(ttype, *sub)
            fields[field] = spelled if required else f"{spelled} | None"
        if issubclass(cls, TException):
            fields["(base)"] = "Exception"
        classes[name] = fields
    return classes


def _from_stub() -> tuple[dict[str, dict[str, str]], dict[str, dict[str, int]], set[str]]:
    """The stub's classes with fields, its enums with members, and its module-level names."""
    classes: dict[str, dict[str, str]] = {}
    enums: dict[str, dict[str, int]] = {}
    names = set()
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        if not isinstance(node, ast.ClassDef):
            continue
        names.add(node.name)
        fields = {"(base)": ast.unparse(node.bases[0])} if node.bases else {}
        members = {}
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                annotation = ast.unparse(item.annotation)
                if annotation == "ClassVar[int]":
                    members[item.target.id] = ast.literal_eval(item.value)
                elif not annotation.startswith("ClassVar"):
                    fields[item.target.id] = annotation
        if members:
            enums[node.name] = members
        else:
            classes[node.name] = fields
    return classes, enums, names


def test_the_stub_declares_every_name_of_the_thrift_module():
    _, _, names = _from_stub()
    assert names == {name for name in dir(storm) if not name.startswith("_")}


def test_every_struct_has_the_idl_fields_and_types():
    classes, _, _ = _from_stub()
    assert classes == _from_idl()


def test_every_enum_has_the_idl_members():
    _, enums, _ = _from_stub()
    expected = {name: {member: value for value, member in cls._VALUES_TO_NAMES.items()}
                for name in dir(storm) if hasattr(cls := getattr(storm, name), "_VALUES_TO_NAMES")}
    assert enums == expected
