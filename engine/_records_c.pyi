# The C form of engine.records' MSG encoder; present only in the native build (engine/_records_c.c).
from engine.store import StoredMsg

def append_msg(buf: bytearray, msg: StoredMsg, /) -> int: ...
