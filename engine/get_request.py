"""Decoding the ``JSApiMsgGetRequest`` JSON body shared by Direct Get and STREAM.MSG.GET.

nats-server 2.15.1 (built with Go 1.27, whose ``encoding/json`` v1 API runs on the v2 engine)
decodes this body in two ways, and both are reproduced here:

* Direct Get: ``json.Unmarshal`` -- exactly one JSON value, unknown keys ignored; any syntax or
  type error just means ``408 Malformed Request``, so no error text is needed (``strict=False``).
* MSG.GET: a ``json.Decoder`` with ``DisallowUnknownFields`` that reads a *stream* of values into
  the same struct (``{"seq":1}{"seq":2}`` asks for seq 2) and whose error text reaches the client
  as ``10025 invalid JSON: <text>`` (``strict=True``).

Go's rules kept (all probed): keys match case-insensitively when no exact match exists (Unicode
folding: a long s matches ``s``); duplicate keys are applied in order (``null`` leaves a scalar
unchanged but clears a time or list); the first error in document order wins, a syntax error in
a value before any of its semantic errors; numbers must fit the field's Go type exactly (``-0``,
``1.0`` and ``1e2`` are not a ``uint64``); invalid UTF-8 inside strings is accepted; times are
parsed by ``time.Parse(time.RFC3339)`` (so ``T1:00:00Z``, ``,5`` fractions and ``+24:00`` pass)
and become nanoseconds with Go's ``UnixNano`` int64 wrap-around (year 2999 is *before* 1970).

The common case costs one C-accelerated ``json`` decode and a shape check (``_decode_plain``: one
object of distinct, exactly named keys whose values have exactly the field's type, which Go reads
the same way, so no Go rule can come into play); any other body takes the Go-rule path, at the
cost of a second decode. The byte-level Go scanner below runs only when that fails (to word the
error, split a value stream, or accept nesting deeper than Python's recursion limit, up to Go's
10000). ``protocol.gojson`` implements the same Go rules for pydantic API models; this request
gets its own decoder because it is on the Direct Get / KV-get hot path (about 1 us for a plain
body, against 9 us through a pydantic model) and because Direct Get needs ``json.Unmarshal``'s
single-value rule, which the stream decoder does not have. The pieces that are the same Go rule
are shared, not copied: the decoded-value model, kind names and quoting come from
``protocol.gojson``, ``time.Parse`` from ``protocol.timefmt``.

Jetraft's extension: ``min_last_seq`` (uint64, read-your-writes Direct Get) is decoded like the
struct's other uint64 fields, but only by the lenient decoder. nats-server's struct has no such
field, so its Direct Get ignores the key (the same request stays valid there) and its MSG.GET
refuses it as an unknown field; the strict decoder does exactly that.

Must never: look at a stream, or raise anything but :class:`GetRequestError` on client input.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, cast

from protocol.goconv import wrap_int64
from protocol.gojson import (
    VALUE_DECODER,
    JsonNumber,
    JsonObject,
    clean_string,
    go_quote,
    json_kind,
    quote_char_at,
)
from protocol.timefmt import parse_rfc3339_unix_ns

GO_STRUCT_NAME: Final = "JSApiMsgGetRequest"
GO_VALUE_TYPE: Final = "server.JSApiMsgGetRequest"
GO_JSON_DEPTH_MAX: Final = 10000
UINT64_MAX: Final = (1 << 64) - 1
INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1
UNEXPECTED_EOF: Final = "unexpected EOF"


class GetRequestError(ValueError):
    """The request body is not a valid ``JSApiMsgGetRequest``; ``str(err)`` is Go's text."""


@dataclass(slots=True)
class MsgGetRequest:
    """The decoded request; zero values mean "not set", as in the Go struct."""

    seq: int = 0
    last_by_subj: str = ""
    next_by_subj: str = ""
    batch: int = 0
    max_bytes: int = 0
    start_time_ns: int | None = None  # UnixNano (int64-wrapped) of start_time
    multi_last: list[str] | None = None
    up_to_seq: int = 0
    up_to_time_ns: int | None = None
    no_hdr: bool = False
    min_last_seq: int = 0  # Direct Get only (jetraft's extension): answer from last_seq >= this


def go_parse_rfc3339(text: str) -> int:
    """``time.Parse(time.RFC3339, text).UnixNano()`` (Go's int64 wrap-around included, so year
    2999 is before 1970) with Go's errors; raises GetRequestError."""
    try:
        return wrap_int64(parse_rfc3339_unix_ns(text))
    except ValueError as err:
        raise GetRequestError(str(err)) from None


