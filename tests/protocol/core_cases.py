"""Raw client byte streams and what nats-server v2.15.1 answers on one connection (probed).

Each case: (name, input, expected output, connection closed). Cases avoid anything that
depends on per-server values (INFO contents), except through INFO_CASES, whose expected output
is built from the INFO the server sent. Used by the unit tests (against the one-connection
test server) and by the differential test (against the real binary).
"""

from __future__ import annotations

from protocol.session import encode_info, order_info

Q = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
HDR = b"NATS/1.0\r\nA: b\r\n\r\n"
PERM_SYS = b'-ERR \'Permissions Violation for Subscription to "foo" using queue "_sys_"\'\r\n'

CASES: list[tuple[str, bytes, bytes, bool]] = [
    # --- CONNECT
    ("connect defaults verbose", b"CONNECT {}\r\nPING\r\n", b"+OK\r\nPONG\r\n", False),
    ("connect null", b"CONNECT null\r\nPING\r\n", b"+OK\r\nPONG\r\n", False),
    ("connect empty arg", b"CONNECT\r\nPING\r\n", b"", True),
    ("connect bad json", b"CONNECT {bad\r\nPING\r\n", b"", True),
    ("connect array", b"CONNECT []\r\nPING\r\n", b"", True),
    ("connect wrong type", b'CONNECT {"verbose":"x"}\r\nPING\r\n', b"", True),
    ("connect lang wrong type", b'CONNECT {"lang":5}\r\nPING\r\n', b"", True),
    ("connect echo int", b'CONNECT {"echo":1}\r\nPING\r\n', b"", True),
    ("connect proto float", b'CONNECT {"protocol":1.0}\r\nPING\r\n', b"", True),
    ("connect proto overflow", b'CONNECT {"protocol":99999999999999999999}\r\n', b"", True),
    ("connect import wrong", b'CONNECT {"verbose":false,"import":5}\r\nPING\r\n', b"", True),
    ("connect key case", b'CONNECT {"VERBOSE":false}\r\nPING\r\n', b"PONG\r\n", False),
    (
        "connect nulls",
        b'CONNECT {"verbose":null,"name":null}\r\nPING\r\n',
        b"+OK\r\nPONG\r\n",
        False,
    ),
    (
        "connect unknown field",
        b'CONNECT {"verbose":false,"x":{"a":[1]}}\r\nPING\r\n',
        b"PONG\r\n",
        False,
    ),
    (
        "connect invalid utf8",
        b'CONNECT {"verbose":false,"name":"\xff"}\r\nPING\r\n',
        b"PONG\r\n",
        False,
    ),
    (
        "connect proto 2",
        b'CONNECT {"protocol":2}\r\nPING\r\n',
        b"-ERR 'invalid client protocol'\r\n",
        True,
    ),
    (
        "connect proto -1",
        b'CONNECT {"protocol":-1}\r\n',
        b"-ERR 'invalid client protocol'\r\n",
        True,
    ),
    (
        "connect no_responders without headers",
        b'CONNECT {"no_responders":true}\r\nPING\r\n',
        b"-ERR 'no responders requires headers support'\r\n",
        True,
    ),
    (
        "connect proto checked before no_responders",
        b'CONNECT {"verbose":false,"no_responders":true,"protocol":2}\r\n',
        b"-ERR 'invalid client protocol'\r\n",
        True,
    ),
    (
        "connect account",
        b'CONNECT {"account":"x"}\r\n',
        b"-ERR 'Authorization Violation'\r\n",
        True,
    ),
    (
        "connect new_account",
        b'CONNECT {"new_account":true}\r\n',
        b"-ERR 'Authorization Violation'\r\n",
        True,
    ),
    (
        "connect empty account",
        b'CONNECT {"verbose":false,"account":""}\r\nPING\r\n',
        b"PONG\r\n",
        False,
    ),
    (
        "second connect merges options",
        b'CONNECT {"verbose":false}\r\nCONNECT {"pedantic":false}\r\nPING\r\n',
        b"PONG\r\n",
        False,
    ),
    (
        "second connect drops subscriptions",
        b'CONNECT {"verbose":false}\r\nSUB foo 1\r\n'
        b'CONNECT {"verbose":false}\r\nPUB foo 1\r\nx\r\nPING\r\n',
        b"PONG\r\n",
        False,
    ),
    # --- before CONNECT: defaults apply (verbose, pedantic), headers are off
    (
        "ops before connect",
        b"SUB x 1\r\nPUB x 2\r\nhi\r\nPING\r\n",
        b"+OK\r\n+OK\r\nMSG x 1 2\r\nhi\r\nPONG\r\n",
        False,
    ),
    (
        "sub before connect survives connect",
        b'SUB foo 1\r\nCONNECT {"verbose":false}\r\nPUB foo 1\r\nx\r\nPING\r\n',
        b"+OK\r\nMSG foo 1 1\r\nx\r\nPONG\r\n",
        False,
    ),
    ("hpub before connect", b"SUB foo 1\r\nHPUB foo 18 19\r\n" + HDR + b"x\r\n", b"+OK\r\n", True),
    # --- PUB / HPUB
    (
        "pub delivered",
        Q + b"SUB foo 1\r\nPUB foo 2\r\nxy\r\nPING\r\n",
        b"MSG foo 1 2\r\nxy\r\nPONG\r\n",
        False,
    ),
    (
        "pub reply",
        Q + b"SUB foo 1\r\nPUB foo r 0\r\n\r\nPING\r\n",
        b"MSG foo 1 r 0\r\n\r\nPONG\r\n",
        False,
    ),
    (
        "pub bare nl control line",
        Q + b"SUB foo 1\nPUB foo 2\nxy\r\nPING\r\n",
        b"MSG foo 1 2\r\nxy\r\nPONG\r\n",
        False,
    ),
    (
        "pub tabs",
        Q + b"SUB foo 1\r\nPUB\tfoo\t\t1\r\nx\r\nPING\r\n",
        b"MSG foo 1 1\r\nx\r\nPONG\r\n",
        False,
    ),
    (
        "pub trailing space",
        Q + b"SUB foo 1\r\nPUB foo 1 \r\nx\r\nPING\r\n",
        b"MSG foo 1 1\r\nx\r\nPONG\r\n",
        False,
    ),
    ("pub no size", Q + b"PUB foo\r\nPING\r\n", b"", True),
    ("pub size junk", Q + b"PUB foo abc\r\nPING\r\n", b"", True),
    ("pub size 10 digits", Q + b"PUB foo 1234567890\r\nPING\r\n", b"", True),
    ("pub too many args", Q + b"PUB foo bar baz 1\r\nx\r\nPING\r\n", b"", True),
    ("pub no args", Q + b"PUB\r\nPING\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", True),
    ("pub max payload", Q + b"PUB foo 1048577\r\n", b"-ERR 'Maximum Payload Violation'\r\n", True),
    (
        "pub payload too long",
        Q + b"PUB foo 2\r\nxyz\r\nPING\r\n",
        b"-ERR 'Unknown Protocol Operation'\r\n",
        True,
    ),
    (
        "pub payload bare nl",
        Q + b"PUB foo 2\r\nxy\nPING\r\n",
        b"-ERR 'Unknown Protocol Operation'\r\n",
        True,
    ),
    (
        "hpub delivered",
        Q + b"SUB foo 1\r\nHPUB foo r 18 19\r\n" + HDR + b"x\r\nPING\r\n",
        b"HMSG foo 1 r 18 19\r\n" + HDR + b"x\r\nPONG\r\n",
        False,
    ),
    (
        "hpub hdr 0 is a MSG",
        Q + b"SUB foo 1\r\nHPUB foo 0 1\r\nx\r\nPING\r\n",
        b"MSG foo 1 1\r\nx\r\nPONG\r\n",
        False,
    ),
    (
        "hpub garbage header relayed",
        Q + b"SUB foo 1\r\nHPUB foo 3 3\r\nXYZ\r\nPING\r\n",
        b"HMSG foo 1 3 3\r\nXYZ\r\nPONG\r\n",
        False,
    ),
    ("hpub hdr > total", Q + b"HPUB foo 5 3\r\nabc\r\nPING\r\n", b"", True),
    (
        "hpub max payload",
        Q + b"HPUB foo 10 1048577\r\n",
        b"-ERR 'Maximum Payload Violation'\r\n",
        True,
    ),
    (
        "hpub headers missing",
        b'CONNECT {"verbose":false}\r\nHPUB foo 18 19\r\n' + HDR + b"x\r\n",
        b"",
        True,
    ),
    (
        "hpub headers false",
        b'CONNECT {"verbose":false,"headers":false}\r\nHPUB foo 0 1\r\nx\r\n',
        b"",
        True,
    ),
    # --- pedantic / verbose publish checks
    (
        "pedantic wildcard publish still delivered",
        b"CONNECT {}\r\nSUB > 1\r\nPUB foo.* 1\r\nx\r\nPING\r\n",
        b"+OK\r\n+OK\r\n-ERR 'Invalid Publish Subject'\r\n+OK\r\nMSG foo.* 1 1\r\nx\r\nPONG\r\n",
        False,
    ),
    (
        "pedantic empty token publish",
        b"CONNECT {}\r\nSUB > 1\r\nPUB foo..bar 1\r\nx\r\nPING\r\n",
        b"+OK\r\n+OK\r\n-ERR 'Invalid Publish Subject'\r\n+OK\r\nPONG\r\n",
        False,
    ),
    (
        "empty token publishes dropped with +OK",
        b'CONNECT {"pedantic":false}\r\nSUB > 1\r\n'
        b"PUB foo..bar 1\r\nx\r\nPUB .foo 1\r\ny\r\nPUB foo. 1\r\nz\r\nPING\r\n",
        b"+OK\r\n+OK\r\n+OK\r\n+OK\r\n+OK\r\nPONG\r\n",
        False,
    ),
    (
        "pedantic reply not checked",
        b"CONNECT {}\r\nSUB > 1\r\nPUB foo r.* 1\r\nx\r\nPING\r\n",
        b"+OK\r\n+OK\r\n+OK\r\nMSG foo 1 r.* 1\r\nx\r\nPONG\r\n",
        False,
    ),
    (
        "reserved subjects and replies",
        b'CONNECT {"pedantic":false}\r\nSUB > 1\r\nPUB _GR_.x 1\r\nx\r\nPUB $NRG.x 1\r\ny\r\n'
        b"PUB a _R_.x 1\r\nz\r\nPUB a $JS.ACK.x 1\r\nw\r\nPUB a _GR_.x 1\r\nv\r\nPING\r\n",
        b"+OK\r\n+OK\r\n"
        b"-ERR 'Permissions Violation for Publish to \"_GR_.x\"'\r\n"
        b"-ERR 'Permissions Violation for Publish to \"$NRG.x\"'\r\n"
        b"-ERR 'Permissions Violation for Publish with Reply of \"_R_.x\"'\r\n"
        b"-ERR 'Permissions Violation for Publish with Reply of \"$JS.ACK.x\"'\r\n"
        b"-ERR 'Permissions Violation for Publish with Reply of \"_GR_.x\"'\r\n"
        b"PONG\r\n",
        False,
    ),
    (
        "reserved exact prefixes",
        b'CONNECT {"pedantic":false}\r\nSUB > 1\r\nPUB _GR_. 1\r\nx\r\nPUB $NRG. 1\r\ny\r\n'
        b"PUB a _R_. 1\r\nz\r\nPUB a $JS.ACK. 1\r\nw\r\nPING\r\n",
        b"+OK\r\n+OK\r\n+OK\r\n"  # '_GR_.' is allowed, but has an empty last token
        b"-ERR 'Permissions Violation for Publish to \"$NRG.\"'\r\n"
        b"-ERR 'Permissions Violation for Publish with Reply of \"_R_.\"'\r\n"
        b"+OK\r\nMSG a 1 $JS.ACK. 1\r\nw\r\nPONG\r\n",
        False,
    ),
    # --- SUB / UNSUB
    (
        "sub verbose and invalid subject",
        b"CONNECT {}\r\nSUB foo 1\r\nSUB foo..bar 1\r\nSUB a..b 2\r\nPING\r\n",
        b"+OK\r\n+OK\r\n+OK\r\n-ERR 'Invalid Subject'\r\nPONG\r\n",
        False,
    ),
    (
        "sub invalid fwc",
        Q + b"SUB foo.>.bar 1\r\nPING\r\n",
        b"-ERR 'Invalid Subject'\r\nPONG\r\n",
        False,
    ),
    ("sub _sys_ queue", Q + b"SUB foo _sys_ 1\r\nPING\r\n", PERM_SYS + b"PONG\r\n", False),
    (
        "sub _sys_ checked before subject",
        Q + b"SUB foo..bar _sys_ 1\r\nPING\r\n",
        b'-ERR \'Permissions Violation for Subscription to "foo..bar" using queue "_sys_"\'\r\n'
        b"PONG\r\n",
        False,
    ),
    (
        "sub quoting",
        Q + b'SUB a"b _sys_ 1\r\nSUB a\xff _sys_ 2\r\nPING\r\n',
        b'-ERR \'Permissions Violation for Subscription to "a\\"b" using queue "_sys_"\'\r\n'
        b'-ERR \'Permissions Violation for Subscription to "a\\xff" using queue "_sys_"\'\r\n'
        b"PONG\r\n",
        False,
    ),
    ("sub missing sid", Q + b"SUB foo\r\nPING\r\n", b"", True),
    ("sub too many args", Q + b"SUB foo q 1 x\r\nPING\r\n", b"", True),
    (
        "sub duplicate sid ignored",
        Q + b"SUB foo 1\r\nSUB bar 1\r\nPUB bar 1\r\nx\r\nPUB foo 1\r\ny\r\nPING\r\n",
        b"MSG foo 1 1\r\ny\r\nPONG\r\n",
        False,
    ),
    (
        "sub duplicate sid bad subject",
        Q + b"SUB foo 1\r\nSUB foo..bar 1\r\nPING\r\n",
        b"PONG\r\n",
        False,
    ),
    ("unsub no args", Q + b"UNSUB\r\nPING\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", True),
    ("unsub too many", Q + b"UNSUB 1 2 3\r\nPING\r\n", b"", True),
    (
        "unsub unknown verbose",
        b"CONNECT {}\r\nUNSUB 9\r\nUNSUB 9 abc\r\nPING\r\n",
        b"+OK\r\n+OK\r\n+OK\r\nPONG\r\n",
        False,
    ),
    (
        "unsub junk max removes",
        Q + b"SUB foo 1\r\nUNSUB 1 abc\r\nPUB foo 1\r\nx\r\nPING\r\n",
        b"PONG\r\n",
        False,
    ),
    (
        "unsub max 0 removes",
        Q + b"SUB foo 1\r\nUNSUB 1 0\r\nPUB foo 1\r\nx\r\nPING\r\n",
        b"PONG\r\n",
        False,
    ),
    (
        "unsub max 1",
        Q + b"SUB foo 1\r\nUNSUB 1 1\r\nPUB foo 1\r\nx\r\nPUB foo 1\r\ny\r\nPING\r\n",
        b"MSG foo 1 1\r\nx\r\nPONG\r\n",
        False,
    ),
    (
        "unsub max already reached",
        Q + b"SUB foo 1\r\nUNSUB 1 2\r\nPUB foo 1\r\nx\r\nUNSUB 1 1\r\nPUB foo 1\r\ny\r\nPING\r\n",
        b"MSG foo 1 1\r\nx\r\nPONG\r\n",
        False,
    ),
    (
        "auto-unsubscribed sid can be reused",
        Q + b"SUB foo 1\r\nUNSUB 1 1\r\nPUB foo 1\r\nx\r\nSUB bar 1\r\nPUB bar 1\r\ny\r\nPING\r\n",
        b"MSG foo 1 1\r\nx\r\nMSG bar 1 1\r\ny\r\nPONG\r\n",
        False,
    ),
    (
        "echo false",
        b'CONNECT {"verbose":false,"echo":false}\r\nSUB foo 1\r\nPUB foo 1\r\nx\r\nPING\r\n',
        b"PONG\r\n",
        False,
    ),
    (
        "no responders",
        b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\n'
        b"SUB r 1\r\nPUB nobody r 0\r\n\r\nPING\r\n",
        b"HMSG r 1 38 38\r\nNATS/1.0 503\r\nNats-Subject: nobody\r\n\r\n\r\nPONG\r\n",
        False,
    ),
    # --- PING / misc ops
    (
        "ping junk",
        b"PING foo bar\r\nPINGX\r\nping\r\nPING\n",
        b"PONG\r\nPONG\r\nPONG\r\nPONG\r\n",
        False,
    ),
    ("pong and ok ignored", b"PONG\r\n+OK\r\n+OKX\r\nPING\r\n", b"PONG\r\n", False),
    ("info from client ignored", Q + b"INFO {}\r\nPING\r\n", b"PONG\r\n", False),
    ("info from client bad", Q + b"INFO x\r\nPING\r\n", b"", True),
    ("-ERR from client", Q + b"-ERR 'x'\r\nPING\r\n", b"", True),
    ("unknown op", Q + b"FOO\r\nPING\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", True),
    ("empty line", Q + b"\r\nPING\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", True),
    ("leading space", Q + b" PING\r\n", b"-ERR 'Unknown Protocol Operation'\r\n", True),
    (
        "msg from client",
        Q + b"MSG foo 1 1\r\nx\r\nPING\r\n",
        b"-ERR 'Unknown Protocol Operation'\r\n",
        True,
    ),
    (
        "route op from client",
        Q + b"RS+ foo\r\nPING\r\n",
        b"-ERR 'Unknown Protocol Operation'\r\n",
        True,
    ),
    # --- control line limit
    ("arg 4096", Q + b"PUB " + b"a" * 4094 + b" 0\r\n\r\nPING\r\n", b"PONG\r\n", False),
    (
        "arg 4097",
        Q + b"PUB " + b"a" * 4095 + b" 0\r\n\r\nPING\r\n",
        b"-ERR 'maximum control line exceeded'\r\n",
        True,
    ),
    (
        "connect too long",
        Q + b"CONNECT {" + b" " * 5000 + b"}\r\nPING\r\n",
        b"-ERR 'maximum control line exceeded'\r\n",
        True,
    ),
    ("ping long line", Q + b"PING " + b"a" * 5000 + b"\r\n", b"PONG\r\n", False),
]

# (name, input, output before the INFO, output after it, closed): the INFO between them is the
# server's own INFO plus connect_info/remote_account.
INFO_CASES: list[tuple[str, bytes, bytes, bytes, bool]] = [
    (
        "async info after first pong",
        b'CONNECT {"protocol":1}\r\nPING\r\nPING\r\n',
        b"+OK\r\nPONG\r\n",
        b"PONG\r\n",
        False,
    ),
    (
        "ping before connect gets no info",
        b'PING\r\nCONNECT {"verbose":false,"protocol":1}\r\nPING\r\n',
        b"PONG\r\nPONG\r\n",
        b"",
        False,
    ),
]
NO_INFO_CASES: list[tuple[str, bytes, bytes, bool]] = [
    (
        "protocol 0 never gets info",
        b'CONNECT {"verbose":false}\r\nPING\r\nCONNECT {"verbose":false,"protocol":1}\r\nPING\r\n',
        b"PONG\r\nPONG\r\n",
        False,
    ),
]


def connect_info_line(info: dict[str, object]) -> bytes:
    extended = dict(info)
    extended["connect_info"] = True
    extended["remote_account"] = "$G"
    return encode_info(order_info(extended))
