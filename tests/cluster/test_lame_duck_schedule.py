"""The lame duck's schedule for closing its clients (cluster/lame_duck.py), as a property."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.lame_duck import (
    CLOSE_PAUSE_MAX_S,
    LAME_DUCK_DURATION_MIN_S,
    LameDuckConfigError,
    LameDuckSettings,
    close_pauses,
)


@st.composite
def settings(draw: st.DrawFn) -> LameDuckSettings:
    duration = draw(st.floats(LAME_DUCK_DURATION_MIN_S, 3600.0))
    grace = draw(st.floats(0.0, duration, exclude_max=True))
    return LameDuckSettings(duration, grace)


@given(st.integers(0, 5000), settings(), st.integers(0, 2**32))
def test_the_pauses_spread_the_closes_over_what_the_grace_period_leaves(
    clients: int, lame: LameDuckSettings, seed: int
) -> None:
    pauses = close_pauses(clients, lame, random.Random(seed))
    assert len(pauses) == max(clients - 1, 0)  # none after the last client
    if not pauses:
        return
    share = min((lame.duration_s - lame.grace_period_s) / clients, CLOSE_PAUSE_MAX_S)
    assert all(share / 2 <= p <= share for p in pauses)
    # the closes end within the duration, whatever the draw
    assert lame.grace_period_s + sum(pauses) <= lame.duration_s


@pytest.mark.parametrize(
    ("duration", "grace"),
    [(LAME_DUCK_DURATION_MIN_S - 1, 0.0), (60.0, -1.0), (60.0, 60.0), (60.0, 61.0)],
)
def test_settings_nats_server_would_refuse_are_refused(duration: float, grace: float) -> None:
    with pytest.raises(LameDuckConfigError):
        LameDuckSettings(duration, grace)
