"""Go ``encoding/json`` compatibility: decode API request bodies and encode responses as
nats-server (Go 1.27, built on the json/v2 engine with v1 semantics) does.

Why a module of its own: clients see nats-server's decoder in its error texts
(``10025 invalid JSON: json: unknown field "replicas"``, ``... at offset 15``), in what it
accepts (a body may hold several JSON values that are merged, ``null`` leaves a field alone,
field names match case-insensitively, ``1.0`` is not an integer, invalid UTF-8 is tolerated),
and the encoder's HTML escaping (``"x.\\u003e"``) is visible in every response.

Decoding runs Python's C JSON parser first (fast path) and falls back to a port of Go's
scanner only to word a syntax error and find its offset. Then each value is checked against
the Go types recorded on the pydantic models (``models.GoInt`` …); the first error in document
order wins, as it does in Go. Case-insensitive matching: an exact field name wins, otherwise
ASCII case is folded (plus the two non-ASCII folds Go knows: the Kelvin sign and the long s).

Must never: do I/O, or raise anything but ``GoJsonError`` for bad input.
"""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar, Union

from protocol.models import GoEnum, GoInt, GoIntMap, GoIntSlice, GoName, GoStruct, GoTime
from protocol.timefmt import reformat_rfc3339

M = TypeVar("M", bound=GoStruct)

_SURROGATES = re.compile("[\ud800-\udfff]")
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_GO_WS = b" \t\n\r"
_ESCAPE_SEQ_BYTES_MAX = 6  # Go shows at most `\uXXXX` of a bad escape
_DEPTH_MAX = 10_000  # Go json/v2 nesting limit (probed: "exceeded max depth at offset 10001")


class GoJsonError(Exception):
    """A request body Go's decoder would reject; ``str(err)`` is Go's error text."""


# --- Go-style quoting ----------------------------------------------------------------------------

# strconv's C-style escapes, plus the backslash (which every Go quoting form escapes).
_C_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
}


