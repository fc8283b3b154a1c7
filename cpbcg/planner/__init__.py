"""The planner: CP layout model, capacity model, replay selector and bucket evaluation.

Pure numpy; importing it never imports torch (a test proves it). Functions return typed
results and never print.
"""

from cpbcg.planner.buckets import parse_bucket_spec, sglang_default_buckets
from cpbcg.planner.capacity import CaptureLayout, CaptureSpec, local_capacity
from cpbcg.planner.evaluate import Demand, Evaluation, evaluate
from cpbcg.planner.layout import BatchSet, CPLayout, CPStrategy, cp_active, local_rows, local_tokens
from cpbcg.planner.selector import BucketTable, EagerReason, select_buckets, select_one

__all__ = [
    "BatchSet", "BucketTable", "CPLayout", "CPStrategy", "CaptureLayout", "CaptureSpec", "Demand",
    "EagerReason", "Evaluation", "cp_active", "evaluate", "local_capacity", "local_rows",
    "local_tokens", "parse_bucket_spec", "select_buckets", "select_one", "sglang_default_buckets",
]
