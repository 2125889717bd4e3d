"""Differential tests: the same scenario against nats-server and jetraft, compared after masking."""