def quote_rune(ch: str) -> str:
    """One character as inside Go's ``strconv.Quote``/``QuoteRune`` (the caller escapes its own
    quote character). An undecodable byte kept by ``surrogateescape`` becomes ``\\xNN``."""
    escaped = _C_ESCAPES.get(ch)
    if escaped is not None:
        return escaped
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    if ch.isprintable():
        return ch
    if code < 0x80:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def go_quote(text: str) -> str:
    """Go ``strconv.Quote`` (also what ``fmt`` ``%q`` prints for a string)."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return '"' + "".join('\\"' if ch == '"' else quote_rune(ch) for ch in text) + '"'


def quote_char_at(data: bytes, pos: int) -> tuple[str, int]:
    """The character at ``pos`` as Go's JSON scanner quotes it in a syntax error
    (``strconv.QuoteRune``; a byte that starts no valid UTF-8 sequence as ``'\\xNN'``), and
    its width in bytes."""
    first = data[pos]
    width = 1
    if first < 0x80:
        ch = chr(first)
    else:
        if first >= 0xC0:
            width = 4 if first >= 0xF0 else 3 if first >= 0xE0 else 2
        try:
            ch = data[pos : pos + width].decode("utf-8")
        except UnicodeDecodeError:
            return f"'\\x{first:02x}'", 1
    if ch == "'":
        return "'\\''", 1
    if ch == '"':
        return "'\"'", 1
    return f"'{quote_rune(ch)}'", width


# --- Encoding ------------------------------------------------------------------------------------

_HTML_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


def encode_str(obj: Any) -> str:
    """``json.Marshal``-compatible compact JSON of plain dicts/lists/str/int/bool/None, as text.

    Key order is the dict's order (build dicts in Go struct field order; sort Go maps).
    Go escapes ``<``, ``>``, ``&``, U+2028 and U+2029; those characters can only occur inside
    JSON strings, so replacing them in the output text is exact.
    """
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    for raw, escaped in _HTML_ESCAPES:
        if raw in text:
            text = text.replace(raw, escaped)
    return text


def encode(obj: Any) -> bytes:
    """:func:`encode_str` as UTF-8 bytes (a lone surrogate becomes ``?``)."""
    return encode_str(obj).encode("utf-8", "replace")


# --- Syntax errors: a port of Go's scanner (only run once a body is known to be bad) -------------


class _SyntaxFailure(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class _Eof(Exception):
    pass


class _Scanner:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def fail(self, context: str) -> _SyntaxFailure:
        quoted, width = quote_char_at(self.data, self.pos)
        offset = self.pos + width
        return _SyntaxFailure(f"invalid character {quoted} {context} at offset {offset}")

    def peek(self) -> int:
        if self.pos >= len(self.data):
            raise _Eof
        return self.data[self.pos]

    def skip_ws(self) -> None:
        data, pos = self.data, self.pos
        while pos < len(data) and data[pos] in _GO_WS:
            pos += 1
        self.pos = pos

    def value(self) -> None:
        """Scan one complete JSON value. Iterative, so nesting depth costs no Python stack."""
        stack: list[int] = []
        while True:
            c = self.peek()
            if c in (0x7B, 0x5B):  # { [
                if len(stack) >= _DEPTH_MAX:
                    raise _SyntaxFailure(f"exceeded max depth at offset {self.pos + 1}")
                self.pos += 1
                self.skip_ws()
                close = 0x7D if c == 0x7B else 0x5D
                if self.peek() == close:
                    self.pos += 1
                else:
                    stack.append(c)
                    if c == 0x7B:
                        self.key_and_colon()
                    continue
            elif c == 0x22:
                self.string()
            elif c == 0x2D or 0x30 <= c <= 0x39:
                self.number()
            elif c == 0x74:
                self.literal(b"true")
            elif c == 0x66:
                self.literal(b"false")
            elif c == 0x6E:
                self.literal(b"null")
            else:
                raise self.fail("looking for beginning of value")
            # A value is complete: close containers or move to their next element.
            while True:
                if not stack:
                    return
                self.skip_ws()
                c = self.peek()
                in_object = stack[-1] == 0x7B
                if c == (0x7D if in_object else 0x5D):
                    self.pos += 1
                    stack.pop()
                    continue
                if c != 0x2C:
                    raise self.fail(
                        "after object key:value pair" if in_object else "after array element"
                    )
                self.pos += 1
                self.skip_ws()
                if in_object:
                    self.key_and_colon()
                break

    def key_and_colon(self) -> None:
        if self.peek() != 0x22:
            raise self.fail("looking for beginning of object key string")
        self.string()
        self.skip_ws()
        if self.peek() != 0x3A:
            raise self.fail("after object key")
        self.pos += 1
        self.skip_ws()

    def string(self) -> None:
        self.pos += 1
        while True:
            c = self.peek()
            if c == 0x22:
                self.pos += 1
                return
            if c == 0x5C:
                self.escape()
            elif c < 0x20:
                raise self.fail("in string")
            else:
                self.pos += 1

    def escape(self) -> None:
        start = self.pos
        data = self.data
        if start + 1 >= len(data):
            raise _Eof
        e = data[start + 1]
        if e in b'"\\/bfnrt':
            self.pos += 2
            return
        if e == 0x75:  # u
            for k in range(4):
                at = start + 2 + k
                if at >= len(data):
                    raise _Eof
                if data[at] not in b"0123456789abcdefABCDEF":
                    seq = data[start : start + _ESCAPE_SEQ_BYTES_MAX]
                    raise self._bad_escape(start, seq)
            self.pos += 6
            return
        _, width = quote_char_at(data, start + 1)
        raise self._bad_escape(start, data[start : start + 1 + width])

    @staticmethod
    def _bad_escape(start: int, seq: bytes) -> _SyntaxFailure:
        shown = seq.decode("utf-8", "replace")
        offset = start + len(seq)
        return _SyntaxFailure(f"invalid escape sequence `{shown}` in string at offset {offset}")

    def digits(self) -> None:
        data = self.data
        while self.pos < len(data) and 0x30 <= data[self.pos] <= 0x39:
            self.pos += 1

    def need_digit(self) -> None:
        c = self.peek()
        if not 0x30 <= c <= 0x39:
            raise self.fail("in numeric literal")

    def number(self) -> None:
        data = self.data
        if data[self.pos] == 0x2D:
            self.pos += 1
        self.need_digit()
        if data[self.pos] == 0x30:
            self.pos += 1
        else:
            self.digits()
        if self.pos < len(data) and data[self.pos] == 0x2E:
            self.pos += 1
            self.need_digit()
            self.digits()
        if self.pos < len(data) and data[self.pos] in b"eE":
            self.pos += 1
            if self.peek() in b"+-":
                self.pos += 1
            self.need_digit()
            self.digits()

    def literal(self, word: bytes) -> None:
        for expected in word:
            if self.peek() != expected:
                name = word.decode()
                raise self.fail(f"in literal {name} (expecting {chr(expected)!r})")
            self.pos += 1


def _syntax_error_text(data: bytes) -> str:
    """Go's decoder error for a body that Python's parser rejected."""
    scanner = _Scanner(data)
    try:
        while True:
            scanner.skip_ws()
            if scanner.pos >= len(data):
                break
            scanner.value()
    except _Eof:
        return "unexpected EOF"
    except _SyntaxFailure as failure:
        return failure.text
    # Valid for Go but too deep for Python's recursive parser (between ~1000 and 10000 levels):
    # Go would go on to a type error; we stop here with its depth wording.
    return "exceeded max depth"


# --- Fast path: Python's parser, keeping Go-relevant detail --------------------------------------


class JsonObject(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs, in order, duplicates kept (Go applies each)."""

    __slots__ = ()


