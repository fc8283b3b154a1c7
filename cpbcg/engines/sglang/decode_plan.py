"""Decode graphs planned on traffic: SGLang 0.5.23's decode list replayed on the decode steps
(`cpbcg.planner.decode_steps.DecodeSteps`), and a recommended list and `max_bs`.

* The server's decode list: `decode_server` resolves it from the deployment as 0.5.23 does
  (`decode.decode_graph_list`: given flags, else the default `max_bs` by GPU memory and TP),
  then the runner's capture filter (`decode.decode_batch_sizes_to_capture`: alignment to the
  attention CP size, the request pool).
* Replay (`evaluate_decode`): each step runs in the smallest captured size at or above its
  running batch, eagerly above the largest (`decode.decode_replay_sizes`).
* Step time (`DecodeCost`, an assumption, labelled in every report): a graph step of `bs` rows
  takes the scheduler simulation's decode step time (`decode_fixed_ms + decode_ms_per_request x bs`);
  an eager step takes `EAGER_STEP_FACTOR` x that, fitted to published decode figures:
  sglang #40346 (TPOT 5.44 ms eager -> 2.64 ms in graphs: 2.06x), sglang #33900 (4x per token, a small
  model), vllm #54933 (5x). 2.06x is the conservative end: the real cliff is often steeper.
* Capture cost: `CAPTURE_S_PER_GRAPH` seconds per decode graph (assumed) and 0.5.23's own memory
  reserve of 2 MiB x `max_bs` (`reserve_for_graph_mb`).
* Recommendation (`recommend_decode`): `max_bs` = the largest running batch the traffic reaches
  (every step in graphs), never above the request slots (`--max-running-requests`), and the
  0.5.23 ladder up to it (`decode_cuda_graph_batch_sizes`); the knee table shows coverage and
  modelled decode time at smaller `max_bs` (the step quantiles).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from cpbcg.engines.sglang.decode import (
    GRAPH_RESERVE_MIB_PER_BS,
    decode_batch_size_alignment,
    decode_batch_sizes_to_capture,
    decode_cuda_graph_batch_sizes,
    decode_graph_list,
    decode_replay_sizes,
)
from cpbcg.planner.decode_steps import DecodeSteps
from cpbcg.planner.scheduler.settings import SchedulerSettings
from cpbcg.planner.scheduler.summary import SimulationSummary

EAGER_STEP_FACTOR = 2.06
"""Assumed eager / graph decode step time (sglang #40346: TPOT 5.44 -> 2.64 ms)."""
CAPTURE_S_PER_GRAPH = 0.25
"""Assumed seconds to capture one decode graph (not measured by cpbcg)."""
COST_SOURCES = ("sglang #40346: TPOT 5.44 ms eager -> 2.64 ms in decode graphs (2.06x, the factor used)",
                "sglang #33900: eager decode 4x slower per token (small model)",
                "vllm #54933: 5x")
KNEE_QUANTILES = (0.5, 0.9, 0.99, 0.999, 1.0)
MAX_RECOMMENDED_BS = 1 << 14
"""Largest decode `max_bs` recommended when no request slots bound it (a log's odd line, decode not simulated)."""


@dataclass(frozen=True)
class DecodeCost:
    """Modelled decode step time (ms) in a graph of `bs` rows and eagerly (module doc: an assumption)."""

    fixed_ms: float
    ms_per_request: float
    eager_factor: float = EAGER_STEP_FACTOR
    capture_s_per_graph: float = CAPTURE_S_PER_GRAPH

    def graph_ms(self, rows: np.ndarray) -> np.ndarray:
        return self.fixed_ms + self.ms_per_request * rows

    def eager_ms(self, rows: np.ndarray) -> np.ndarray:
        return self.eager_factor * self.graph_ms(rows)

    def to_dict(self) -> dict[str, Any]:
        return {"assumed": True, "graph_step_ms": f"{self.fixed_ms:g} + {self.ms_per_request:g} x rows (the scheduler's decode step)",
                "eager_step_factor": self.eager_factor, "capture_s_per_graph": self.capture_s_per_graph,
                "graph_memory_mib": f"{GRAPH_RESERVE_MIB_PER_BS} x max_bs (0.5.23 reserve_for_graph_mb)", "sources": list(COST_SOURCES)}


@dataclass(frozen=True)
class DecodeServer:
    """The decode graphs a server captures (0.5.23 resolution and capture filter)."""

    configured: tuple[int, ...]
    """`cuda_graph_config.decode.bs` as resolved (before the capture filter)."""
    captured: tuple[int, ...]
    """What the runner captures (`get_batch_sizes_to_capture`); empty when decode graphs are off."""
    max_bs_rule: str
    alignment: int
    request_pool: int | None
    enabled: bool = True
    dropped: tuple[int, ...] = ()
    """Configured sizes the capture filter dropped (alignment or pool)."""

    @property
    def max_bs(self) -> int:
        return max(self.captured) if self.captured else 0


def decode_server(*, gpu_memory_mib: float | None, tp_size: int = 1, attn_cp_size: int = 1, max_running_requests: int | None = None,
                  request_pool: int | None = None, max_bs: int | None = None, bs: list[int] | None = None,
                  speculative: bool = False, disable_padding: bool = False, two_batch_overlap: bool = False,
                  enabled: bool = True) -> DecodeServer:
    """The decode list a 0.5.23 server captures (`decode_graph_list`, then `decode_batch_sizes_to_capture`
    with the alignment of `decode_batch_size_alignment`; `request_pool`: the request slots,
    default `max_running_requests`). `enabled` False: decode graphs off (`--disable-cuda-graph`,
    `--disable-decode-cuda-graph`, `--cuda-graph-backend-decode disabled`). Raises ValueError as they do."""
    listed = decode_graph_list(gpu_memory_mib=gpu_memory_mib, tp_size=tp_size, max_bs=max_bs, bs=bs,
                               max_running_requests=max_running_requests, speculative=speculative, disable_padding=disable_padding)
    alignment = decode_batch_size_alignment(two_batch_overlap=two_batch_overlap, attn_cp_size=attn_cp_size)
    pool = request_pool if request_pool is not None else max_running_requests
    if not enabled:
        return DecodeServer(listed.bs, (), "decode CUDA graphs disabled", alignment, pool, enabled=False)
    captured = tuple(decode_batch_sizes_to_capture(listed.bs, pool if pool is not None else max(listed.bs),
                                                   alignment=alignment, two_batch_overlap=two_batch_overlap))
    dropped = tuple(sorted(set(listed.bs) - set(captured)))
    return DecodeServer(listed.bs, captured, listed.rule, alignment, pool, True, dropped)


@dataclass(frozen=True)
class DecodeEvaluation:
    """A decode list replayed on decode steps (steps scaled by the sample's `sampled_every`)."""

    batch_sizes: tuple[int, ...]
    max_bs: int
    steps: int
    graph_steps: int
    eager_steps: int
    rows: int
    """Running requests summed over the steps."""
    padded_rows: int
    """Rows the graphs pad (captured size - running batch, over graph steps)."""
    modelled_s: float
    """Modelled decode time over the steps (s; `DecodeCost`)."""
    all_graph_s: float
    """Modelled decode time were every step in a graph at its exact size (s): the floor."""
    capture_s: float
    graph_memory_mib: float
    largest_eager_batch: int = 0

    @property
    def coverage(self) -> float:
        return self.graph_steps / self.steps if self.steps else 1.0

    @property
    def padding(self) -> float:
        return self.padded_rows / self.rows if self.rows else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"batch_sizes": list(self.batch_sizes), "max_bs": self.max_bs, "steps": self.steps, "graph_steps": self.graph_steps,
                "eager_steps": self.eager_steps, "coverage": self.coverage, "rows": self.rows, "padded_rows": self.padded_rows,
                "padding": self.padding, "largest_eager_batch": self.largest_eager_batch, "modelled_decode_s": self.modelled_s,
                "all_graph_decode_s": self.all_graph_s, "capture_s": self.capture_s, "graph_memory_mib": self.graph_memory_mib}


