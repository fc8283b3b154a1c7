"""Refit the cost models' constants to the published measurements and print the error on each.

    python benchmarks/fit_costs.py            # the fit, every point's error, the constants
    python benchmarks/fit_costs.py --check    # exit 1 when cpbcg's FITTED differs from the refit
    python benchmarks/fit_costs.py --presets  # before/after: the blog's setups and the shipped presets

Data: benchmarks/cost_points.yaml (every point, its source and whether it is fitted). Formulas:
cpbcg/planner/costs/published.py (the one copy; this script only chooses their constants).
Fits are least squares on log(estimate / measurement): capture time (one constant, the start-up
taken from its own point), graph memory (two constants, linear), forward time (three constants,
a grid search refined around its best point).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cpbcg.planner.hardware import gpu_by_name, model_spec_from_config  # noqa: E402
from cpbcg.planner.costs import published as pub  # noqa: E402

DATA = Path(__file__).with_name("cost_points.yaml")


def load(path: Path = DATA) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    data["specs"] = {name: model_spec_from_config(cfg, f"{path.name}: {name}") for name, cfg in data["models"].items()}
    return data


def _minimise(loss: Callable[[np.ndarray], float], lo: list[float], hi: list[float], steps: int = 25, rounds: int = 6) -> np.ndarray:
    """Minimum of `loss` over a log-spaced box, refined around the best point each round."""
    lo_l, hi_l = np.log(np.asarray(lo, float)), np.log(np.asarray(hi, float))
    floor, ceiling = lo_l, hi_l  # the box is a bound, not a start: refinement stays inside it
    best = None
    for _ in range(rounds):
        axes = [np.linspace(a, b, steps) for a, b in zip(lo_l, hi_l)]
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(lo))
        values = np.array([loss(np.exp(p)) for p in grid])
        best = grid[int(np.argmin(values))]
        width = (hi_l - lo_l) / (steps - 1) * 2
        lo_l, hi_l = np.maximum(best - width, floor), np.minimum(best + width, ceiling)
    assert best is not None
    return np.exp(best)


def fit(data: dict[str, Any]) -> pub.CostParams:
    specs = data["specs"]
    startup = float(data["startup"]["measured_s"])
    cap = [p for p in data["capture"] if p["fit"]]

    def cap_loss(x: np.ndarray) -> float:
        params = dataclasses.replace(pub.FITTED, capture_startup_s=startup, capture_ms_per_layer=float(x[0]))
        return sum(math.log(pub.capture_seconds(specs[p["model"]], p["shapes"], params) / p["measured_s"]) ** 2 for p in cap)

    (c_layer,) = _minimise(cap_loss, [0.1], [100.0], steps=41)
    mem = [p for p in data["memory"] if p["fit"]]
    unit = dataclasses.replace(pub.FITTED, pool_fraction=1.0, graph_mib_per_layer=1.0)
    a = np.array([[pub.graph_pool_mib(specs[p["model"]], p["rows"], p["tp"], unit) / p["measured_mib"],
                   p["graphs"] * pub.per_graph_mib(specs[p["model"]], unit) / p["measured_mib"]] for p in mem])
    if len(mem) >= 2:
        (pool, per_graph), *_ = np.linalg.lstsq(a, np.ones(len(mem)), rcond=None)
    else:  # one point left (leave-one-out): no per-graph term (nothing left to tell it from the pool), the pool fitted to it
        per_graph = 0.0
        pool = float(np.mean(1 / a[:, 0]))
    fwd = [p for p in data["forward"] if p["fit"]]

    def fwd_loss(x: np.ndarray) -> float:
        params = dataclasses.replace(pub.FITTED, graph_fixed_ms_per_layer=float(x[0]), eager_fixed_ms_per_layer=float(x[1]),
                                     matmul_efficiency=float(x[2]))
        return sum(math.log(_forward(specs, p, params) / _forward_measured(p)) ** 2 for p in fwd)

    g, e, eff = _minimise(fwd_loss, [0.01, 0.01, 0.05], [5.0, 10.0, 0.7])
    return pub.CostParams(round(startup, 5), _r(c_layer), _r(pool), _r(per_graph), _r(g), _r(e), _r(eff))


def _r(x: float) -> float:
    return float(f"{x:.5g}")


def _forward(specs: dict[str, Any], p: dict[str, Any], params: pub.CostParams) -> float:
    g, e, t = pub.forward_terms(specs[p["model"]], gpu_by_name(p["gpu"]), p["tp"], params)
    n = p["tokens"]
    if "speedup" in p:
        return (e + t * n) / (g + t * n)
    return (e if "eager_ms" in p else g) + t * n


def _forward_measured(p: dict[str, Any]) -> float:
    return float(p.get("speedup") or p.get("eager_ms") or p["graph_ms"])


def _estimate(specs: dict[str, Any], section: str, p: dict[str, Any], params: pub.CostParams) -> tuple[str, float, float]:
    """(kind, estimate, measurement) of point `p` of `section` under `params`."""
    if section == "capture":
        return "capture s", pub.capture_seconds(specs[p["model"]], p["shapes"], params), p["measured_s"]
    if section == "memory":
        spec = specs[p["model"]]
        est = pub.graph_pool_mib(spec, p["rows"], p["tp"], params) + p["graphs"] * pub.per_graph_mib(spec, params)
        return "graph MiB", est, p["measured_mib"]
    kind = "speedup x" if "speedup" in p else ("eager ms" if "eager_ms" in p else "graph ms")
    return kind, _forward(specs, p, params), _forward_measured(p)


SECTIONS = ("capture", "memory", "forward")


def errors(data: dict[str, Any], params: pub.CostParams) -> list[tuple[str, str, float, float, bool, float | None]]:
    """(kind, source, estimate, measurement, fitted, leave-one-out ratio) for every point: the
    leave-one-out ratio is the point's estimate over its measurement under the constants refitted
    without it (None for a point that was not fitted: its ratio is already out of sample)."""
    specs, out = data["specs"], []
    for section in SECTIONS:
        for i, p in enumerate(data[section]):
            kind, est, meas = _estimate(specs, section, p, params)
            loo = None
            if p["fit"]:
                held = {**data, section: [dict(q, fit=False) if j == i else q for j, q in enumerate(data[section])]}
                _, loo_est, _ = _estimate(specs, section, p, fit(held))
                loo = loo_est / meas
            out.append((kind, p["source"], est, meas, p["fit"], loo))
    return out


def worst(ratio: float) -> float:
    """A ratio as the factor x/÷ that covers it (0.8 -> 1.25)."""
    return max(ratio, 1 / ratio)


OLD_S_PER_BUCKET, OLD_MIB_PER_TOKEN = 76.9 / 4, 0.49 * 1024 / 8192
"""The estimate before the fit (SGLang PR #31203's four buckets): 19.2 s per bucket, 0.06 MiB per token of the largest."""


def before_after(data: dict[str, Any]) -> None:
    """The blog's setups, then the shipped presets with SGLang's default list at cp 4, chunk 8192."""
    from cpbcg.engines.sglang.server_inputs import model_spec
    from cpbcg.engines.sglang.capture_lists import sglang_default_buckets
    from cpbcg.planner.model.capacity import CaptureSpec, local_capacity, minimum_capture_tokens
    from cpbcg.planner.model.layout import CPLayout
    from cpbcg.planner.optimise.capture_cost import capture_model

    specs = data["specs"]
    print("setup                                  capture s before -> after (measured)   graph MiB before -> after (measured)")
    for p in data["capture"]:
        if p["fit"]:
            print(f"{p['model'] + ', ' + str(p['shapes']) + ' shapes TP4 GB300':<38} {p['shapes'] * OLD_S_PER_BUCKET:>8.0f} -> "
                  f"{pub.capture_seconds(specs[p['model']], p['shapes']):.1f} ({p['measured_s']})")
    for p in data["memory"]:
        spec = specs[p["model"]]
        after = pub.graph_pool_mib(spec, p["rows"], p["tp"]) + p["graphs"] * pub.per_graph_mib(spec)
        print(f"{p['model'] + ' TP' + str(p['tp']) + ', largest ' + str(p['rows']):<38} {'':>30} {p['rows'] * OLD_MIB_PER_TOKEN:>8.0f} -> "
              f"{after:.0f} ({p['measured_mib']})")
    for p in data["forward"]:
        if "speedup" in p:
            old = (24 + 0.05 * p["tokens"]) / (10 + 0.05 * p["tokens"])
            print(f"{p['model'] + ' ' + p['gpu'] + ' TP' + str(p['tp']) + ' speedup at ' + str(p['tokens']):<38} "
                  f"{old:>8.2f}x -> {_forward(specs, p, pub.FITTED):.2f}x ({p['speedup']}x{'' if p['fit'] else ', check'})")
    print()
    print("preset (cp 4, chunk 8192, SGLang's 57-bucket default list)   capture s before -> after   graph MiB before -> after (net)")
    cp, spec = CPLayout(4), CaptureSpec()
    buckets = [b for b in sglang_default_buckets(8192) if b >= minimum_capture_tokens(cp)]  # what 0.5.23 captures
    capacity = [int(c) for c in local_capacity(buckets, cp, spec)]
    kept = [(b, c) for b, c in zip(buckets, capacity)]
    for name in ("llama-3.1-70b", "qwen3-32b", "gpt-oss-120b"):
        model = model_spec(name, "--model-config")
        est = capture_model(model, None, 4, 8192, capacity[-1]).estimate([b for b, _ in kept], capacity[-1])
        print(f"{name:<61} {len(kept) * OLD_S_PER_BUCKET:>8.0f} -> {est.capture_s:.0f}   {max(buckets) * OLD_MIB_PER_TOKEN:>8.0f} -> "
              f"{est.graph_mib:.0f} ({est.net_mib:+.0f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when cpbcg's FITTED constants differ from the refit")
    parser.add_argument("--presets", action="store_true", help="print the before/after estimates of the blog's setups and the presets")
    args = parser.parse_args()
    data = load()
    if args.presets:
        before_after(data)
        return 0
    params = fit(data)
    print(f"{'what':<10} {'estimate':>9} {'measured':>9} {'ratio':>6} {'LOO':>6}  fit  source")
    rows = errors(data, params)
    for kind, source, est, meas, fitted, loo in rows:
        print(f"{kind:<10} {est:>9.4g} {meas:>9.4g} {est / meas:>6.2f} {'' if loo is None else f'{loo:.2f}':>6}  "
              f"{'yes' if fitted else 'no ':<3}  {source}")
    print("constants:", params)
    for label, kinds, shipped in (("capture", ("capture s",), pub.CAPTURE_RANGE), ("memory", ("graph MiB",), pub.MEMORY_RANGE),
                                  ("forward", ("speedup x", "eager ms", "graph ms"), pub.FORWARD_RANGE)):
        loos = [worst(loo) for kind, _, _, _, fitted, loo in rows if kind in kinds and loo is not None]
        print(f"{label}: worst leave-one-out error x/÷{max(loos, default=1.0):.2f}; printed range x/÷{shipped:g}")
    if params != pub.FITTED:
        print(f"cpbcg's FITTED differs: {pub.FITTED}")
        return 1 if args.check else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