class JsonNumber(str):
    """A JSON number, kept as its literal text (Go's error texts quote it; ``1.0`` is no int)."""

    __slots__ = ()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid literal {name}")


# Python's C parser, keeping what Go's rules look at: member order and duplicates, number text.
VALUE_DECODER = json.JSONDecoder(
    object_pairs_hook=JsonObject,
    parse_int=JsonNumber,
    parse_float=JsonNumber,
    parse_constant=_reject_constant,
)


def json_kind(value: Any) -> str:
    """Go's name for a decoded value's JSON kind in ``cannot unmarshal <kind> into ...``."""
    if isinstance(value, JsonObject):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, JsonNumber):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "null"


def clean_string(text: str) -> str:
    """Go replaces invalid UTF-8 and lone surrogates in strings with U+FFFD."""
    if text.isascii():
        return text
    return _SURROGATES.sub("\ufffd", text)


def _values(body: bytes) -> Iterator[Any]:
    """Each top-level JSON value in the body (Go's json.Decoder loop reads them all)."""
    text = body.decode("utf-8", "surrogateescape")
    end = len(text)
    idx = _WHITESPACE.match(text, 0).end()  # type: ignore[union-attr]
    while idx < end:
        try:
            value, idx = VALUE_DECODER.raw_decode(text, idx)
        except (ValueError, RecursionError):
            raise GoJsonError(_syntax_error_text(body)) from None
        yield value
        idx = _WHITESPACE.match(text, idx).end()  # type: ignore[union-attr]


# --- Typed decoding against the Go types ---------------------------------------------------------

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class _Ctx:
    root: str
    strict: bool


def _type_error(ctx: _Ctx, what: str, path: Path, type_name: str) -> GoJsonError:
    if not path:
        return GoJsonError(f"json: cannot unmarshal {what} into Go value of type {type_name}")
    dotted = ".".join(str(p) for p in path)
    # Go names the field as a "Go struct field" unless the innermost step is a slice index.
    where = "" if isinstance(path[-1], int) else "Go struct field "
    return GoJsonError(
        f"json: cannot unmarshal {what} into {where}{ctx.root}.{dotted} of type {type_name}"
    )


