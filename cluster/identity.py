"""Who this server says it is: the nats-server version whose behaviour jetraft reproduces, the
protocol version, and jetraft's own version, as the client INFO and /varz both show them.

Must never: depend on anything but the standard library.
"""

from __future__ import annotations

import sys

VERSION = "2.15.1"  # the nats-server version whose behaviour jetraft reproduces
JETRAFT_VERSION = "0.1.0"
PROTO = 1
# nats-server's git_commit and go keys name the build: here jetraft's version and the Python
GIT_COMMIT = f"jetraft-{JETRAFT_VERSION}"
GO_VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"