# ---- applying decoded members to the request ----------------------------------------------------


def _type_error(value: object, name: str) -> GetRequestError:
    kind = json_kind(value)
    if isinstance(value, JsonNumber) and _FIELD_SPECS[name][1] in ("uint64", "int"):
        kind = f"number {value}"  # Go names the literal only when the target is numeric
    return GetRequestError(
        f"json: cannot unmarshal {kind} into Go struct field {GO_STRUCT_NAME}.{name} "
        f"of type {_FIELD_SPECS[name][1]}"
    )


def _to_uint64(value: object, name: str) -> int:
    if (
        type(value) is JsonNumber
        and value.isdigit()
        and (len(value) < 20 or int(value) <= UINT64_MAX)
    ):
        return int(value)
    raise _type_error(value, name)


def _to_int(value: object, name: str) -> int:
    if type(value) is JsonNumber:
        digits = value[1:] if value[:1] == "-" else value
        if digits.isdigit() and (len(digits) < 19 or INT64_MIN <= int(value) <= INT64_MAX):
            return int(value)
    raise _type_error(value, name)


def _to_string(value: object, name: str) -> str:
    if type(value) is str:
        return clean_string(value)
    raise _type_error(value, name)


def _to_bool(value: object, name: str) -> bool:
    if type(value) is bool:
        return value
    raise _type_error(value, name)


def _to_time_ns(value: object, name: str) -> int:
    if type(value) is str:
        return go_parse_rfc3339(clean_string(value))
    raise _type_error(value, name)


def _to_string_list(value: object, name: str) -> list[str]:
    if type(value) is not list:
        raise _type_error(value, name)
    out: list[str] = []
    for index, item in enumerate(value):
        if item is None:
            out.append("")
        elif type(item) is str:
            out.append(clean_string(item))
        else:
            raise GetRequestError(
                f"json: cannot unmarshal {json_kind(item)} into {GO_STRUCT_NAME}.{name}.{index} "
                "of type string"
            )
    return out


_Converter = Callable[[object, str], object]
# JSON name -> (MsgGetRequest attribute, Go type, converter, whether null clears it)
_FIELD_SPECS: Final[dict[str, tuple[str, str, _Converter, bool]]] = {
    "seq": ("seq", "uint64", _to_uint64, False),
    "last_by_subj": ("last_by_subj", "string", _to_string, False),
    "next_by_subj": ("next_by_subj", "string", _to_string, False),
    "batch": ("batch", "int", _to_int, False),
    "max_bytes": ("max_bytes", "int", _to_int, False),
    "start_time": ("start_time_ns", "time.Time", _to_time_ns, True),
    "multi_last": ("multi_last", "[]string", _to_string_list, True),
    "up_to_seq": ("up_to_seq", "uint64", _to_uint64, False),
    "up_to_time": ("up_to_time_ns", "time.Time", _to_time_ns, True),
    "no_hdr": ("no_hdr", "bool", _to_bool, False),
    "min_last_seq": ("min_last_seq", "uint64", _to_uint64, False),
}
# Fields that are not in nats-server's struct: the strict (MSG.GET) decoder does not know them.
_EXTENSION_FIELDS: Final = frozenset(("min_last_seq",))
_FOLDED: Final = {name.casefold(): name for name in _FIELD_SPECS}


def _field_for(key: str, strict: bool) -> str | None:
    """The field a JSON key sets: an exact match first, else a case-folded one (as Go)."""
    name = key if key in _FIELD_SPECS else _FOLDED.get(key.casefold())
    if strict and name in _EXTENSION_FIELDS:
        return None
    return name


def _apply_member(req: MsgGetRequest, key: str, value: object, strict: bool) -> None:
    """Apply one ``"key": value`` member as Go's decoder would (raises on the first error)."""
    name = _field_for(key, strict)
    if name is None:
        if strict:
            raise GetRequestError(f"json: unknown field {go_quote(clean_string(key))}")
        return
    attr, _, convert, null_clears = _FIELD_SPECS[name]
    if value is None:
        if null_clears:
            setattr(req, attr, None)
        return
    setattr(req, attr, convert(value, name))


def _apply_top(req: MsgGetRequest, value: object, strict: bool) -> None:
    if value is None:
        return
    if not isinstance(value, JsonObject):
        raise GetRequestError(
            f"json: cannot unmarshal {json_kind(value)} into Go value of type {GO_VALUE_TYPE}"
        )
    for key, member in value:
        _apply_member(req, key, member, strict)