class _Codec:
    """How one Go-typed field decodes. ``decode`` returns the new Python value."""

    type_name = ""

    def zero(self) -> Any:
        raise NotImplementedError

    def decode(self, ctx: _Ctx, value: Any, path: Path, current: Any) -> Any:
        raise NotImplementedError


class _IntCodec(_Codec):
    def __init__(self, spec: GoInt) -> None:
        self.spec = spec
        self.type_name = spec.type_name

    def zero(self) -> Any:
        return 0

    def decode(self, ctx: _Ctx, value: Any, path: Path, current: Any) -> Any:
        if value is None:
            return current
        if not isinstance(value, JsonNumber):
            raise _type_error(ctx, json_kind(value), path, self.type_name)
        text = str(value)
        bad = "." in text or "e" in text or "E" in text
        bad = bad or (self.spec.min_value == 0 and text.startswith("-"))
        number = 0 if bad else int(text)
        if bad or not self.spec.min_value <= number <= self.spec.max_value:
            raise _type_error(ctx, f"number {text}", path, self.type_name)
        return number


class _BoolCodec(_Codec):
    type_name = "bool"

    def zero(self) -> Any:
        return False

    def decode(self, ctx: _Ctx, value: Any, path: Path, current: Any) -> Any:
        if value is None:
            return current
        if not isinstance(value, bool):
            raise _type_error(ctx, json_kind(value), path, self.type_name)
        return value


class _StringCodec(_Codec):
    """A Go string, or a named string type (``server.SortOpt``) whose name error texts show."""

    def __init__(self, type_name: str = "string") -> None:
        self.type_name = type_name

    def zero(self) -> Any:
        return ""

    def decode(self, ctx: _Ctx, value: Any, path: Path, current: Any) -> Any:
        if value is None:
            return current
        if isinstance(value, JsonNumber) or not isinstance(value, str):
            raise _type_error(ctx, json_kind(value), path, self.type_name)
        return clean_string(value)


_STRING = _StringCodec()


class _ListCodec(_Codec):
    """A Go slice of strings or of an integer type (``[]string``, ``[]time.Duration``)."""

    def __init__(self, element: _Codec, nullable: bool) -> None:
        self.element = element
        self.nullable = nullable
        self.type_name = f"[]{element.type_name}"

    def zero(self) -> Any:
        return None if self.nullable else []

    def decode(self, ctx: _Ctx, value: Any, path: Path, current: Any) -> Any:
        if value is None:
            return self.zero()
        if not isinstance(value, list) or isinstance(value, JsonObject):
            raise _type_error(ctx, json_kind(value), path, self.type_name)
        zero = self.element.zero()
        return [self.element.decode(ctx, item, (*path, i), zero) for i, item in enumerate(value)]


class _MapCodec(_Codec):
    """A Go map with string keys (``map[string]string``, ``map[string]uint64``)."""

    def __init__(self, element: _Codec) -> None:
        self.element = element
        self.type_name = f"map[string]{element.type_name}"

    def zero(self) -> Any:
        return None

    def decode(self, ctx: _Ctx, value: Any, path: Path, current: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, JsonObject):
            raise _type_error(ctx, json_kind(value), path, self.type_name)
        merged: dict[str, Any] = dict(current) if current else {}
        zero = self.element.zero()
        for key, item in value:
            merged[clean_string(key)] = self.element.decode(ctx, item, (*path, key), zero)
        return merged


class _EnumCodec(_Codec):
    def __init__(self, spec: GoEnum) -> None:
        self.spec = spec
        self.type_name = spec.type_name
        self.table = dict(spec.raw)

    def zero(self) -> Any:
        return self.spec.zero

    def decode(self, ctx: _Ctx, value: Any, path: Path, current: Any) -> Any:
        spec = self.spec
        if spec.via_string:
            if value is None:
                value = ""
            if isinstance(value, JsonNumber) or not isinstance(value, str):
                raise GoJsonError(
                    f"json: cannot unmarshal {json_kind(value)} into Go value of type string"
                )
            found = self.table.get(value)
            if found is None:
                raise GoJsonError(spec.unknown_text)
            return found
        raw = _raw_literal(value)
        found = self.table.get(raw.lower() if spec.fold_case else raw)
        if found is None:
            raise GoJsonError(f"can not unmarshal {go_quote(raw)}")
        return found


