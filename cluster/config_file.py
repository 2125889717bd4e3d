"""Reads nats-server style configuration files (the subset jetraft uses).

The format: ``key: value``, ``key = value`` or ``key value``; blocks in ``{}``; arrays in ``[]``
separated by commas or newlines; ``#`` and ``//`` comments; quoted or bare strings; integers with
optional size suffixes (``1MB``, ``64K``); booleans (true/false/yes/no/on/off). Every map is a
``ConfMap`` that remembers the line each key was written on, so the schema check
(cluster/config_schema.py) can name the line of a key it refuses.
"""

from __future__ import annotations

import re
from typing import Any

_SIZE = {"k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}
_SIZE.update({"ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3})
_NUM = re.compile(r"^(-?\d+)([a-zA-Z]*)$")
_FLOAT = re.compile(r"^-?\d+\.\d+$")
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


class ConfigError(ValueError):
    pass


class ConfMap(dict[str, Any]):
    """A parsed block: a dict whose keys remember the line they were written on."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[str, int] = {}
        self.line = 0  # where the block itself opened (0: the file)

    def line_of(self, key: str) -> int:
        return self.lines.get(key, self.line)


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def line(self) -> int:
        return self.s.count("\n", 0, self.i) + 1

    def error(self, msg: str) -> ConfigError:
        # nats-server's words for a file it cannot parse (a key it does not know is the schema
        # check's "config line N: unknown field")
        return ConfigError(f"Parse error on line {self.line()}: {msg}")

    def skip(self, newlines: bool = True) -> None:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t\r" or (newlines and c in "\n,;"):
                self.i += 1
            elif c == "#" or s.startswith("//", self.i):
                while self.i < len(s) and s[self.i] != "\n":
                    self.i += 1
            else:
                return

    def parse_map(self, closing: str | None) -> ConfMap:
        out = ConfMap()
        out.line = self.line()
        while True:
            self.skip()
            if self.i >= len(self.s):
                if closing:
                    raise self.error(f"missing '{closing}'")
                return out
            if closing and self.s[self.i] == closing:
                self.i += 1
                return out
            key_line = self.line()
            key = self.parse_key()
            out.lines[key] = key_line
            self.skip(newlines=False)
            if self.i < len(self.s) and self.s[self.i] in ":=":
                self.i += 1
                self.skip(newlines=False)
            elif self.s.startswith("\n", self.i) and self._block_follows():
                self.skip()  # `websocket` then `{` on the next line: nats-server reads a block
            out[key] = self.parse_value()

    def _block_follows(self) -> bool:
        here = self.i
        self.skip()
        follows = self.s.startswith("{", self.i)
        self.i = here
        return follows

    def parse_key(self) -> str:
        if self.s[self.i] in "\"'":
            return self.parse_quoted()
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in " \t\r\n:={}[]":
            self.i += 1
        if start == self.i:
            raise self.error(f"unexpected {self.s[self.i]!r}")
        return self.s[start : self.i]

    def parse_quoted(self) -> str:
        quote = self.s[self.i]
        end = self.s.find(quote, self.i + 1)
        if end < 0:
            raise self.error("unterminated string")
        value = self.s[self.i + 1 : end]
        self.i = end + 1
        return value

    def parse_value(self) -> Any:
        if self.i >= len(self.s):
            raise self.error("missing value")
        c = self.s[self.i]
        if c == "{":
            self.i += 1
            return self.parse_map("}")
        if c == "[":
            self.i += 1
            items: list[Any] = []
            while True:
                self.skip()
                if self.i >= len(self.s):
                    raise self.error("missing ']'")
                if self.s[self.i] == "]":
                    self.i += 1
                    return items
                items.append(self.parse_value())
        if c in "\"'":
            return self.parse_quoted()
        if c in ":=":  # a second separator (`port: : 1`): nats-server stops there too
            raise self.error(f"unexpected {c!r}")
        start = self.i
        s = self.s
        while self.i < len(s) and s[self.i] not in "\r\n,;]}#":
            # "//" opens a comment only after whitespace, so nats://host:port stays a value
            if s.startswith("//", self.i) and s[self.i - 1] in " \t":
                break
            self.i += 1
        return _scalar(s[start : self.i].strip())


def _scalar(raw: str) -> Any:
    if raw.lower() in _BOOLS:
        return _BOOLS[raw.lower()]
    m = _NUM.match(raw)
    if m:
        unit = m.group(2).lower()
        if not unit:
            return int(m.group(1))
        if unit in _SIZE:
            return int(m.group(1)) * _SIZE[unit]
    if _FLOAT.match(raw):
        return float(raw)
    return raw


def parse_config(text: str) -> ConfMap:
    parser = _Parser(text)
    parser.skip()
    if not text.startswith("{", parser.i):
        return parser.parse_map(None)
    # the whole file in braces: nats-server reads JSON configuration files this way
    parser.i += 1
    conf = parser.parse_map("}")
    parser.skip()
    if parser.i < len(text):
        raise parser.error(f"unexpected {text[parser.i]!r} after the closing '}}'")
    return conf
