"""The JSON-ready form of patchkit's result values, shared by :mod:`patchkit.results` and
:mod:`patchkit.plugin_results` (the ``--json`` schema is docs/json.md)."""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import Any

from patchkit.advice import NextStep


def jsonable(value: Any) -> Any:
    """The JSON-ready form of a result value, at any depth: a :class:`~patchkit.advice.NextStep` as
    :meth:`~patchkit.advice.NextStep.to_dict` gives it (so every report's ``next_steps``, the guard's
    nested in apply, revert and status included, has one shape: docs/json.md), another dataclass as
    its fields (or, when it has one, what its ``json_fields()`` gives: the keys of a
    :class:`~patchkit.plugin_results.PluginReport` its plugin lays out), an :class:`Enum` as its
    value, tuples as lists."""
    if isinstance(value, NextStep):
        return value.to_dict()
    if callable(getattr(type(value), "json_fields", None)):
        return {k: jsonable(v) for k, v in value.json_fields().items()}
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def as_written(value: Any) -> str:
    """``value`` as JSON, as the config writes it (``[true, 7, 13]``, ``"2,30"``; Python's ``True`` and ``inf``
    were shown before), cut to 60 characters."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def json_kind(value: Any) -> str:
    """The JSON type name of a parsed value (``list`` -> array, ``str`` -> string)."""
    return {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(value), "value")