def _raw_literal(value: Any) -> str:
    """The JSON text of a value, as a Go ``UnmarshalJSON`` method would receive it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, JsonNumber):
        return str(value)
    return json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":"))


def _plain(value: Any) -> Any:
    if isinstance(value, JsonObject):
        return {k: _plain(v) for k, v in value}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, JsonNumber):
        return float(value) if any(c in value for c in ".eE") else int(value)
    return value


class _TimeCodec(_Codec):
    type_name = "time.Time"

    def zero(self) -> Any:
        return None

    def decode(self, ctx: _Ctx, value: Any, path: Path, current: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, JsonNumber) or not isinstance(value, str):
            raise _type_error(ctx, json_kind(value), path, self.type_name)
        try:
            return reformat_rfc3339(clean_string(value))
        except ValueError as exc:
            raise GoJsonError(str(exc)) from None


class _StructCodec(_Codec):
    def __init__(self, model: type[GoStruct], pointer: bool) -> None:
        self.model = model
        self.pointer = pointer
        self.type_name = model.go_name

    def zero(self) -> Any:
        return None if self.pointer else {}

    def decode(self, ctx: _Ctx, value: Any, path: Path, current: Any) -> Any:
        if value is None:
            return None if self.pointer else current
        if not isinstance(value, JsonObject):
            raise _type_error(ctx, json_kind(value), path, self.type_name)
        state: dict[str, Any] = dict(current) if current else {}
        _decode_fields(ctx, self.model, value, path, state)
        return state


class _StructListCodec(_Codec):
    def __init__(self, model: type[GoStruct], type_name: str) -> None:
        self.element = _StructCodec(model, pointer=True)
        self.type_name = type_name

    def zero(self) -> Any:
        return None

    def decode(self, ctx: _Ctx, value: Any, path: Path, current: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, list) or isinstance(value, JsonObject):
            raise _type_error(ctx, json_kind(value), path, self.type_name)
        out = []
        for i, item in enumerate(value):
            decoded = self.element.decode(ctx, item, (*path, i), None)
            out.append({} if decoded is None else decoded)
        return out


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, GoStruct)


def _codec_for(annotation: Any, metadata: list[Any]) -> _Codec:
    for meta in metadata:
        if isinstance(meta, GoIntSlice):
            return _ListCodec(_IntCodec(meta.element), nullable=True)
        if isinstance(meta, GoIntMap):
            return _MapCodec(_IntCodec(meta.element))
        if isinstance(meta, GoInt):
            return _IntCodec(meta)
        if isinstance(meta, GoEnum):
            return _EnumCodec(meta)
        if isinstance(meta, GoTime):
            return _TimeCodec()
    go_name = next((m.type_name for m in metadata if isinstance(m, GoName)), "")
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    nullable = False
    if origin in (Union, types.UnionType):
        nullable = type(None) in args
        inner = [a for a in args if a is not type(None)]
        annotation = inner[0]
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is bool:
        return _BoolCodec()
    if annotation is str:
        return _StringCodec(go_name) if go_name else _STRING
    if _is_model(annotation):
        return _StructCodec(annotation, pointer=nullable)
    if origin is list and args and args[0] is str:
        return _ListCodec(_STRING, nullable)
    if origin is list and args and _is_model(args[0]):
        return _StructListCodec(args[0], go_name or f"[]{args[0].go_name}")
    if origin is dict:
        return _MapCodec(_STRING)
    raise TypeError(f"no Go codec for {annotation!r}")


def _fold(name: str) -> str:
    return name.replace("\u212a", "k").replace("\u017f", "s").lower()


@dataclass(frozen=True, slots=True)
class _Schema:
    codecs: dict[str, _Codec]
    folded: dict[str, str]
    zeros: dict[str, Any]
    nested: tuple[tuple[str, _StructCodec | _StructListCodec], ...]


@cache
def _schema(model: type[GoStruct]) -> _Schema:
    # keyed by the JSON name: a field's alias where Go's name is no Python name (``js-enabled``)
    codecs = {
        field.alias or name: _codec_for(field.annotation, list(field.metadata))
        for name, field in model.model_fields.items()
    }
    folded: dict[str, str] = {}
    for name in codecs:
        folded.setdefault(_fold(name), name)
    nested = tuple(
        (name, codec)
        for name, codec in codecs.items()
        if isinstance(codec, (_StructCodec, _StructListCodec))
    )
    zeros = {name: codec.zero() for name, codec in codecs.items()}
    return _Schema(codecs=codecs, folded=folded, zeros=zeros, nested=nested)


def _decode_fields(
    ctx: _Ctx, model: type[GoStruct], obj: JsonObject, path: Path, state: dict[str, Any]
) -> None:
    schema = _schema(model)
    for key, value in obj:
        name = key if key in schema.codecs else schema.folded.get(_fold(key))
        if name is None:
            if ctx.strict:
                raise GoJsonError(f"json: unknown field {go_quote(clean_string(key))}")
            continue
        codec = schema.codecs[name]
        current = state[name] if name in state else codec.zero()
        state[name] = codec.decode(ctx, value, (*path, key), current)


def _complete(model: type[GoStruct], state: dict[str, Any]) -> dict[str, Any]:
    """The state with Go zero values for every field never set, nested structs included.

    (Zero lists/dicts are shared between calls; pydantic validation copies them.)
    """
    schema = _schema(model)
    out = dict(schema.zeros)
    out.update(state)
    for name, codec in schema.nested:
        value = out[name]
        if value is None:
            continue
        if isinstance(codec, _StructCodec):
            out[name] = _complete(codec.model, value)
        else:
            out[name] = [_complete(codec.element.model, item) for item in value]
    return out


def decode(body: bytes, model: type[M], *, strict: bool = True) -> M:
    """Decode a request body the way nats-server's ``unmarshalRequest`` does.

    ``strict`` rejects unknown fields (nats-server's JetStream API default since 2.12); Direct
    Get bodies are decoded with ``strict=False``. An empty or whitespace-only body gives the Go
    zero value. Raises GoJsonError with Go's text.
    """
    ctx = _Ctx(root=model.go_name.removeprefix("server."), strict=strict)
    state: dict[str, Any] = {}
    for value in _values(body):
        if value is None:
            continue
        if not isinstance(value, JsonObject):
            raise _type_error(ctx, json_kind(value), (), model.go_name)
        _decode_fields(ctx, model, value, (), state)
    return model.model_validate(_complete(model, state))


_OFFSET_SUFFIX = re.compile(r" at offset \d+$")


def unmarshal(body: bytes, model: type[M]) -> M:
    """Decode a body the way Go's ``json.Unmarshal`` does (what a few nats-server handlers call
    instead of the API's decoder): exactly one JSON value, unknown fields ignored, and the error
    texts without an offset (``unexpected end of JSON input``, ``invalid character 'x' after
    top-level value``)."""
    text = body.decode("utf-8", "surrogateescape")
    start = _WHITESPACE.match(text).end()  # type: ignore[union-attr]
    if start == len(text):
        raise GoJsonError("unexpected end of JSON input")
    try:
        _value, end = VALUE_DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        reason = _syntax_error_text(body)
        if reason == "unexpected EOF":
            reason = "unexpected end of JSON input"
        raise GoJsonError(_OFFSET_SUFFIX.sub("", reason)) from None
    end = _WHITESPACE.match(text, end).end()  # type: ignore[union-attr]
    if end < len(text):
        at = len(text[:end].encode("utf-8", "surrogateescape"))
        quoted, _width = quote_char_at(body, at)
        raise GoJsonError(f"invalid character {quoted} after top-level value")
    return decode(body, model, strict=False)
