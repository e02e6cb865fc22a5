"""A template's required inputs: declared (``Template.require_input``) or derived from its state.

A run cannot start without them: the runner checks them before the run exists, so a missing
input is a usage error at every door (the CLI exits 2, the API answers 422), never a run that
fails at its first node. Derived from the state schema:

- a ``TypedDict`` key marked ``Required[...]`` (LangGraph does not enforce a TypedDict's
  totality, so the plain keys of a total TypedDict are not taken as required);
- a pydantic model's required fields (LangGraph refuses a first state without them);
- a dataclass's fields without a default.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from stageline.errors import InputError
from stageline.stages import RESERVED_KEYS

__all__ = ["check_required", "required_keys"]


def required_keys(state: type[Any]) -> list[str]:
    """The state keys a run must be given, in declaration order."""
    fields = getattr(state, "model_fields", None)
    if isinstance(fields, Mapping):  # a pydantic model
        found = [k for k, f in fields.items() if getattr(f, "is_required", lambda: False)()]
    elif dataclasses.is_dataclass(state):
        found = [
            f.name
            for f in dataclasses.fields(state)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
    else:
        try:
            hints = typing.get_type_hints(state, include_extras=True)
        except Exception:  # names that do not resolve: only what the class itself says
            hints = dict(getattr(state, "__annotations__", {}))
        found = [k for k, h in hints.items() if typing.get_origin(_bare(h)) is typing.Required]
    return [k for k in found if k not in RESERVED_KEYS]


def _bare(hint: Any) -> Any:
    """``hint`` without ``Annotated`` metadata (``Annotated[Required[list], reducer]``)."""
    return typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def check_required(template: str, required: Mapping[str, str], inputs: Mapping[str, Any]) -> None:
    """``InputError`` naming every required input that is missing (or blank text), what each
    is, and how to pass them."""
    missing = [k for k in required if _absent(inputs.get(k))]
    if not missing:
        return
    named = ", ".join(f"{k!r}" + (f" ({required[k]})" if required[k] else "") for k in missing)
    flags = " ".join(f"-i {k}=..." for k in missing)
    many = len(missing) > 1
    raise InputError(
        f"missing required input{'s' if many else ''} {named} of template {template!r}; "
        f"pass {'them' if many else 'it'} with {flags}"
    )