# ---- the Go scanner (slow path) -----------------------------------------------------------------

_WS: Final = frozenset(b" \t\r\n")
_DIGITS: Final = frozenset(b"0123456789")
_LITERALS: Final = {0x74: b"true", 0x66: b"false", 0x6E: b"null"}  # t f n


class _Syntax(Exception):
    """A Go syntax error (already worded) or ``unexpected EOF``."""


def _invalid(data: bytes, i: int, context: str) -> _Syntax:
    quoted, width = quote_char_at(data, i)
    return _Syntax(f"invalid character {quoted} {context} at offset {i + width}")


def _scan_string(data: bytes, i: int) -> int:
    """``data[i]`` is the opening quote; returns the index after the closing one."""
    n = len(data)
    i += 1
    while True:
        if i >= n:
            raise _Syntax(UNEXPECTED_EOF)
        b = data[i]
        if b == 0x22:
            return i + 1
        if b < 0x20:
            raise _invalid(data, i, "in string")
        if b == 0x5C:  # backslash
            if i + 1 >= n:
                raise _Syntax(UNEXPECTED_EOF)
            e = data[i + 1]
            if e in b'"\\/bfnrt':
                i += 2
                continue
            if e == 0x75:  # u
                seq = data[i : i + 6]
                if len(seq) < 6:
                    raise _Syntax(UNEXPECTED_EOF)
                if all(c in b"0123456789abcdefABCDEF" for c in seq[2:]):
                    i += 6
                    continue
                text = seq.decode("utf-8", "replace")
                raise _Syntax(f"invalid escape sequence `{text}` in string at offset {i + 6}")
            _, width = quote_char_at(data, i + 1)
            text = data[i : i + 1 + width].decode("utf-8", "replace")
            raise _Syntax(f"invalid escape sequence `{text}` in string at offset {i + 1 + width}")
        i += 1


def _scan_digits(data: bytes, i: int) -> int:
    while i < len(data) and data[i] in _DIGITS:
        i += 1
    return i


def _scan_number(data: bytes, i: int) -> int:
    n = len(data)
    if data[i] == 0x2D:  # '-'
        i += 1
        if i >= n:
            raise _Syntax(UNEXPECTED_EOF)
        if data[i] not in _DIGITS:
            raise _invalid(data, i, "in numeric literal")
    i = i + 1 if data[i] == 0x30 else _scan_digits(data, i)
    if i < n and data[i] == 0x2E:  # '.'
        i += 1
        if i >= n:
            raise _Syntax(UNEXPECTED_EOF)
        if data[i] not in _DIGITS:
            raise _invalid(data, i, "in numeric literal")
        i = _scan_digits(data, i)
    if i < n and data[i] in b"eE":
        i += 1
        if i < n and data[i] in b"+-":
            i += 1
        if i >= n:
            raise _Syntax(UNEXPECTED_EOF)
        if data[i] not in _DIGITS:
            raise _invalid(data, i, "in numeric literal")
        i = _scan_digits(data, i)
    return i


def _scan_literal(data: bytes, i: int) -> int:
    word = _LITERALS[data[i]]
    for k in range(1, len(word)):
        if i + k >= len(data):
            raise _Syntax(UNEXPECTED_EOF)
        if data[i + k] != word[k]:
            expecting = chr(word[k])
            raise _invalid(data, i + k, f"in literal {word.decode()} (expecting '{expecting}')")
    return i + len(word)


def _skip_ws(data: bytes, i: int) -> int:
    while i < len(data) and data[i] in _WS:
        i += 1
    return i


@dataclass(slots=True)
class _Value:
    start: int
    end: int
    # for a top-level object: (key_start, key_end, value_start, value_end) per member
    members: list[tuple[int, int, int, int]]


_OPEN_OBJECT, _CLOSE_OBJECT, _OPEN_ARRAY, _CLOSE_ARRAY = 0x7B, 0x7D, 0x5B, 0x5D
_COLON, _COMMA, _QUOTE, _MINUS = 0x3A, 0x2C, 0x22, 0x2D


