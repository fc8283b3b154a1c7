"""What a prefill forward costs on a model and GPU: the linear cost model (`cost.py`) and the
constants fitted to published measurements (`published.py`, docs/costs.md). Below the
deployment, which holds a cost model, and the optimiser, which weighs lists by it."""
