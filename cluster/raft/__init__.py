"""Raft for jetraft: replicated groups over pysyncobj, driven on the node's event loop.

The public interface: ``RaftGroup`` (one replicated log and its state machine callbacks),
``RaftDriver`` (ticks a node's groups and takes what peers send), ``NotLeaderError``, and the
two interfaces to the network in ``transport``. pysyncobj itself is behind ``adapter`` only.
"""

from cluster.raft.driver import RaftDriver
from cluster.raft.group import NotLeaderError, RaftGroup, RaftStatus
from cluster.raft.transport import RaftInbound, RaftTransport

__all__ = [
    "NotLeaderError",
    "RaftDriver",
    "RaftGroup",
    "RaftInbound",
    "RaftStatus",
    "RaftTransport",
]
