"""Subject transforms: the ``src`` -> ``dest`` mappings of stream ``subject_transform``,
``republish``, and source/mirror ``subject_transforms``, with nats-server's grammar, results and
error texts (server/subject_transform.go, ``ValidateMapping`` in sublist.go, v2.15).

A destination is a subject whose tokens are literals, ``>`` (when the source ends in ``>``), the
legacy ``$N`` (the Nth ``*`` of the source), or a mustache function of whole-token form
``{{name(args)}}``: ``wildcard(n)``, ``partition(count[, n...])``, ``split(n, delim)``,
``splitFromLeft``/``splitFromRight``/``sliceFromLeft``/``sliceFromRight``/``left``/``right(n,
size)`` and ``random(count)``. Function names are case-insensitive in their first letters only,
as nats-server's patterns are.

``random`` is the one function whose result is not a function of the subject. Callers that must be
deterministic (the stream state machine, which every replica runs) pass ``pick``: a source of
numbers they derive from the log, so every replica draws the same "random" partition.

Must never: do I/O, read clocks, or draw random numbers of its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from protocol.subjects import FULL_WILDCARD, PARTIAL_WILDCARD, TOKEN_SEPARATOR, subject_matches

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
FNV32_OFFSET = 2166136261
FNV32_PRIME = 16777619
UINT32_MASK = 0xFFFFFFFF
_U64_MASK = (1 << 64) - 1

# nats-server's error texts (errors.go)
ERR_BAD_SUBJECT = "invalid subject"
ERR_INVALID_DEST = "invalid mapping destination"
ERR_INVALID_TRANSFORM = f"{ERR_INVALID_DEST}: invalid transform"
ERR_UNKNOWN_FUNCTION = f"{ERR_INVALID_DEST}: unknown function"
ERR_INDEX_OUT_OF_RANGE = f"{ERR_INVALID_DEST}: wildcard index out of range"
ERR_NOT_ENOUGH_ARGS = f"{ERR_INVALID_DEST}: not enough arguments passed to the function"
ERR_INVALID_ARG = f"{ERR_INVALID_DEST}: function argument is invalid or in the wrong format"
ERR_TOO_MANY_ARGS = f"{ERR_INVALID_DEST}: too many arguments passed to the function"

_GO_SPACE = "[\t\n\f\r ]"  # RE2's \s


def _function_pattern(name: str) -> re.Pattern[str]:
    """``{{ Name ( args ) }}`` where only each word's first letter may change case (as the
    server's ``[pP]artition``)."""
    words = re.findall(r"[A-Z]?[a-z]+", name)
    body = "".join(f"[{w[0].lower()}{w[0].upper()}]{w[1:]}" for w in words)
    return re.compile(rf"{{{{{_GO_SPACE}*{body}{_GO_SPACE}*\((.*)\){_GO_SPACE}*}}}}")


class Fn(Enum):
    LITERAL = "literal"
    PARTITION = "partition"
    WILDCARD = "wildcard"
    SPLIT_FROM_LEFT = "SplitFromLeft"
    SPLIT_FROM_RIGHT = "SplitFromRight"
    SLICE_FROM_LEFT = "SliceFromLeft"
    SLICE_FROM_RIGHT = "SliceFromRight"
    SPLIT = "split"
    LEFT = "left"
    RIGHT = "right"
    RANDOM = "random"


_PATTERNS: dict[Fn, re.Pattern[str]] = {
    fn: _function_pattern(fn.value) for fn in Fn if fn is not Fn.LITERAL
}
# the order nats-server tries them in (indexPlaceHolders)
_PARSE_ORDER = (
    Fn.WILDCARD,
    Fn.PARTITION,
    Fn.SPLIT_FROM_LEFT,
    Fn.SPLIT_FROM_RIGHT,
    Fn.SLICE_FROM_LEFT,
    Fn.SLICE_FROM_RIGHT,
    Fn.RIGHT,
    Fn.LEFT,
    Fn.SPLIT,
    Fn.RANDOM,
)
_ARG_SEPARATOR = re.compile(f",{_GO_SPACE}*")
_GO_INT = re.compile(r"[+-]?[0-9]+")


