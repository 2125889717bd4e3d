"""Where a new consumer starts in its stream: its deliver policy applied to the stream's state.

The choice is nats-server's selectStartingSeqNo. It runs when the create entry is applied, so
every replica chooses against the same stream state (the stream's entries before it in the log):

* ``all``: the stream's first seq; ``new``: one past its last seq;
* ``last``: the last message (the last one matching any filter, when filtered);
* ``by_start_sequence``: ``opt_start_seq`` (raised to the first seq, never lowered);
* ``by_start_time``: the first message stored at or after ``opt_start_time``;
* ``last_per_subject``: the last message of every matching subject, in seq order (a skip list),
  then whatever is published after the consumer was created.

A start past the stream's end is brought back to ``last_seq + 1`` (unless it came from
``opt_start_seq``), and one below the first live message is raised to it.

Must never: read clocks (a start time comes from the config).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.consumer.config import ConsumerConfig
from engine.consumer.filters import last_matching, last_per_subject
from engine.consumer.messages import StreamMessages


@dataclass(frozen=True, slots=True)
class StartPosition:
    """The first stream seq to consider, and for ``last_per_subject`` the skip list: the seqs to
    deliver first, after which delivery resumes above ``resume_seq``."""

    start_seq: int
    skip_seqs: tuple[int, ...] = ()
    resume_seq: int = 0


def starting_position(config: ConsumerConfig, stream: StreamMessages) -> StartPosition:
    first, last = stream.first_seq, stream.last_seq
    policy = config.deliver_policy
    skip: tuple[int, ...] = ()
    resume = 0
    if policy == "by_start_sequence":
        start = config.opt_start_seq
    elif policy == "all":
        start = first
    elif policy == "last":
        start = last_matching(stream, config.filters) if config.filters else last
    elif policy == "last_per_subject":
        skip = tuple(last_per_subject(stream, config.filters))
        resume = last
        start = skip[0] if skip else last
    elif policy == "by_start_time":
        start = stream.seq_for_time(config.opt_start_time_ns) or last + 1
    else:  # new
        start = last + 1
    if policy != "by_start_sequence" and start > last:
        start = last + 1
    elif start < first:
        start = first
    return StartPosition(max(start, 1), skip, resume)
