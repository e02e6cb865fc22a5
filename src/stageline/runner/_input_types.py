"""A run's inputs checked against the types its template's state declares, before the run exists.

Values are validated with pydantic in lax mode, so what a command line can only spell as text
is converted where the conversion is exact (``"3"`` for an ``int`` is 3, ``"2.5"`` for a
``float`` 2.5, ``"true"``/``"yes"``/``"1"`` for a ``bool`` True) and refused otherwise
(``"abc"`` for a ``float``, ``"3.5"`` for an ``int``, 5 for a ``str``). A converted value
replaces the given one only while it stays plain data (numbers, strings, lists, mappings): a
model or a date is checked, not built, so what is checkpointed is what the caller gave. State
keys whose type pydantic cannot check (``Any``, arbitrary classes) are taken as given.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Hashable, Mapping
from typing import Any

from stageline.errors import InputError

__all__ = ["typed_inputs"]

_PLAIN = (str, int, float, bool, type(None))


def typed_inputs(state: type[Any], inputs: Mapping[str, Any], template: str) -> dict[str, Any]:
    """``inputs`` with each value checked (and converted) against ``state``'s declared type.

    Raises ``InputError`` naming the key, the declared type and the value that does not fit.
    """
    hints = _hints(state)
    checked = dict(inputs)
    for key, value in inputs.items():
        hint = hints.get(key)
        adapter = _adapter(hint) if isinstance(hint, Hashable) else None
        if adapter is None:
            continue
        from pydantic import ValidationError

        try:
            converted = adapter.validate_python(value)
        except ValidationError as exc:
            why = exc.errors()[0].get("msg", "does not fit") if exc.errors() else "does not fit"
            raise InputError(
                f"input {key!r} of template {template!r} must be {_name(hint)}; got "
                f"{_short(value)}: {why[:1].lower()}{why[1:]}"
            ) from None
        if _plain(converted):
            checked[key] = converted
    return checked


def _hints(state: type[Any]) -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(state, include_extras=True)
    except Exception:
        hints = dict(getattr(state, "__annotations__", {}))
    return {key: _checked_type(hint) for key, hint in hints.items()}


def _checked_type(hint: Any) -> Any:
    """``hint`` without ``Required``/``NotRequired``: they say whether a key may be missing (the
    template checks that), not what its value is."""
    if typing.get_origin(hint) is typing.Annotated:
        inner, *meta = typing.get_args(hint)
        return typing.Annotated[(_checked_type(inner), *meta)] if meta else inner
    if typing.get_origin(hint) in (typing.Required, typing.NotRequired):
        return typing.get_args(hint)[0]
    return hint


@functools.lru_cache(maxsize=512)
def _adapter(hint: Any) -> Any:
    """A pydantic ``TypeAdapter`` for ``hint``; None where there is nothing to check."""
    if hint is Any or _bare(hint) is Any:
        return None
    from pydantic import PydanticUserError, TypeAdapter

    try:
        return TypeAdapter(hint)
    except (PydanticUserError, TypeError, NameError):  # arbitrary classes, py<3.12 TypedDicts
        return None


def _bare(hint: Any) -> Any:
    """``hint`` without ``Annotated`` metadata (reducers)."""
    if typing.get_origin(hint) is typing.Annotated:
        return typing.get_args(hint)[0]
    return hint


def _name(hint: Any) -> str:
    bare = _bare(hint)
    names = {
        str: "a string (str)",
        int: "an integer (int)",
        float: "a number (float)",
        bool: "true or false (bool)",
        list: "a list",
        dict: "a mapping (dict)",
    }
    if bare in names:
        return names[bare]
    origin = typing.get_origin(bare)
    spelled = str(bare).replace("typing.", "")
    if origin in names:
        return f"{names[origin].split(' (')[0]} ({spelled})"
    return spelled if origin is not None else getattr(bare, "__name__", spelled)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _plain(value: Any) -> bool:
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False
