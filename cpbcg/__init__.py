"""cpbcg: plan, capture and check CUDA-graph buckets for context-parallel (CP) prefill.

The planner (`cpbcg.planner`) is pure numpy and never imports torch; the capture harness
(`cpbcg.capture`) is the only place torch is used.
"""

__version__ = "0.1.0"