class _Scanner:
    """Go's JSON syntax check for one top-level value, iterative (nesting up to 10000).

    Each ``_in_<state>`` method consumes one token at ``self.i`` and returns True when a value
    (scalar or container) has just ended, so that the parent's state can be restored.
    """

    __slots__ = ("data", "i", "key_span", "member_start", "members", "stack", "state")

    def __init__(self, data: bytes, i: int) -> None:
        self.data = data
        self.i = i
        self.stack: list[int] = []  # open containers: '{' or '['
        self.members: list[tuple[int, int, int, int]] = []
        self.key_span = (0, 0)
        self.member_start = 0
        self.state = self._in_value

    def scan(self) -> _Value:
        data, start = self.data, self.i
        while True:
            self.i = _skip_ws(data, self.i)
            if self.i >= len(data):
                raise _Syntax(UNEXPECTED_EOF)
            if not self.state(data[self.i]):
                continue
            if not self.stack:
                return _Value(start, self.i, self.members)
            if len(self.stack) == 1 and self.stack[0] == _OPEN_OBJECT:
                ks, ke = self.key_span
                self.members.append((ks, ke, self.member_start, self.i))
            self.state = self._after_member if self.stack[-1] == _OPEN_OBJECT else self._after_elem

    def _in_value(self, c: int) -> bool:
        data, i = self.data, self.i
        if c in (_OPEN_OBJECT, _OPEN_ARRAY):
            if len(self.stack) >= GO_JSON_DEPTH_MAX:
                raise _Syntax(f"exceeded max depth at offset {i + 1}")
            self.stack.append(c)
            self.i = i + 1
            self.state = self._in_key_or_close if c == _OPEN_OBJECT else self._in_value_or_close
            return False
        if c == _QUOTE:
            self.i = _scan_string(data, i)
        elif c == _MINUS or c in _DIGITS:
            self.i = _scan_number(data, i)
        elif c in _LITERALS:
            self.i = _scan_literal(data, i)
        else:
            raise _invalid(data, i, "looking for beginning of value")
        return True

    def _in_value_or_close(self, c: int) -> bool:
        if c == _CLOSE_ARRAY:
            return self._close()
        return self._in_value(c)

    def _in_key_or_close(self, c: int) -> bool:
        if c == _CLOSE_OBJECT:
            return self._close()
        return self._in_key(c)

    def _in_key(self, c: int) -> bool:
        if c != _QUOTE:
            raise _invalid(self.data, self.i, "looking for beginning of object key string")
        end = _scan_string(self.data, self.i)
        if len(self.stack) == 1:  # only top-level members are recorded (a nested key is not)
            self.key_span = (self.i, end)
        self.i = end
        self.state = self._in_colon
        return False

    def _in_colon(self, c: int) -> bool:
        if c != _COLON:
            raise _invalid(self.data, self.i, "after object key")
        self.i = _skip_ws(self.data, self.i + 1)
        if len(self.stack) == 1:
            self.member_start = self.i
        self.state = self._in_value
        return False

    def _after_member(self, c: int) -> bool:
        if c == _COMMA:
            self.i += 1
            self.state = self._in_key
            return False
        if c != _CLOSE_OBJECT:
            raise _invalid(self.data, self.i, "after object key:value pair")
        return self._close()

    def _after_elem(self, c: int) -> bool:
        if c == _COMMA:
            self.i += 1
            self.state = self._in_value
            return False
        if c != _CLOSE_ARRAY:
            raise _invalid(self.data, self.i, "after array element")
        return self._close()

    def _close(self) -> bool:
        self.stack.pop()
        self.i += 1
        return True


def _scan_value(data: bytes, pos: int) -> _Value | None:
    """Scan the next top-level value at or after ``pos``; None when only whitespace is left."""
    i = _skip_ws(data, pos)
    if i >= len(data):
        return None
    return _Scanner(data, i).scan()


def _decode_span(data: bytes, start: int, end: int) -> object:
    text = data[start:end].decode("utf-8", "replace")
    try:
        return VALUE_DECODER.decode(text)
    except RecursionError:
        # Deeper than Python allows but within Go's limit. Only its kind (and, for a list, the
        # kind of its first element) can matter: a deep value is always a type error.
        if data[start] == 0x7B:
            return JsonObject()
        first = data[_skip_ws(data, start + 1)]
        return [JsonObject()] if first == 0x7B else [[]]


def _apply_scanned(req: MsgGetRequest, data: bytes, value: _Value, strict: bool) -> None:
    first = data[value.start]
    if first != 0x7B:
        _apply_top(req, _decode_span(data, value.start, value.end), strict)
        return
    for ks, ke, vs, ve in value.members:
        key = VALUE_DECODER.decode(data[ks:ke].decode("utf-8", "replace"))
        assert isinstance(key, str)
        name = _field_for(key, strict)
        if name is None and not strict:
            continue  # unknown keys are skipped without decoding
        member = None if name is None else _decode_span(data, vs, ve)
        _apply_member(req, key, member, strict)


