"""The classes a topology names, resolved and checked before anything named is called.

A topology names its components and custom groupings as ``module`` + ``class`` strings, and whoever runs
it imports the name and calls it with the topology's JSON arguments. So a name must resolve to a class of
the kind it stands for before it is called: a :class:`~squall.api.component.Spout` subclass for a spout, a
:class:`~squall.api.component.Bolt` subclass for a bolt, a grouping class (one with ``choose_tasks``) for a
custom grouping. Without that, a topology struct alone — no package, no credentials — could name
``os.system`` with ``["id > proof.txt"]`` and every worker would run the command.

Everyone who turns names into objects goes through :func:`resolve`: workers before they build a
component or grouping, ``storm jar`` when it checks a package, nimbus for the classes a topology takes from
the installed environment. This is hygiene, not a security boundary: importing a module of the topology's
own package runs that module, which may do anything; only authentication decides who may submit code.

    resolve("wordcount", "SplitSentence", "bolt", "bolt 'split'")   # the class
    resolve("os", "system", "spout", "spout 'boom'")                 # NotAComponentClass: ... not a Spout subclass
"""

from __future__ import annotations

import importlib
from typing import Any, Literal

from squall.api.component import Bolt, Spout

__all__ = ["Kind", "NotAComponentClass", "check", "is_grouping_class", "resolve"]

#: What a named class stands for in a topology.
Kind = Literal["spout", "bolt", "custom grouping"]

_BASES: dict[str, type] = {"spout": Spout, "bolt": Bolt}


class NotAComponentClass(TypeError):
    """A topology names something that is not a class of the kind it stands for; the message names the
    component, what the name is, and what it must be.

        try:
            resolve("os", "system", "spout", "spout 'boom'")
        except NotAComponentClass as exc:
            print(exc)   # spout 'boom' names os.system, a builtin function, not a Spout subclass (...)
    """


def is_grouping_class(found: Any) -> bool:
    """Whether ``found`` is a custom grouping class: a class with a ``choose_tasks(values)`` method."""
    return isinstance(found, type) and callable(getattr(found, "choose_tasks", None))


def check(found: Any, kind: Kind, label: str, name: str) -> type:
    """``found`` itself when it is a class of ``kind``, else :class:`NotAComponentClass` (``label`` is the
    component as messages call it, ``name`` what the topology named: ``module.Class``)."""
    if kind == "custom grouping":
        if is_grouping_class(found):
            return found
        wanted = "a class with a choose_tasks(values) method"
    else:
        base = _BASES[kind]
        if isinstance(found, type) and issubclass(found, base):
            return found
        wanted = f"a {base.__name__} subclass"
    raise NotAComponentClass(
        f"{label} names {name}, {_what(found)}, not {wanted}: a topology may name only "
        f"component and grouping classes, which workers build with its JSON arguments"
    )


def resolve(module: str, name: str, kind: Kind, label: str) -> type:
    """Import ``module`` and return its attribute ``name`` if it is a class of ``kind`` (see :func:`check`).

    Nothing named is called here; an import that fails raises as the import would (ImportError...)."""
    found = getattr(importlib.import_module(module), name, _Missing)
    if found is _Missing:
        raise NotAComponentClass(f"{label} names {module}.{name}, but module {module} has no {name}")
    return check(found, kind, label, f"{module}.{name}")


class _Missing:
    """No such attribute."""


def _what(found: Any) -> str:
    if isinstance(found, type):
        return f"the class {found.__module__}.{found.__qualname__}"
    kind = type(found).__name__.replace("_or_method", "").replace("_", " ")
    return f"a {kind}" if callable(found) else f"a {kind} value"
