"""Prefill forwards from request traces: a discrete-event simulation of SGLang's scheduler.

* `settings.py`   `SchedulerSettings`, the plain frozen settings (SGLang names, units);
* `cache.py`      the prefix cache over `hash_ids`;
* `arrivals.py`   requests in arrival order from the trace stream;
* `simulation.py` the event loop (`event_loop_normal`) as a Python generator: the one statement
                  of the packing (`PrefillAdder`), running-batch and decode rules; `summary.py` what it saw;
* `kernel.py`     the same loop compiled by numba (`cpbcg[fast]`), run without a prefix cache,
                  expression for expression (tests/test_scheduler_kernel.py holds the two together).

docs/scheduler.md states the model, each rule with the SGLang code it follows.
"""

from cpbcg.planner.scheduler.cache import PrefixCache, make_cache
from cpbcg.planner.scheduler.settings import SchedulerSettings
from cpbcg.planner.scheduler.simulation import BATCHES_PER_CHUNK, Simulation
from cpbcg.planner.scheduler.summary import SimulationSummary, backlog_fraction

__all__ = [
    "BATCHES_PER_CHUNK", "PrefixCache", "SchedulerSettings", "Simulation", "SimulationSummary", "backlog_fraction",
    "make_cache",
]
