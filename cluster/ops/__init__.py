"""The operator side of jetraft: driving node processes from outside, as a user would.

Owns: process control shared by the ``jetraft cluster`` tool, the chaos harness, the tests and
the benchmarks (``process``), readiness probes (``probes``), single-server handles
(``servers``), and the ``jetraft cluster up|down|status|run`` tool itself (``plan``, ``status``,
``local_cluster``).
Must never: be imported by the node's own modules (only ``cluster/cli.py`` dispatches into it;
tests/test_architecture.py checks this), or import the server: nodes are separate processes.
"""
