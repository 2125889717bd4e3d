"""Raft for jetraft: replicated groups over pysyncobj, driven on the node's event loop."""
