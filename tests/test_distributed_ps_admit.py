"""The parameter server's admission rule (``may_pull``) and the ``admit`` hook of ``schedule`` (Lab 11's
exercise 5 plugs a student's rule in there).

Oracles: SSP's definition written out (c − min(clocks) ≤ s; None: no bound), and the schedule without the hook.
"""

from __future__ import annotations

import pytest

from mlsys_lib.distributed.param_server import PSConfig, may_pull, schedule


@pytest.mark.parametrize("clock, clocks, staleness, expected", [
    (0, (0, 0, 0), 0, True),  # BSP at the start
    (1, (1, 0, 1), 0, False),  # BSP waits for the slowest
    (3, (3, 1, 2), 2, True),  # exactly s ahead of the slowest: allowed
    (4, (4, 1, 2), 2, False),  # s + 1 ahead: waits
    (9, (9, 0, 0), None, True),  # ASP never waits
])
def test_may_pull_is_the_ssp_bound(clock, clocks, staleness, expected):
    assert may_pull(clock, clocks, staleness) is expected


def test_schedule_uses_the_admit_hook_with_none_for_asp():
    calls = []

    def spy(clock, clocks, staleness):
        calls.append((clock, clocks, staleness))
        return True

    config = PSConfig(num_workers=3, mode="asp", steps=4, slowdown={0: 3.0})
    plan = schedule(config, 20, admit=spy)
    assert plan.events == schedule(config, 20).events
    assert len(calls) == 3 * 4 and all(isinstance(c[1], tuple) and c[2] is None for c in calls)


def test_a_stricter_admit_rule_makes_workers_wait_longer():
    """BSP's rule plugged into an SSP(2) run gives BSP's schedule, staleness 0 everywhere."""
    config = PSConfig(num_workers=3, mode="ssp", staleness=2, steps=6, slowdown={1: 4.0})
    strict = schedule(config, 20, admit=lambda clock, clocks, s: clock - min(clocks) <= 0)
    bsp = schedule(PSConfig(num_workers=3, mode="bsp", steps=6, slowdown={1: 4.0}), 20)
    assert strict.events == bsp.events
    assert max(r.staleness for r in schedule(config, 20).staleness) == 2
    assert max(r.staleness for r in strict.staleness) == 0
