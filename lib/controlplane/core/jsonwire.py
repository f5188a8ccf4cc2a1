"""Strict readers for JSON wire values, shared by the coordinator's and the quota's parsers.

JSON types are strict: a boolean is not an integer, ``1.0`` and ``"1"`` are not integers;
``int`` holds a signed 32-bit value, ``long`` a signed 64-bit value; ``null`` and an absent field
are the same. Each reader raises :class:`WireError` naming the field's path.
"""

from __future__ import annotations

import binascii
import json
from base64 import b64decode
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

T = TypeVar("T")

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


class WireError(ValueError):
    """A field that cannot be read; ``field`` is its path in the event."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


# --- one event's text ------------------------------------------------------------


def decode_event_text(text: str) -> Any:
    """The JSON value of one event's text, as strictly as the wire wants it.

    Python's decoder accepts two things JSON does not have: the constants ``NaN``,
    ``Infinity`` and ``-Infinity``, and ``\\u`` escapes of lone UTF-16 surrogates, which
    decode to a string no UTF-8 writer can store. Both are refused here with ``ValueError``,
    as malformed JSON is, so every reader (replay, engine, quota keying) agrees on what is JSON.
    """
    if text.startswith("\ufeff"):  # as json.loads says it
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    value = _DECODER.decode(text)
    if "\\u" in text:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a \\u escape stands for a lone UTF-16 surrogate") from None
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Built once: ``json.loads`` with an argument builds a decoder per call.
_DECODER: Final = json.JSONDecoder(parse_constant=_refuse_constant)


# --- one JSON value each -------------------------------------------------------------


def is_int(value: object) -> bool:
    """A JSON integer: exactly ``int`` (a bool is an int subclass in Python, not on the wire)."""
    return type(value) is int


def long_or_none(value: object) -> int | None:
    """``value`` if it is a JSON integer in the signed 64-bit range, else None: what may be
    echoed into a ``long`` column or used as a time (a larger integer fails a table write)."""
    if type(value) is int and INT64_MIN <= value <= INT64_MAX:
        return value
    return None


WORDS: Final = {32: "an int", 64: "a long"}
RANGES: Final = {32: (INT32_MIN, INT32_MAX), 64: (INT64_MIN, INT64_MAX)}


def string(obj: Mapping[str, Any], name: str, path: str) -> str | None:
    value = obj.get(name)
    if value is not None and type(value) is not str:
        raise WireError(path, f"expected a string, got {kind(value)}")
    return value


def integer(
    obj: Mapping[str, Any],
    name: str,
    path: str,
    *,
    bits: int = 32,
    minimum: int | None = None,
) -> int | None:
    value = obj.get(name)
    if value is None:
        return None
    if type(value) is not int:
        raise WireError(path, f"expected {WORDS[bits]}, got {kind(value)}")
    low, high = RANGES[bits]
    if not low <= value <= high:
        raise WireError(path, f"out of range for {WORDS[bits]}: {value}")
    if minimum is not None and value < minimum:
        raise WireError(path, f"must be >= {minimum}, got {value}")
    return value


def base64_text(obj: Mapping[str, Any], name: str, path: str) -> str:
    value = text(obj, name, path)
    try:
        b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise WireError(path, f"not valid base64 ({exc})") from None
    return value


def array(
    obj: Mapping[str, Any],
    name: str,
    path: str,
    item: Callable[[Any, str], T],
) -> tuple[T, ...] | None:
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, list):
        raise WireError(path, f"expected an array, got {kind(value)}")
    return tuple(item(entry, f"{path}[{index}]") for index, entry in enumerate(value))


def json_object(value: Any, path: str, fields: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise WireError(path, f"expected an object, got {kind(value)}")
    for name in value:
        if name not in fields:
            raise WireError(f"{path}.{name}", "unknown field")
    return value


def kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value[:40]!r})"
    if isinstance(value, list):
        return "an array"
    return "an object"


def need(value: T | None, path: str) -> T:
    if value is None:
        raise WireError(path, "required")
    return value


def text(obj: Mapping[str, Any], name: str, path: str) -> str:
    return need(string(obj, name, path), path)


def int_field(obj: Mapping[str, Any], name: str, path: str, *, bits: int = 32) -> int:
    return need(integer(obj, name, path, bits=bits), path)