class TransformError(ValueError):
    """A mapping nats-server would refuse; ``str()`` is its error text."""


def _go_int(
    text: str, low: int = INT64_MIN, high: int = INT64_MAX, *, trim: bool = True
) -> int | None:
    """strconv.Atoi / ParseInt(…, 10, 32) of ``text`` (spaces trimmed first, as the function
    arguments are); None on error."""
    if trim:
        text = text.strip(" ")
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if low <= value <= high else None


def _err(kind: str, token: str) -> TransformError:
    return TransformError(f"{kind} in {token}" if token else kind)


@dataclass(frozen=True, slots=True)
class _DestToken:
    fn: Fn
    text: str  # the literal (for LITERAL)
    indexes: tuple[int, ...] = ()  # source token positions, or wildcard numbers while parsing
    number: int = -1
    delimiter: str = ""


def _is_mustache(token: str) -> bool:
    return len(token) > 4 and token.startswith("{{") and token.endswith("}}")


def _function_args(fn: Fn, token: str) -> list[str] | None:
    found = _PATTERNS[fn].search(token)
    return _ARG_SEPARATOR.split(found.group(1)) if found else None


def _index_and_int(fn: Fn, token: str, args: list[str]) -> _DestToken:
    if len(args) < 2:
        raise _err(ERR_NOT_ENOUGH_ARGS, token)
    if len(args) > 2:
        raise _err(ERR_TOO_MANY_ARGS, token)
    index = _go_int(args[0])
    number = _go_int(args[1], INT32_MIN, INT32_MAX)
    if index is None or number is None:
        raise _err(ERR_INVALID_ARG, token)
    return _DestToken(fn, token, (index,), number)


def _parse_function(fn: Fn, token: str, args: list[str]) -> _DestToken:
    if fn is Fn.WILDCARD:
        if args == [""]:
            raise _err(ERR_NOT_ENOUGH_ARGS, token)
        if len(args) > 1:
            raise _err(ERR_TOO_MANY_ARGS, token)
        index = _go_int(args[0])
        if index is None:
            raise _err(ERR_INVALID_ARG, token)
        return _DestToken(fn, token, (index,))
    if fn is Fn.PARTITION or fn is Fn.RANDOM:
        if fn is Fn.RANDOM and len(args) != 1:
            raise _err(ERR_NOT_ENOUGH_ARGS, token)
        count = _go_int(args[0], high=INT32_MAX)
        indexes = [_go_int(a) for a in args[1:]]
        if count is None or None in indexes:
            raise _err(ERR_INVALID_ARG, token)
        return _DestToken(fn, token, tuple(i for i in indexes if i is not None), count)
    if fn is Fn.SPLIT:
        if len(args) < 2:
            raise _err(ERR_NOT_ENOUGH_ARGS, token)
        if len(args) > 2:
            raise _err(ERR_TOO_MANY_ARGS, token)
        index = _go_int(args[0])
        if index is None or " " in args[1] or TOKEN_SEPARATOR in args[1]:
            raise _err(ERR_INVALID_ARG, token)
        return _DestToken(fn, token, (index,), delimiter=args[1])
    return _index_and_int(fn, token, args)


def _parse_dest_token(token: str) -> _DestToken:
    """``indexPlaceHolders``: what one destination token asks for."""
    if len(token) > 1 and token[0] == "$":
        index = _go_int(token[1:], trim=False)
        if index is None:  # other things use tokens starting with $: a literal then
            return _DestToken(Fn.LITERAL, token)
        return _DestToken(Fn.WILDCARD, token, (index,))
    if _is_mustache(token):
        for fn in _PARSE_ORDER:
            args = _function_args(fn, token)
            if args is not None:
                return _parse_function(fn, token, args)
        raise _err(ERR_UNKNOWN_FUNCTION, token)
    return _DestToken(Fn.LITERAL, token)


