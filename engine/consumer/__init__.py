"""JetStream consumers as a deterministic, sans-I/O state machine.

A consumer's replicated state (what was delivered, what is pending acknowledgement, how often each
message was redelivered, the ack floor) changes only by applying entries of the stream's Raft log
(``entries.py``) through ``ConsumerSet.apply`` (``consumers.py``). Times come inside the entries,
never from a clock, so every replica that applies the same entries holds the same state and
reports the same ``digest()``. See docs/consumers.md.

Modules: ``limits`` (every bound and default), ``config`` (the consumer config), ``entries`` (log
entries and their binary encoding), ``messages`` (the view of the stream a consumer needs),
``filters`` (subject filters and counts), ``start`` (deliver policies), ``timers`` (ack wait and
backoff), ``pending`` (the pending set with its deadline index), ``results`` (what applying
returns), ``consumer`` (one consumer), ``consumers`` (all consumers of a stream), ``retention``
(interest and work-queue removal), ``snapshot`` and ``digest``.

Must never: read clocks, draw random numbers, do I/O, or import engine/stream.py.
"""