def evaluate_decode(steps: DecodeSteps, captured: tuple[int, ...] | list[int], cost: DecodeCost) -> DecodeEvaluation:
    """`captured` (requests, ascending) replayed on `steps` by 0.5.23's rule (module doc)."""
    sizes, n = steps.batch_sizes, steps.steps * steps.sampled_every
    replay = decode_replay_sizes(sizes, captured) if captured else np.zeros(len(sizes), dtype=np.int64)
    graph = replay > 0
    eager = ~graph
    time_ms = float((n[graph] * cost.graph_ms(replay[graph])).sum() + (n[eager] * cost.eager_ms(sizes[eager])).sum())
    floor_ms = float((n * cost.graph_ms(sizes)).sum())
    max_bs = max(captured) if captured else 0
    return DecodeEvaluation(
        tuple(int(b) for b in captured), max_bs, int(n.sum()), int(n[graph].sum()), int(n[eager].sum()), int((n * sizes).sum()),
        int((n[graph] * (replay[graph] - sizes[graph])).sum()), time_ms / 1000.0, floor_ms / 1000.0,
        len(captured) * cost.capture_s_per_graph, float(GRAPH_RESERVE_MIB_PER_BS * max_bs),
        int(sizes[eager].max()) if eager.any() else 0)


@dataclass(frozen=True)
class DecodePlan:
    """Decode graphs on the traffic: SGLang's list as the server captures it, the recommended one, the knee."""

    source: str
    """Where the decode steps come from (`scheduler simulation: every decode step`, `log: ... 1-in-40 sample`)."""
    traffic: DecodeSteps
    server: DecodeServer
    configured: DecodeEvaluation
    recommended: DecodeEvaluation | None
    cost: DecodeCost
    knee: tuple[dict[str, Any], ...] = ()
    request_slots: int | None = None
    observed: dict[str, Any] | None = None
    """A log's printed verdicts against the modelled ones on the same lines (`observed_decode`)."""
    parts: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def guarantee_max_running_requests(self) -> int | None:
        """`--max-running-requests` at which no decode step can leave the recommended graphs (its
        `max_bs`): the running batch never exceeds it. None without a recommendation."""
        return None if self.recommended is None else self.recommended.max_bs

    @property
    def flags(self) -> list[str]:
        """The recommended list as 0.5.23 flags (empty without a recommendation)."""
        if self.recommended is None:
            return []
        return ["--cuda-graph-bs-decode", *map(str, self.recommended.batch_sizes), "--cuda-graph-max-bs-decode", str(self.recommended.max_bs)]

    def to_dict(self) -> dict[str, Any]:
        """The `decode` block of `plan --format json`."""
        return {"source": self.source, "steps_counted": self.traffic.num_steps, "sampled_every": self.traffic.sampled_every,
                "max_running_batch": self.traffic.max_batch, "request_slots": self.request_slots,
                "server": {"configured": list(self.server.configured), "captured": list(self.server.captured),
                           "dropped_by_capture_filter": list(self.server.dropped), "max_bs": self.server.max_bs,
                           "max_bs_rule": self.server.max_bs_rule, "alignment": self.server.alignment, "enabled": self.server.enabled},
                "configured": self.configured.to_dict(),
                "recommended": None if self.recommended is None else self.recommended.to_dict(),
                "flags": self.flags, "guarantee_max_running_requests": self.guarantee_max_running_requests, "knee": list(self.knee), "cost_model": self.cost.to_dict(),
                "observed": self.observed, "parts": list(self.parts), "notes": list(self.notes)}