def _decode_slow(data: bytes, strict: bool) -> MsgGetRequest:
    req = MsgGetRequest()
    pos = 0
    try:
        while True:
            value = _scan_value(data, pos)
            if value is None:
                return req
            _apply_scanned(req, data, value, strict)
            pos = value.end
            if not strict:
                if _skip_ws(data, pos) < len(data):
                    raise GetRequestError("invalid character after top-level value")
                return req
    except _Syntax as err:
        raise GetRequestError(str(err)) from None


# ---- the fast path: a plain object that no Go rule can tell apart from Python's reading ---------

# Objects come back as a tuple of (key, value) pairs (a C callable: duplicates stay visible).
_PLAIN_DECODER: Final = json.JSONDecoder(object_pairs_hook=tuple)
# JSONDecoder's C scanner (typeshed does not declare the attribute).
_scan_plain: Final[Callable[[str, int], tuple[tuple[tuple[str, object], ...], int]]] = cast(
    Any, _PLAIN_DECODER
).scan_once
_JSON_WS: Final = " \t\r\n"
_UINT64_FIELDS: Final = frozenset(("seq", "up_to_seq", "min_last_seq"))
_INT_FIELDS: Final = frozenset(("batch", "max_bytes"))
_STRING_FIELDS: Final = frozenset(("last_by_subj", "next_by_subj"))
_TIME_FIELDS: Final = {"start_time": "start_time_ns", "up_to_time": "up_to_time_ns"}
_NOT_PLAIN: Final = object()


def _plain_value(key: str, value: object) -> object:
    """The field value for one member, or ``_NOT_PLAIN`` when Go's rules might read the member
    differently (null, ``-0``, ``1.0``, a wrong type, a time Go would refuse...)."""
    if key in _UINT64_FIELDS:
        # 0 may have been written "-0", which Go refuses for a uint64
        if type(value) is int and 0 < value <= UINT64_MAX:
            return value
    elif key in _STRING_FIELDS:
        if type(value) is str:
            return clean_string(value)
    elif key in _INT_FIELDS:
        if type(value) is int and INT64_MIN <= value <= INT64_MAX:
            return value
    elif key == "no_hdr":
        if type(value) is bool:
            return value
    elif key in _TIME_FIELDS:
        if type(value) is str:
            try:
                return go_parse_rfc3339(clean_string(value))
            except GetRequestError:
                return _NOT_PLAIN
    elif key == "multi_last" and type(value) is list:
        if all(type(item) is str for item in value):
            return [clean_string(item) for item in value]
    return _NOT_PLAIN


def _decode_plain(text: str, strict: bool) -> MsgGetRequest | None:
    """The request, when ``text`` is one object whose members all pass ``_plain_value``."""
    body = text.strip(_JSON_WS)
    if body[:1] != "{":
        return None
    try:  # the C scanner itself: JSONDecoder.decode's Python wrapper costs more than the scan
        pairs, end = _scan_plain(body, 0)
    except (ValueError, StopIteration, RecursionError):
        return None
    if end != len(body):
        return None
    if len(pairs) > 1 and len({key for key, _ in pairs}) != len(pairs):
        return None  # duplicate keys: Go applies each in turn
    req = MsgGetRequest()
    for key, member in pairs:
        if strict and key in _EXTENSION_FIELDS:
            return None  # an unknown field to MSG.GET: the Go-rule path words the error
        converted = _plain_value(key, member)
        if converted is _NOT_PLAIN:
            return None
        setattr(req, _TIME_FIELDS.get(key, key), converted)
    return req


def decode_get_request(payload: bytes, *, strict: bool) -> MsgGetRequest:
    """Decode a request body the way nats-server does (see the module docstring).

    ``strict=False`` is Direct Get's ``json.Unmarshal``: an empty or whitespace-only body is an
    error there (callers check emptiness first). ``strict=True`` is MSG.GET's stream decoder:
    whitespace only decodes to the zero request.
    """
    try:
        text = payload.decode()
    except UnicodeDecodeError:
        text = payload.decode("utf-8", "replace")
    else:
        plain = _decode_plain(text, strict)
        if plain is not None:
            return plain
    try:
        value = VALUE_DECODER.decode(text)
    except ValueError as err:
        if not strict:
            # json.Unmarshal fails on exactly what Python's json fails on (NaN and friends
            # are rejected by the hook); no need to word the error.
            raise GetRequestError(str(err)) from None
        return _decode_slow(payload, strict)
    except RecursionError:
        return _decode_slow(payload, strict)
    req = MsgGetRequest()
    _apply_top(req, value, strict)
    return req
