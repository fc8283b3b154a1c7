"""Traces become forwards: above both the trace readers (`cpbcg.planner.traces`) and the
scheduler (`cpbcg.planner.scheduler`), which know nothing of each other's callers.

`sources.py` opens a trace once detected (a batch trace as written, a request trace through the
scheduler simulation, a server log's forward sizes as a bound); `embedded.py` is the default
workload, packed by the scheduler."""