def _round_up_ladder(bs: int) -> int:
    """`bs` rounded up to the step of 0.5.23's default ladder around it (8 to 256, 16 to 512, 32 above)."""
    step = 1 if bs <= 16 else 8 if bs <= 256 else 16 if bs <= 512 else 32
    return -(-bs // step) * step


def recommend_decode(steps: DecodeSteps, server: DecodeServer, cost: DecodeCost, request_slots: int | None) -> tuple[DecodeEvaluation | None, tuple[dict[str, Any], ...]]:
    """The recommended list (module doc) and the knee table: for the step quantiles, the list to
    that `max_bs`, its coverage and modelled decode time. None without decode steps."""
    if not steps.num_steps:
        return None, ()

    def ladder(max_bs: int) -> list[int]:
        max_bs = min(max_bs, request_slots or MAX_RECOMMENDED_BS, MAX_RECOMMENDED_BS)
        max_bs = -(-max_bs // server.alignment) * server.alignment  # a max_bs the capture filter keeps
        sizes = decode_cuda_graph_batch_sizes(max_bs)
        return decode_batch_sizes_to_capture(sizes, request_slots or max_bs, alignment=server.alignment)

    knee = []
    for q in KNEE_QUANTILES:
        top = _round_up_ladder(steps.quantile(q))
        if request_slots is not None:
            top = min(top, request_slots)
        one = evaluate_decode(steps, ladder(max(top, 1)), cost)
        knee.append({"quantile": q, "max_bs": one.max_bs, "graphs": len(one.batch_sizes), "coverage": one.coverage,
                     "eager_steps": one.eager_steps, "modelled_decode_s": one.modelled_s, "capture_s": one.capture_s})
    top = _round_up_ladder(steps.max_batch)
    if request_slots is not None:
        top = min(top, request_slots)
    return evaluate_decode(steps, ladder(max(top, 1)), cost), tuple(knee)


def observed_decode(sizes: np.ndarray, verdicts: np.ndarray, captured: tuple[int, ...]) -> dict[str, Any]:
    """A log's `Decode batch` lines: the printed verdict (1 graph, 0 eager, -1 none) against the
    modelled one (`decode_replay_sizes` on the running batch), line by line, as prefill's are compared."""
    modelled = decode_replay_sizes(sizes, captured) > 0 if captured else np.zeros(len(sizes), dtype=bool)
    printed = verdicts >= 0
    graph = verdicts == 1
    return {"lines": int(len(sizes)), "with_verdict": int(printed.sum()), "graph": int(graph.sum()), "eager": int((verdicts == 0).sum()),
            "eager_share": float((verdicts == 0).sum() / printed.sum()) if printed.any() else None,
            "modelled_graph": int(modelled[printed].sum()), "agree": int((modelled[printed] == graph[printed]).sum()),
            "disagree": int((modelled[printed] != graph[printed]).sum())}


def plan_decode(steps: DecodeSteps, source: str, server: DecodeServer, cost: DecodeCost, request_slots: int | None, *,
                log_lines: tuple[np.ndarray, np.ndarray] | None = None, parts: tuple[tuple[str, DecodeSteps], ...] = (),
                recommend: bool = True) -> DecodePlan:
    """`DecodePlan` of `steps` under `server` (and, for a log, its lines' verdicts compared; for
    several (trace, load) parts, each part's eager steps under the configured and recommended lists;
    `recommend` False: no recommendation, no knee)."""
    configured = evaluate_decode(steps, server.captured, cost)
    recommended, knee = recommend_decode(steps, server, cost, request_slots) if recommend else (None, ())
    notes = []
    if server.dropped:
        notes.append(f"0.5.23's capture filter drops decode sizes {list(server.dropped)} (alignment {server.alignment}: attention CP / "
                     f"two-batch overlap; request pool {server.request_pool})")
    if configured.eager_steps:
        notes.append(f"{configured.eager_steps:,} of {configured.steps:,} decode steps run eagerly: running batch up to "
                     f"{configured.largest_eager_batch} above the captured max_bs {configured.max_bs} (0.5.23 says nothing)")
    if steps.sampled_every > 1:
        notes.append(f"decode steps from the log's Decode batch lines: a 1-in-{steps.sampled_every} sample (decode_log_interval), "
                     f"counts scaled by {steps.sampled_every}; a short peak between lines is not seen")
    observed = None if log_lines is None else observed_decode(log_lines[0], log_lines[1], server.captured)
    rec_list = recommended.batch_sizes if recommended is not None else ()
    per = tuple({"trace": label, **_part(one, server.captured, rec_list, cost)} for label, one in parts)
    tipped = next((p for p in per if p["configured_eager_steps"]), None)
    if tipped is not None and per[0] is not tipped:
        notes.append(f"the server's decode list first falls off the graphs at {tipped['trace']} ({tipped['configured_eager_steps']:,} "
                     f"eager steps, running batch up to {tipped['max_running_batch']}; eager steps in the loop make it worse: "
                     "api.decode_loads)")
    return DecodePlan(source, steps, server, configured, recommended, cost, knee, request_slots, observed, per, tuple(notes))


def _part(steps: DecodeSteps, configured: tuple[int, ...], recommended: tuple[int, ...], cost: DecodeCost) -> dict[str, Any]:
    mine = evaluate_decode(steps, configured, cost)
    out: dict[str, Any] = {"max_running_batch": steps.max_batch, "steps": mine.steps, "configured_eager_steps": mine.eager_steps,
                           "configured_modelled_decode_s": mine.modelled_s}
    if recommended:
        rec = evaluate_decode(steps, recommended, cost)
        out.update(recommended_eager_steps=rec.eager_steps, recommended_modelled_decode_s=rec.modelled_s)
    return out


def _given(server: Any, name: str) -> Any:
    g = None if server is None else server.given.get(name)
    return None if g is None else g.value


MAX_DECODE_BS = 1 << 20
"""Largest decode batch size cpbcg takes from a flag (requests; more than any request pool it models)."""


def _int_of(flag: str, word: Any) -> int:
    text = str(word).strip()
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise ValueError(f"{flag}: expected a positive batch size, got {text[:20]!r}")
    if int(text) > MAX_DECODE_BS:
        raise ValueError(f"{flag}: {text} is above {MAX_DECODE_BS:,} requests: no server holds such a decode batch")
    return int(text)


def _int_list(flag: str, value: Any) -> list[int] | None:
    if value is None:
        return None
    words = value if isinstance(value, (list, tuple)) else str(value).replace(",", " ").split()
    return [_int_of(flag, w) for w in words]


def _flag_on(value: Any) -> bool:
    return value is not None and str(value).lower() not in ("false", "0", "")


def decode_server_of(deployment: Any) -> tuple[DecodeServer, tuple[str, ...]]:
    """The decode graphs the deployment's server captures (`decode_server` on what it states:
    its resolved server's GPU, TP and attention CP sizes and given decode flags, the scheduler's
    `--max-running-requests` and request slots) and notes on what was assumed. Raises ValueError
    for decode flags 0.5.23 would refuse (an empty list)."""
    from cpbcg.planner.hardware import ASSUMED_GPU

    server, sched, notes = deployment.server, deployment.scheduler, []
    gpu = server.gpu if server is not None else deployment.gpu
    gpu_assumed = gpu is None or (server is not None and server.gpu_assumed)
    gpu = gpu or ASSUMED_GPU
    tp = server.tp_size if server is not None else 1
    attn_cp = server.attn_cp_size if server is not None else deployment.cp.cp_size
    config = _given(server, "cuda_graph_config")
    decode_json = config.get("decode", {}) if isinstance(config, dict) else {}
    max_bs = decode_json.get("max_bs", _given(server, "cuda_graph_max_bs_decode"))
    bs = _int_list("--cuda-graph-bs-decode", decode_json.get("bs", _given(server, "cuda_graph_bs_decode")))
    backend = decode_json.get("backend", _given(server, "cuda_graph_backend_decode"))
    enabled = not (_flag_on(_given(server, "disable_cuda_graph")) or _flag_on(_given(server, "disable_decode_cuda_graph"))
                   or (backend is not None and str(backend) == "disabled")
                   or (_given(server, "disaggregation_mode") == "prefill" and backend is None))  # apply_cuda_graph_disaggregation_roles
    given = dict(gpu_memory_mib=gpu.memory_mib, tp_size=tp, attn_cp_size=attn_cp,
                 max_running_requests=sched.max_running_requests, request_pool=sched.request_slots,
                 max_bs=None if max_bs is None else _int_of("--cuda-graph-max-bs-decode", max_bs), bs=bs,
                 speculative=_given(server, "speculative_algorithm") is not None,
                 disable_padding=_flag_on(_given(server, "disable_cuda_graph_padding")),
                 two_batch_overlap=_flag_on(_given(server, "enable_two_batch_overlap")))
    try:
        result = decode_server(**given, enabled=enabled)
    except ValueError as exc:
        if bs is not None or max_bs is not None:
            raise  # the operator's decode flags: refused as 0.5.23 refuses them
        # 0.5.23's own default list, none of which survives the alignment (an attention CP size
        # above the default max_bs): its decode capture asserts; planned as no decode graphs, said
        off = decode_server(**given, enabled=False)
        result = replace(off, max_bs_rule=f"none captured: {exc}")
        notes.append(f"decode graphs: {exc}: 0.5.23's decode capture asserts (get_batch_sizes_to_capture) with its default list "
                     f"at this attention CP size; give --cuda-graph-bs-decode in multiples of {off.alignment}, or decode runs eagerly")
    if _given(server, "speculative_algorithm") is not None and result.alignment > 1:
        notes.append("speculative decoding: the capture filter's width (tokens per request in a verify graph) is not modelled; "
                     "1 assumed, so sizes 0.5.23 drops for alignment may be shown as captured")
    if gpu_assumed and result.max_bs_rule.startswith("0.5.23 default"):
        notes.append(f"decode max_bs: 0.5.23's default for the assumed GPU {gpu.name} ({gpu.memory_mib} MiB): give --gpu for yours")
    if sched.max_running_requests is None:
        notes.append(f"request pool: {sched.request_slots} slots (cpbcg's derivation; SGLang sizes it from the KV pool at start)")
    return result, tuple(notes)


def cost_of(deployment: Any) -> DecodeCost:
    """The assumed decode step cost (module doc) on the deployment's scheduler step model."""
    sched = deployment.scheduler
    return DecodeCost(sched.decode_step_fixed_ms, sched.decode_step_ms_per_request)


def guarantee_decode_list(deployment: Any) -> list[int] | None:
    """Guarantee mode's decode list: 0.5.23's ladder up to `--max-running-requests` (rounded up to
    the capture alignment), as the runner captures it, so every running batch the server can form
    decodes in a graph. None when `--max-running-requests` is not set (the running batch is then
    bounded only by the KV pool, sized at start). Raises ValueError as `decode_batch_sizes_to_capture`."""
    slots = deployment.scheduler.max_running_requests
    if slots is None:
        return None
    if slots > MAX_DECODE_BS:
        raise ValueError(f"--max-running-requests {slots:,}: a decode list up to it would hold millions of graphs (at most {MAX_DECODE_BS:,})")
    server, _ = decode_server_of(deployment)
    top = -(-slots // server.alignment) * server.alignment
    return decode_batch_sizes_to_capture(decode_cuda_graph_batch_sizes(top), slots, alignment=server.alignment)


def log_decode_plan(lines: Any, settings: Any, server: DecodeServer, cost: DecodeCost, request_slots: int | None, *,
                    recommend: bool = True) -> DecodePlan:
    """`plan_decode` of a server log's `Decode batch` lines (`sglang_decode_lines.DecodeLines`):
    a 1-in-`decode_log_interval` sample (the interval the launch's settings `settings` state, else
    0.5.23's default 40, said in a note), their printed verdicts compared with the model's."""
    from cpbcg.engines.sglang.logs.decode_lines import DECODE_LOG_INTERVAL

    interval, notes = DECODE_LOG_INTERVAL, []
    stated = None if settings is None else settings.sglang_flags().get("decode_log_interval")
    if stated is not None and str(stated[0]).isdigit() and int(stated[0]) > 0:
        interval = int(stated[0])
    else:
        notes.append(f"decode_log_interval {DECODE_LOG_INTERVAL} assumed (0.5.23's default; the log does not state it)")
    sizes, verdicts = lines.arrays()
    plan = plan_decode(DecodeSteps.from_samples(sizes, interval),
                       f"server log: {len(sizes):,} Decode batch lines, a 1-in-{interval} sample of decode steps",
                       server, cost, request_slots, log_lines=(sizes, verdicts), recommend=recommend)
    return replace(plan, notes=(*plan.notes, *notes))


def watched_decode_plan(deployment: Any, lines: Any, settings: Any) -> DecodePlan | None:
    """`cpbcg watch`'s decode judgement of a followed log so far (`log_decode_plan` under the
    server `deployment` resolves to, no recommendation); None without `Decode batch` lines.
    Raises ValueError for decode flags 0.5.23 would refuse."""
    if not lines.lines:
        return None
    server, _ = decode_server_of(deployment)
    return log_decode_plan(lines, settings, server, cost_of(deployment), deployment.scheduler.request_slots, recommend=False)


def decode_loads(scheduler: SchedulerSettings, load_factors: Sequence[float], max_bs: Mapping[str, int],
                 simulate: Callable[[SchedulerSettings], SimulationSummary]) -> list[dict[str, object]]:
    """The decode fall-off with its feedback: `simulate` (a request trace simulated whole under the
    settings given) run at each load factor with each decode `max_bs` (`{"label": max_bs}`, e.g.
    SGLang's default list's and the recommended one's) in the loop: a decode step whose running
    batch is above `max_bs` runs eagerly and takes `EAGER_STEP_FACTOR` x the step time (an
    assumption), which lengthens every running request's stay. One row per (load, label): decode
    steps, eager steps and their share, the largest running batch, decode seconds and the
    simulated span (seconds). `scheduler`: the trace's settings, the load and decode graph taken
    from the arguments."""
    rows: list[dict[str, object]] = []
    for factor in load_factors:
        for label, top in max_bs.items():
            s = simulate(replace(scheduler, time_scale=float(factor), decode_graph_max_bs=int(top), eager_decode_factor=EAGER_STEP_FACTOR))
            steps = s.decode_batches
            eager = int(steps.steps[steps.batch_sizes > top].sum())
            rows.append({"load": float(factor), "list": label, "max_bs": int(top), "decode_steps": s.decode_steps, "eager_steps": eager,
                         "eager_share": eager / s.decode_steps if s.decode_steps else 0.0, "max_running": s.max_running,
                         "decode_s": s.decode_s + s.drain_s, "simulated_s": s.simulated_s + s.drain_s})
    return rows
