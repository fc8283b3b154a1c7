"""Peak memory of capturing and verifying one bucket, estimated before anything is built.

Attention dominates. What it costs depends on the SDPA kernel PyTorch actually picks (asked of
`cpbcg.graph_capture.model.sdpa_kernel` per call site): a fused kernel (flash, memory-efficient, CPU
flash) keeps `O(rows * head_dim)` per head, plus, with a mask, the bool mask turned into a bias
in the model dtype; the `math` kernel materialises float32 scores AND their softmax,
`2 * 4 * heads * rows * keys` bytes. No torch here: the kernels come in as names.

Per bucket `B` with `C = C(B)` rows per rank, `cp` ranks, `r` of them in this process:

* every local rank caches its `[C, cp*C]` bool mask: `r * C * cp*C` bytes;
* one rank's CP attention: `C` queries over `cp*C` keys, masked (kernel `cp_kernel`);
* the unsharded references over the capture layout's longest request (`B` tokens for a
  single-request capture): causal, no mask, in the model dtype (`ref_kernel`) and, for a
  low-precision model, again in float32 (`truth_kernel`);
* K/V expanded to all heads (GQA) for each of these, and the MLP activations of the reference,
  `B * 3 * intermediate` elements.

The phases run one after another, so the estimate is the masks plus the largest phase. The
weights (and the float32 copy a low-precision run keeps) exist before the first bucket and are
already missing from the free memory it is compared with. Static buffers and the pool itself are
small beside these and left out: it errs low, and out-of-memory is still caught per bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

from cpbcg.graph_capture.presets import ModelDims

MATH = "math"


@dataclass(frozen=True)
class AttentionKernels:
    """SDPA kernel names per call site (`math`, `flash`, `efficient`, `cudnn`)."""

    cp_attention: str
    """Masked zigzag CP attention at the breaks (model dtype)."""
    reference: str
    """Causal unsharded reference in the model dtype."""
    truth: str
    """Causal unsharded reference in float32 (same as `reference` for a float32 model)."""

    def as_pairs(self) -> tuple[tuple[str, str], ...]:
        return (("cp_attention", self.cp_attention), ("reference", self.reference), ("truth", self.truth))


def attention_bytes(dims: ModelDims, rows: int, keys: int, element_bytes: int, kernel: str, masked: bool) -> int:
    """Temporary bytes of one SDPA call: `rows` queries over `keys` keys, all heads.

    K and V expanded to every head (`2 * keys * heads * head_dim` elements), the output
    (`rows * heads * head_dim`), with `masked` the bias of the mask (`rows * keys` elements), and
    for the `math` kernel float32 scores and softmax (`2 * 4 * heads * rows * keys` bytes).
    """
    heads, dim = dims.num_attention_heads, dims.head_dim
    total = element_bytes * (2 * keys + rows) * heads * dim
    if masked:
        total += element_bytes * rows * keys
    if kernel == MATH:
        total += 8 * heads * rows * keys
    return total


def bucket_peak_bytes(
    dims: ModelDims, bucket: int, capacity_rows: int, longest_request: int, cp_size: int,
    local_ranks: int, element_bytes: int, kernels: AttentionKernels,
) -> int:
    """Estimated peak bytes of capturing and verifying one bucket (see the module docstring).

    `longest_request` is the longest request of the capture layout (`B` for single-request
    capture). Returns bytes; never raises.
    """
    keys = cp_size * capacity_rows
    masks = local_ranks * capacity_rows * keys
    cp_phase = attention_bytes(dims, capacity_rows, keys, element_bytes, kernels.cp_attention, masked=True)
    n = longest_request
    mlp = 3 * dims.intermediate_size * bucket
    ref_phase = attention_bytes(dims, n, n, element_bytes, kernels.reference, masked=False) + element_bytes * mlp
    if element_bytes != 4:
        ref_phase = max(ref_phase, attention_bytes(dims, n, n, 4, kernels.truth, masked=False) + 4 * mlp)
    return masks + max(cp_phase, ref_phase)