def _subject_info(subject: str) -> tuple[bool, list[str], int, bool]:
    """Valid (no empty token, nothing after ``>``), tokens, number of ``*``, ends in ``>``."""
    if not subject:
        return False, [], 0, False
    tokens = subject.split(TOKEN_SEPARATOR)
    pwcs, fwc = 0, False
    for token in tokens:
        if not token or fwc:
            return False, [], 0, False
        if token == FULL_WILDCARD:
            fwc = True
        elif token == PARTIAL_WILDCARD:
            pwcs += 1
    return True, tokens, pwcs, fwc


def _fnv1a32(data: bytes) -> int:
    h = FNV32_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV32_PRIME) & UINT32_MASK
    return h


def _split_at(token: str, position: int) -> str:
    if 0 < position < len(token):
        return f"{token[:position]}.{token[position:]}"
    return token


def _slice_from_left(token: str, size: int) -> str:
    if not 0 < size < len(token):
        return token
    return TOKEN_SEPARATOR.join(token[i : i + size] for i in range(0, len(token), size))


def _slice_from_right(token: str, size: int) -> str:
    if not 0 < size < len(token):
        return token
    head = len(token) % size
    parts = [token[:head]] if head else []
    parts += [token[i : i + size] for i in range(head, len(token), size)]
    return TOKEN_SEPARATOR.join(parts)


def _split(token: str, delimiter: str) -> str:
    """nats-server's split: the pieces joined by ``.``, with its rule for empty pieces (a
    separator goes before a non-empty piece unless only the first piece came before it and
    was empty)."""
    pieces = token.split(delimiter) if delimiter else list(token)
    out: list[str] = []
    for j, piece in enumerate(pieces):
        out.append(piece)
        if j < len(pieces) - 1 and pieces[j + 1] and not (j == 0 and not piece):
            out.append(TOKEN_SEPARATOR)
    return "".join(out)


Pick = Callable[[int], int]  # a number in [0, n) for random(n)


def seeded_pick(seed: int) -> Pick:
    """A reproducible stream of picks from ``seed`` (splitmix64): what the state machine uses
    for ``random()``, seeded from the log, so every replica draws the same numbers."""
    state = seed & _U64_MASK

    def pick(n: int) -> int:
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & _U64_MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64_MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64_MASK
        return (z ^ (z >> 31)) % n

    return pick


def _no_pick(n: int) -> int:
    raise ValueError("a transform with random() needs the caller's pick")


