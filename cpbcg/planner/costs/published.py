"""Cost-model parameters per model and GPU, fitted to published measurements (docs/costs.md).

Three models, each a formula over a model's shape (`ModelSpec`) and, where it matters, the GPU
(`GPU`), with a few constants fitted to public measurements of SGLang's breakable prefill CUDA
graphs (`benchmarks/cost_points.yaml` holds every data point; `benchmarks/fit_costs.py` refits the
constants and prints the fit's error on each point; a test checks the constants below are its
result):

* capture time (s) of K shapes: `CAPTURE_STARTUP_S + K * CAPTURE_MS_PER_LAYER * L / 1000`
  (`capture_seconds`): capturing a breakable graph records every layer's kernels once per shape;
  recording is host-bound (the kernels are recorded, not run at size), so the per-shape time
  follows the layer count, not the layer's width, the token count or the GPU;
* graph memory (MiB, `graph_memory_mib`): the shared pool sized by the largest bucket's CP-local
  rows, `POOL_FRACTION * rows * pool_bytes_per_row` (the residual stream, a dense MLP's TP shard,
  FP8 activation copies, a DSA indexer's top-k indices), plus, for MoE, the fused-MoE
  intermediate caches of EVERY graph's rows, `sum(rows) * moe_cache_bytes_per_row` (0.5.23
  `fused_moe`'s `intermediate_cache1..3`, held per captured shape: the MoE points grow with the
  sum of the list, not its largest; times `BACKEND_MOE_CACHE_FRACTION` of the backend; gpt-oss's
  experts run elsewhere and its routed activations stay in the pool: `POOLED_MOE_ARCHITECTURES`),
  plus `GRAPH_MIB_PER_LAYER * L` per graph (`graph_pool_mib`, `moe_cache_mib`, `per_graph_mib`);
  TP is the server's `tp_size` (with CP, 0.5.23 requires `tp_size == attn_cp_size`) and attention
  DP gathers `dp` ranks' rows for the MLP and MoE;
* forward time (ms): a graph replay of B tokens `L * GRAPH_FIXED_MS_PER_LAYER + B * t`, an eager
  forward of n tokens `L * EAGER_FIXED_MS_PER_LAYER + n * t`, with `t` the matmul time per token
  `2 * active_params / tp / (peak * MATMUL_EFFICIENCY)` (`forward_terms`).

Without a model or a GPU (`None`) the figures are for `hardware.ASSUMED_MODEL` on `ASSUMED_GPU`
(the model and GPU the start-up resolution assumes, one definition), and say so (`assumptions`).
The planner reads no files: the model and GPU come from the deployment, which takes them from the
server resolution (`--model-config`, `--gpu`, `server:`; `Deployment.model`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cpbcg.planner.hardware import ASSUMED_GPU, ASSUMED_MODEL, GPU, ModelSpec

__all__ = [
    "CAPTURE_RANGE", "FORWARD_RANGE", "MEMORY_RANGE", "PEAK_BF16_TFLOPS", "CostParams", "FITTED",
    "BACKEND_CAPTURE_RATIO", "BACKEND_MOE_CACHE_FRACTION", "active_params", "assumptions", "capture_seconds", "forward_terms",
    "graph_memory_mib", "graph_pool_mib", "moe_cache_bytes_per_row", "moe_caches_per_graph", "moe_cache_elems", "moe_cache_mib", "per_graph_mib", "peak_tflops",
    "pool_bytes_per_row", "quant_bytes",
]

MIB = 1 << 20

PEAK_BF16_TFLOPS: dict[str, float] = {
    "A100-40GB": 312, "A100": 312, "L40S": 362, "H100": 989, "H800": 989, "H20": 148, "H200": 989,
    "B200": 2250, "GB200": 2500, "B300": 2250, "GB300": 2500, "RTX-PRO-6000": 503,
    "MI300X": 1307, "MI325X": 1307, "MI355X": 2500,
}
"""Dense BF16 tensor throughput per GPU (TFLOP/s; vendor datasheets, without sparsity)."""


@dataclass(frozen=True)
class CostParams:
    """The fitted constants (`benchmarks/fit_costs.py` prints how)."""

    capture_startup_s: float
    """Fixed start-up of a prefill capture (s): pool and buffers, before the first shape."""
    capture_ms_per_layer: float
    """Capture time per shape, per layer (ms; host-bound: not scaled by the layer's width)."""
    pool_fraction: float
    """Graph pool bytes over `rows * pool_bytes_per_row` of the largest bucket."""
    graph_mib_per_layer: float
    """Memory one captured graph holds besides the shared pool, per layer (MiB)."""
    graph_fixed_ms_per_layer: float
    """Fixed time of a graph replay per layer (ms): the eager breaks (attention) and replay."""
    eager_fixed_ms_per_layer: float
    """Fixed time of an eager forward per layer (ms): kernel launches the graph avoids."""
    matmul_efficiency: float
    """Fraction of the GPU's dense BF16 peak a prefill forward's matmuls reach."""
    tc_piecewise_cache_fraction: float = 1.0
    """The share of the per-graph fused-MoE caches a `tc_piecewise` (torch.compile) graph holds
    against a breakable one (fitted to SGLang PR #31203's two one-bucket captures)."""


FITTED = CostParams(
    capture_startup_s=1.73,
    capture_ms_per_layer=8.1903,
    pool_fraction=0.47558,
    graph_mib_per_layer=0.0031489,
    graph_fixed_ms_per_layer=0.88341,
    eager_fixed_ms_per_layer=1.5333,
    matmul_efficiency=0.58705,
    tc_piecewise_cache_fraction=0.43,
)
"""`benchmarks/fit_costs.py` output on `benchmarks/cost_points.yaml` (a test refits and compares)."""

CAPTURE_RANGE = 1.6
MEMORY_RANGE = 1.5
FORWARD_RANGE = 1.5
"""Each model's printed range: the estimate times or divided by this, at least the worst
leave-one-out error on its fitted points (each point's estimate under the constants refitted
without it, `benchmarks/fit_costs.py`; capture 1.52, memory 1.48, forward 1.45)."""


def peak_tflops(gpu: GPU) -> float:
    """Dense BF16 TFLOP/s of `gpu` (`PEAK_BF16_TFLOPS`; an unlisted GPU: the B200's)."""
    return PEAK_BF16_TFLOPS.get(gpu.name, PEAK_BF16_TFLOPS["B200"])


def assumptions(model: ModelSpec | None, gpu: GPU | None) -> tuple[ModelSpec, GPU, str]:
    """The model and GPU the figures use and where each came from, in words: `model SOURCE` (the
    `config.json` given) or `model assumed Llama-3.1-70B-shaped`; `GPU assumed B200` when none
    was given (a given GPU is named by `describe`)."""
    said = [f"model {model.source}" if model is not None else "model assumed Llama-3.1-70B-shaped"]
    if gpu is None:
        said.append(f"GPU assumed {ASSUMED_GPU.name}")
    return model or ASSUMED_MODEL, gpu or ASSUMED_GPU, "; ".join(said)


def describe(model: ModelSpec, gpu: GPU | None = None) -> str:
    """`80 layers, hidden 8192, B200` for labels."""
    moe = f", MoE top-{model.num_experts_per_tok}" if model.num_experts else ""
    return f"{model.num_hidden_layers} layers, hidden {model.hidden_size}{moe}" + (f", {gpu.name}" if gpu is not None else "")


def active_params(model: ModelSpec) -> float:
    """Weights one token multiplies, all layers (no embeddings): attention projections (MLA:
    the compressed KV path) plus the dense MLP or the `top_k` routed experts (gated, 3 matrices)."""
    h, heads, dh = model.hidden_size, model.num_attention_heads, model.head_dim
    q_o = 2 * h * heads * dh
    if model.kv_lora_rank:
        kv = h * (model.kv_lora_rank + 64) + model.kv_lora_rank * heads * dh * 2
    else:
        kv = 2 * h * model.num_key_value_heads * dh
    if model.num_experts:
        width = model.moe_intermediate_size or model.intermediate_size or 4 * h
        mlp = (model.num_experts_per_tok or 1) * 3 * h * width
    else:
        mlp = 3 * h * (model.intermediate_size or 4 * h)
    return float(model.num_hidden_layers * (q_o + kv + mlp))


def moe_cache_elems(model: ModelSpec, tp: int) -> float:
    """Fused-MoE intermediate cache elements per row (0 for a dense model): the `top_k` routed
    copies of each row, each `2 * moe_intermediate / tp` (`intermediate_cache1`), `moe_intermediate
    / tp` (`intermediate_cache2`) and `hidden` (`intermediate_cache3`) wide (0.5.23
    `fused_moe_triton`)."""
    if not model.num_experts:
        return 0.0
    h, tp = model.hidden_size, max(tp, 1)
    width = model.moe_intermediate_size or model.intermediate_size or 4 * h
    return float((model.num_experts_per_tok or 1) * (3 * width / tp + h))


BACKEND_CAPTURE_RATIO = {"breakable": 1.0, "full": 1.0}
"""Capture time of a prefill graph backend over breakable's (`capture_seconds` is breakable's):
`full` records the same kernels as one graph (sglang-omni PR #1379: 2.160 s against 2.085 s, a
held-out check); `tc_piecewise` compiles each shape (5-14x, PR #1379, #30889) and is not modelled."""

FP8_ACTIVATION_METHODS = frozenset({"fp8", "w8a8_fp8", "fbgemm_fp8", "modelopt", "modelopt_fp8"})
"""`quant_method`s whose GEMMs quantise their activations to FP8 (one byte per element, a copy
beside the bf16 activation: 0.5.23 `fp8_utils`' per-token quantisation); weight-only methods
(`compressed-tensors` int4, `awq`, `gptq`, `mxfp4`) quantise no activation and hold none."""

DSA_INDEX_BYTES = 4
"""Bytes per selected key of a DSA indexer's top-k (int32 indices, `index_topk` per row)."""


def quant_bytes(model: ModelSpec) -> int:
    """Bytes per element of the quantised activation copies a model's GEMMs hold (1 for FP8
    activation quantisation, 0 otherwise)."""
    return 1 if model.quant_method in FP8_ACTIVATION_METHODS else 0


POOLED_MOE_ARCHITECTURES = frozenset({"GptOssForCausalLM"})
"""MoE models whose experts 0.5.23 runs outside the fused-MoE Triton path (`model_overrides/gpt_oss.py`:
`triton_kernel`, or `flashinfer_mxfp4` on SM100 for MXFP4 weights), whose buffers are not held per
captured shape: their routed activations are counted once, in the shared pool (issue 40 found
gpt-oss-120b's graph memory at TP2 below even the pooled estimate)."""


def moe_caches_per_graph(model: ModelSpec) -> bool:
    """Whether each captured graph of `model` holds its own fused-MoE caches (an MoE model outside
    `POOLED_MOE_ARCHITECTURES`)."""
    return bool(model.num_experts) and not POOLED_MOE_ARCHITECTURES.intersection(model.architectures or (model.architecture,))


def pool_bytes_per_row(model: ModelSpec, tp: int, dp: int = 1) -> float:
    """Bytes per CP-local row of the largest bucket that the shared pool holds: the residual
    stream (`hidden`), the dense MLP's TP shard on the rows attention DP gathers (`dp *
    intermediate / tp`), FP8 models' one-byte activation copies of both, and a DSA indexer's
    top-k indices (`index_topk * 4`; GLM-5, DeepSeek-V3.2); for an MoE model in
    `POOLED_MOE_ARCHITECTURES`, its routed activations (`moe_cache_elems`) too."""
    h, d, q = model.hidden_size, model.dtype_bytes, quant_bytes(model)
    mlp = 0.0 if model.num_experts else max(dp, 1) * (model.intermediate_size or 4 * h) / max(tp, 1)
    pooled_moe = 0.0 if not model.num_experts or moe_caches_per_graph(model) else _moe_cache_bytes(model, tp, dp)
    return h * (d + q) + mlp * (d + q) + (model.index_topk or 0) * DSA_INDEX_BYTES + pooled_moe


def moe_cache_bytes_per_row(model: ModelSpec, tp: int, dp: int = 1) -> float:
    """Bytes of fused-MoE caches per CP-local row of one graph (0 dense, and 0 for
    `POOLED_MOE_ARCHITECTURES`, whose routed activations the pool holds): `moe_cache_elems` at the
    model's dtype plus, for FP8, the one-byte copy of `intermediate_cache2` (the down projection's
    input), on the rows attention DP gathers (`dp` times the rank's)."""
    return _moe_cache_bytes(model, tp, dp) if moe_caches_per_graph(model) else 0.0


def _moe_cache_bytes(model: ModelSpec, tp: int, dp: int) -> float:
    """The routed activations' bytes per row (`moe_cache_bytes_per_row`, wherever they are held)."""
    width = model.moe_intermediate_size or model.intermediate_size or 4 * model.hidden_size
    fp8_copy = (model.num_experts_per_tok or 1) * width / max(tp, 1) * quant_bytes(model)
    return max(dp, 1) * (moe_cache_elems(model, tp) * model.dtype_bytes + fp8_copy)


BACKEND_MOE_CACHE_FRACTION = {"breakable": 1.0, "full": 1.0}
"""The share of the fused-MoE caches of each graph's rows a graph of each backend holds (1.0:
all of them, measured on breakable graphs: GLM-5.2's 42 shapes, Kimi-K2.7 PR #31391, both held
out of the fit); `tc_piecewise` reads `CostParams.tc_piecewise_cache_fraction`. `full` is
assumed to hold what breakable does (no published point)."""


def moe_cache_mib(model: ModelSpec, rows_sum: float, tp: int, backend: str = "breakable", params: CostParams = FITTED,
                  dp: int = 1) -> float:
    """The fused-MoE caches (MiB) a list holds: `rows_sum` (the CP-local rows of every graph,
    summed) x `moe_cache_bytes_per_row` x the backend's share (0 for a dense model)."""
    share = params.tc_piecewise_cache_fraction if backend == "tc_piecewise" else BACKEND_MOE_CACHE_FRACTION.get(backend, 1.0)
    return share * rows_sum * moe_cache_bytes_per_row(model, tp, dp) / MIB


def graph_memory_mib(model: ModelSpec, largest_rows: int, rows_sum: float, graphs: int, tp: int, backend: str = "breakable",
                     params: CostParams = FITTED, dp: int = 1) -> float:
    """Resident graph memory (MiB) of `graphs` graphs whose largest holds `largest_rows` CP-local
    rows and whose rows sum to `rows_sum`, at TP `tp` and attention DP `dp`: the pool, the MoE
    caches and the per-graph term."""
    return (graph_pool_mib(model, largest_rows, tp, params, dp) + moe_cache_mib(model, rows_sum, tp, backend, params, dp)
            + graphs * per_graph_mib(model, params))


def capture_seconds(model: ModelSpec, num_shapes: int, params: CostParams = FITTED) -> float:
    """Capture time (s) of `num_shapes` breakable prefill graphs of `model` (module doc)."""
    per_shape_s = params.capture_ms_per_layer * model.num_hidden_layers / 1e3
    return params.capture_startup_s + num_shapes * per_shape_s


def capture_seconds_per_shape(model: ModelSpec, params: CostParams = FITTED) -> float:
    """The per-shape term of `capture_seconds` (s)."""
    return capture_seconds(model, 1, params) - params.capture_startup_s


def graph_pool_mib(model: ModelSpec, rows: int, tp: int, params: CostParams = FITTED, dp: int = 1) -> float:
    """The shared graph pool (MiB) a largest bucket of `rows` CP-local rows sizes (`pool_bytes_per_row`)."""
    return params.pool_fraction * rows * pool_bytes_per_row(model, tp, dp) / MIB


def eager_peak_mib(model: ModelSpec, rows: int, tp: int, params: CostParams = FITTED, dp: int = 1) -> float:
    """The activation peak (MiB) of an eager forward of `rows` CP-local rows: the same buffers
    the pool and one graph's MoE caches hold for a graph of that many rows (an assumption: no
    published figure splits it)."""
    return graph_pool_mib(model, rows, tp, params, dp) + moe_cache_mib(model, rows, tp, "breakable", params, dp)


def per_graph_mib(model: ModelSpec, params: CostParams = FITTED) -> float:
    """Memory (MiB) each captured graph holds besides the shared pool."""
    return params.graph_mib_per_layer * model.num_hidden_layers


def forward_terms(model: ModelSpec, gpu: GPU, tp: int, params: CostParams = FITTED) -> tuple[float, float, float]:
    """`(graph_fixed_ms, eager_fixed_ms, token_ms)` of a prefill forward of `model` on `gpu` at TP `tp` (module doc)."""
    token_ms = 2.0 * active_params(model) / max(tp, 1) / (peak_tflops(gpu) * 1e12 * params.matmul_efficiency) * 1e3
    layers = model.num_hidden_layers
    return layers * params.graph_fixed_ms_per_layer, layers * params.eager_fixed_ms_per_layer, token_ms
