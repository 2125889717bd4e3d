# The C form of protocol.parser's PUB/HPUB fast path; present only in the native build
# (protocol/_parser_c.c).
def scan_pub(
    buf: bytes, pos: int, with_headers: bool, max_payload: int, max_control_line: int, /
) -> tuple[str, str | None, bytes | None, bytes, int] | None: ...
