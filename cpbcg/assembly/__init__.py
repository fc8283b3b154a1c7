"""The assembly: where an engine's readers meet the engine-neutral core (`cpbcg.planner`).

Above the engines (`cpbcg.engines`) and below the API: it knows every trace format (the core's
and the engine's logs, `registry.py`), turns a trace into forwards (`sources.py`: a batch trace as
written, a request trace through the scheduler simulation, a server log's forward sizes as a
bound; `embedded.py`: the default workload), fans traces out over workers (`traffic.py`), and runs
a plan (`plan.py`) or a watch window (`window.py`) with the engine's launches, flags and log
verdicts. The core below knows layouts, capacities, selection, the optimiser and the scheduler,
never a release."""
