"""NATS subjects: validity, wildcard matching and filter algebra.

Owns the rules of nats-server's sublist.go (``isValidSubject``, ``matchLiteral``,
``subjectsCollide``, ``subjectIsSubsetMatch``) so that every layer — SUB validation, stream
subject overlap checks, consumer filters, Direct Get ``last_by_subj`` with wildcards — agrees
with the reference server. ``*`` matches exactly one token, ``>`` one or more trailing tokens.
A ``*``/``>`` inside a longer token (``foo*``, ``a>b``) is a literal character.

Must never: do I/O, or hold state other than the bounded tokenization cache.
"""

from __future__ import annotations

from functools import lru_cache

TOKEN_SEPARATOR = "."
PARTIAL_WILDCARD = "*"
FULL_WILDCARD = ">"
WHITESPACE_CHARS = frozenset(" \t\r\n\f")
RESERVED_QUEUE_NAME = "_sys_"
FILTER_CACHE_ENTRIES_MAX = 8192


def tokenize(subject: str) -> list[str]:
    """Split a subject into its tokens (empty tokens are kept, as ``strings.Split`` does)."""
    return subject.split(TOKEN_SEPARATOR)


def _has_whitespace(text: str) -> bool:
    return not WHITESPACE_CHARS.isdisjoint(text)


def is_valid_subject(subject: str) -> bool:
    """nats-server ``isValidSubject``: the check SUB subjects and stream subjects go through."""
    if not subject or _has_whitespace(subject):
        return False
    tokens = subject.split(TOKEN_SEPARATOR)
    if "" in tokens:
        return False
    # ">" must be the whole last token; anywhere else it makes the subject invalid.
    return FULL_WILDCARD not in tokens or tokens.index(FULL_WILDCARD) == len(tokens) - 1


def is_valid_literal_subject(subject: str) -> bool:
    """Valid and without wildcard tokens (what a publish subject in a stream must be)."""
    return is_valid_subject(subject) and not has_wildcard(subject)


def has_wildcard(subject: str) -> bool:
    """True if a token is exactly ``*`` or ``>`` (``foo*`` is not a wildcard)."""
    if PARTIAL_WILDCARD not in subject and FULL_WILDCARD not in subject:
        return False
    tokens = subject.split(TOKEN_SEPARATOR)
    return PARTIAL_WILDCARD in tokens or FULL_WILDCARD in tokens


def is_valid_queue_name(q: str) -> bool:
    """A queue group name is any non-empty token free of whitespace."""
    return bool(q) and not _has_whitespace(q)


@lru_cache(maxsize=FILTER_CACHE_ENTRIES_MAX)
def _filter_plan(filter_: str) -> tuple[tuple[str, ...], bool, bool]:
    """(tokens before any '>', ends with '>', is literal) for a filter, cached: filters repeat."""
    tokens = filter_.split(TOKEN_SEPARATOR)
    if tokens[-1] == FULL_WILDCARD:
        head = tuple(tokens[:-1])
        return head, True, False
    literal = PARTIAL_WILDCARD not in tokens
    return tuple(tokens), False, literal


def subject_matches(filter: str, subject: str) -> bool:
    """Does the literal ``subject`` match ``filter``? A subject with an empty token matches
    nothing (nats-server drops such publishes). Wildcard tokens in ``subject`` are literal."""
    head, fwc, literal = _filter_plan(filter)
    if literal:
        return filter == subject
    tokens = subject.split(TOKEN_SEPARATOR)
    n_head = len(head)
    if fwc:
        if len(tokens) <= n_head:
            return False
    elif len(tokens) != n_head:
        return False
    if "" in tokens:
        return False
    for want, got in zip(head, tokens, strict=False):
        if want != got and want != PARTIAL_WILDCARD:
            return False
    return True


def subjects_overlap(a: str, b: str) -> bool:
    """Can some literal subject match both filters (nats-server ``subjectsCollide``)?"""
    if a == b:
        return True
    ta = a.split(TOKEN_SEPARATOR)
    tb = b.split(TOKEN_SEPARATOR)
    for i in range(max(len(ta), len(tb))):
        if i >= len(ta) or i >= len(tb):
            return False
        x, y = ta[i], tb[i]
        if x == FULL_WILDCARD or y == FULL_WILDCARD:
            return True
        if x == PARTIAL_WILDCARD or y == PARTIAL_WILDCARD:
            continue
        if x != y:
            return False
    return True


def is_subset(sub: str, sup: str) -> bool:
    """Is every subject matched by filter ``sub`` also matched by filter ``sup``?"""
    ts = sub.split(TOKEN_SEPARATOR)
    tp = sup.split(TOKEN_SEPARATOR)
    for i, s in enumerate(ts):
        if i >= len(tp):
            return False
        p = tp[i]
        if p == FULL_WILDCARD:
            return True
        if s == FULL_WILDCARD:
            return False
        if p == PARTIAL_WILDCARD:
            continue
        if s == PARTIAL_WILDCARD or s != p:
            return False
    return len(ts) == len(tp)