@dataclass(frozen=True, slots=True)
class SubjectTransform:
    src: str
    dest: str
    _src_tokens: tuple[str, ...]
    _dest: tuple[_DestToken, ...]

    @classmethod
    def compile(cls, src: str, dest: str) -> SubjectTransform | None:
        """``NewSubjectTransform``: None for an empty ``dest`` (no transform); an empty ``src``
        is ``>``. Raises TransformError with nats-server's text."""
        if not dest:
            return None
        src = src or FULL_WILDCARD
        src_ok, src_tokens, pwcs, src_fwc = _subject_info(src)
        dest_ok, dest_tokens, dest_pwcs, dest_fwc = _subject_info(dest)
        if not src_ok or not dest_ok or dest_pwcs > 0 or src_fwc != dest_fwc:
            raise TransformError(ERR_BAD_SUBJECT)
        parsed = [_parse_dest_token(token) for token in dest_tokens]
        # wildcard number (1-based) -> its token position in the source
        positions = [i for i, token in enumerate(src_tokens) if token == PARTIAL_WILDCARD]
        compiled: list[_DestToken] = []
        for part in parsed:
            if part.fn is Fn.LITERAL or part.fn is Fn.RANDOM:
                compiled.append(part)
            elif pwcs > 0 or src_fwc:
                for number in part.indexes:
                    if number > pwcs:
                        raise _err(ERR_INDEX_OUT_OF_RANGE, f"{part.text}: [{number}]")
                at = tuple(positions[n - 1] if 1 <= n <= pwcs else 0 for n in part.indexes)
                compiled.append(_DestToken(part.fn, part.text, at, part.number, part.delimiter))
            elif part.fn is Fn.PARTITION:  # without wildcards: a hash of the whole subject
                compiled.append(_DestToken(part.fn, part.text, (), part.number))
            else:
                raise _err(ERR_INDEX_OUT_OF_RANGE, part.text)
        return cls(src, dest, tuple(src_tokens), tuple(compiled))

    def match(self, subject: str, pick: Pick = _no_pick) -> str | None:
        """The transformed subject, or None when ``subject`` is not a valid literal subject or
        does not match ``src`` (callers then keep it unchanged, as nats-server does)."""
        if self.src == FULL_WILDCARD and self.dest == FULL_WILDCARD:
            return subject
        tokens = subject.split(TOKEN_SEPARATOR)
        if any(not t or t in (PARTIAL_WILDCARD, FULL_WILDCARD) for t in tokens):
            return None
        if self.src != FULL_WILDCARD and not subject_matches(self.src, subject):
            return None
        return self._apply(tokens, pick)

    def _apply(self, tokens: list[str], pick: Pick) -> str:
        out: list[str] = []
        for part in self._dest:
            out.append(self._token(part, tokens, pick))
        if self._dest[-1].fn is Fn.LITERAL and self._dest[-1].text == FULL_WILDCARD:
            # ">" takes every source token from the source's ">" on
            out[-1] = TOKEN_SEPARATOR.join(tokens[len(self._src_tokens) - 1 :])
        return TOKEN_SEPARATOR.join(out)

    @staticmethod
    def _token(part: _DestToken, tokens: list[str], pick: Pick) -> str:
        fn = part.fn
        if fn is Fn.LITERAL:
            return part.text
        if fn is Fn.PARTITION:
            if part.indexes:
                key = "".join(tokens[i] for i in part.indexes)
            else:
                key = TOKEN_SEPARATOR.join(tokens)
            buckets = part.number & UINT32_MASK
            return str(_fnv1a32(key.encode()) % buckets) if buckets else "0"
        if fn is Fn.RANDOM:
            return str(pick(part.number)) if part.number > 0 else "0"
        index = part.indexes[0]
        if fn is Fn.WILDCARD:
            return tokens[index] if index < len(tokens) else ""
        source = tokens[index]
        if fn is Fn.SPLIT_FROM_LEFT:
            return _split_at(source, part.number)
        if fn is Fn.SPLIT_FROM_RIGHT:
            return _split_at(source, len(source) - part.number) if part.number > 0 else source
        if fn is Fn.SLICE_FROM_LEFT:
            return _slice_from_left(source, part.number)
        if fn is Fn.SLICE_FROM_RIGHT:
            return _slice_from_right(source, part.number)
        if fn is Fn.SPLIT:
            return _split(source, part.delimiter)
        if fn is Fn.LEFT:
            return source[: part.number] if 0 < part.number < len(source) else source
        return source[len(source) - part.number :] if 0 < part.number < len(source) else source


def validate_mapping(src: str, dest: str) -> None:
    """``ValidateMapping``: the check a stream's ``subject_transform`` destination gets; raises
    TransformError with nats-server's text. (The source's list of known functions lacks
    ``left``/``right``; the v2.15.1 binary accepts them, and so does jetraft.)"""
    if not dest:
        return
    after_fwc = False
    for token in dest.split(TOKEN_SEPARATOR):
        if not token or after_fwc:
            raise _err(ERR_INVALID_TRANSFORM, token)
        if _is_mustache(token):
            if not any(pattern.search(token) for pattern in _PATTERNS.values()):
                raise _err(ERR_UNKNOWN_FUNCTION, token)
            continue
        if token == FULL_WILDCARD:
            after_fwc = True
        elif any(c in token for c in "\t\n\f\r "):
            raise TransformError(ERR_INVALID_TRANSFORM)
    SubjectTransform.compile(src, dest)
