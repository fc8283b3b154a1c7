"""Refit the cost models' constants to the published measurements and print the error on each.

    python benchmarks/fit_costs.py            # the fit, every point's error, the constants
    python benchmarks/fit_costs.py --check    # exit 1 when cpbcg's FITTED differs from the refit
    python benchmarks/fit_costs.py --presets  # before/after: the blog's setups and the shipped presets
    python benchmarks/fit_costs.py --held-out [--before DIR]  # every point the fit did not see: its
        # estimate before (the cpbcg checkout DIR, default /work/wt/base40) and after, and the measurement

Data: benchmarks/cost_points.yaml (every point, its source and whether it is fitted). Formulas:
cpbcg/planner/costs/published.py (the one copy; this script only chooses their constants).
Fits are least squares on log(estimate / measurement): capture time (one constant, the start-up
taken from its own point), graph memory (two constants, linear, on the breakable points; the
tc_piecewise share of the MoE caches from its own points), forward time (three constants, a grid
search refined around its best point). Points with `fit: false` are held out: never fitted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

# CPBCG_ROOT: the checkout whose formulas to use (--held-out runs this script again on the "before" checkout)
sys.path.insert(0, os.environ.get("CPBCG_ROOT") or str(Path(__file__).resolve().parents[1]))

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


def _cached(cache: dict[tuple[Any, ...], np.ndarray] | None, key: tuple[Any, ...], search: Callable[[], np.ndarray]) -> np.ndarray:
    """`search()`, or its result for the same `key` in `cache` (None: no cache)."""
    if cache is None:
        return search()
    if key not in cache:
        cache[key] = search()
    return cache[key]


def fit(data: dict[str, Any], cache: dict[tuple[Any, ...], np.ndarray] | None = None) -> pub.CostParams:
    """The constants fitted to `data`'s points marked `fit`. `cache` (one `errors` call's) keeps each section's
    grid search by the points it fits: a leave-one-out refit of a memory point reuses the capture and forward
    searches, which do not read it (the same numbers, searched once)."""
    specs = data["specs"]
    startup = float(data["startup"]["measured_s"])
    cap = [p for p in data["capture"] if p["fit"]]

    def cap_loss(x: np.ndarray) -> float:
        params = dataclasses.replace(pub.FITTED, capture_startup_s=startup, capture_ms_per_layer=float(x[0]))
        return sum(math.log(pub.capture_seconds(specs[p["model"]], p["shapes"], params) / p["measured_s"]) ** 2 for p in cap)

    (c_layer,) = _cached(cache, ("capture", startup, repr(cap)), lambda: _minimise(cap_loss, [0.1], [100.0], steps=41))
    mem = [p for p in data["memory"] if p["fit"] and p.get("backend", "breakable") == "breakable"]
    unit = dataclasses.replace(pub.FITTED, pool_fraction=1.0, graph_mib_per_layer=1.0)
    a = np.array([[pub.graph_pool_mib(specs[p["model"]], p["rows"], p["tp"], unit) / p["measured_mib"],
                   p["graphs"] * pub.per_graph_mib(specs[p["model"]], unit) / p["measured_mib"]] for p in mem])
    if len(mem) >= 2:
        (pool, per_graph), *_ = np.linalg.lstsq(a, np.ones(len(mem)), rcond=None)
    else:  # one point left (leave-one-out): no per-graph term (nothing left to tell it from the pool), the pool fitted to it
        per_graph = 0.0
        pool = float(np.mean(1 / a[:, 0]))
    pooled = dataclasses.replace(pub.FITTED, pool_fraction=_r(pool), graph_mib_per_layer=_r(per_graph), tc_piecewise_cache_fraction=1.0)
    shares = [(p["measured_mib"] - pub.graph_pool_mib(specs[p["model"]], p["rows"], p["tp"], pooled)
               - p["graphs"] * pub.per_graph_mib(specs[p["model"]], pooled))
              / pub.moe_cache_mib(specs[p["model"]], p["rows_sum"], p["tp"], "tc_piecewise", pooled)
              for p in data["memory"] if p["fit"] and p.get("backend") == "tc_piecewise"]
    tc_share = float(np.exp(np.mean(np.log(shares)))) if shares else pub.FITTED.tc_piecewise_cache_fraction
    fwd = [p for p in data["forward"] if p["fit"]]

    def fwd_loss(x: np.ndarray) -> float:
        params = dataclasses.replace(pub.FITTED, graph_fixed_ms_per_layer=float(x[0]), eager_fixed_ms_per_layer=float(x[1]),
                                     matmul_efficiency=float(x[2]))
        return sum(math.log(_forward(specs, p, params) / _forward_measured(p)) ** 2 for p in fwd)

    g, e, eff = _cached(cache, ("forward", repr(fwd)), lambda: _minimise(fwd_loss, [0.01, 0.01, 0.05], [5.0, 10.0, 0.7]))
    return pub.CostParams(round(startup, 5), _r(c_layer), _r(pool), _r(per_graph), _r(g), _r(e), _r(eff), float(f"{tc_share:.2g}"))


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
        return "graph MiB", memory_mib(specs[p["model"]], p, params), p["measured_mib"]
    kind = "speedup x" if "speedup" in p else ("eager ms" if "eager_ms" in p else "graph ms")
    return kind, _forward(specs, p, params), _forward_measured(p)


SECTIONS = ("capture", "memory", "forward")


def memory_mib(spec: Any, p: dict[str, Any], params: Any = None) -> float:
    """Graph MiB of memory point `p` under this checkout's formulas (an older checkout has no MoE
    cache term: its pool and per-graph term are the whole estimate)."""
    params = params or pub.FITTED
    if hasattr(pub, "graph_memory_mib"):
        return pub.graph_memory_mib(spec, p["rows"], p["rows_sum"], p["graphs"], p["tp"], p.get("backend", "breakable"), params)
    return pub.graph_pool_mib(spec, p["rows"], p["tp"], params) + p["graphs"] * pub.per_graph_mib(spec, params)


def held_out_estimates(data: dict[str, Any]) -> dict[str, list[float]]:
    """Every point's estimate under this checkout's shipped constants, per section (what
    `--held-out` reads from the "before" checkout)."""
    return {section: [_estimate(data["specs"], section, p, pub.FITTED)[1] for p in data[section]] for section in SECTIONS}


def held_out(data: dict[str, Any], before_root: Path) -> list[tuple[str, str, str, float | None, float, float]]:
    """(section, backend, source, estimate before, estimate after, measured) of every held-out
    point (`fit: false`); `before` runs this script on the checkout `before_root` (None where it
    could not run)."""
    before: dict[str, list[float]] | None = None
    if (before_root / "cpbcg").is_dir():
        run = subprocess.run([sys.executable, __file__, "--estimates-json"], capture_output=True, text=True,
                             env={**os.environ, "CPBCG_ROOT": str(before_root), "PYTHONPATH": str(before_root)})
        before = json.loads(run.stdout) if run.returncode == 0 else None
    after = held_out_estimates(data)
    return [(section, p.get("backend", "breakable"), p["source"], before[section][i] if before else None, after[section][i],
             _estimate(data["specs"], section, p, pub.FITTED)[2])
            for section in SECTIONS for i, p in enumerate(data[section]) if not p["fit"]]


def backend_ratios(data: dict[str, Any]) -> list[tuple[str, str, str, float | None, float]]:
    """(quantity, backend, source, modelled ratio, measured ratio) of every `backends` point: the
    capture time and graph memory of another backend over breakable's on one dense model (the MoE
    caches share does not apply; the pool and per-graph terms are the same for every backend)."""
    out: list[tuple[str, str, str, float | None, float]] = []
    for p in data.get("backends", []):
        out.append(("capture", p["backend"], p["source"], getattr(pub, "BACKEND_CAPTURE_RATIO", {}).get(p["backend"]), p["capture_ratio"]))
        out.append(("memory", p["backend"], p["source"], 1.0, p["memory_ratio"]))
    return out


def errors(data: dict[str, Any], params: pub.CostParams) -> list[tuple[str, str, float, float, bool, float | None]]:
    """(kind, source, estimate, measurement, fitted, leave-one-out ratio) for every point: the
    leave-one-out ratio is the point's estimate over its measurement under the constants refitted
    without it (None for a point that was not fitted: its ratio is already out of sample)."""
    specs, out = data["specs"], []
    cache: dict[tuple[Any, ...], np.ndarray] = {}
    for section in SECTIONS:
        for i, p in enumerate(data[section]):
            kind, est, meas = _estimate(specs, section, p, params)
            loo = None
            if p["fit"]:
                held = {**data, section: [dict(q, fit=False) if j == i else q for j, q in enumerate(data[section])]}
                _, loo_est, _ = _estimate(specs, section, p, fit(held, cache))
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
        after = memory_mib(spec, p)
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
    parser.add_argument("--held-out", action="store_true", help="print every held-out point's estimate before and after, and its measurement")
    parser.add_argument("--before", type=Path, default=Path("/work/wt/base40"), help="the cpbcg checkout that gives 'before' (--held-out)")
    parser.add_argument("--estimates-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    data = load()
    if args.estimates_json:
        print(json.dumps(held_out_estimates(data)))
        return 0
    if args.held_out:
        print(f"{'what':<10} {'backend':<12} {'before':>9} {'after':>9} {'measured':>9} {'ratio before -> after':>22}  source")
        for section, backend, source, before, after, measured in held_out(data, args.before):
            kind = {"capture": "capture s", "memory": "graph MiB"}.get(section, "forward")
            was = "" if before is None else f"{before:>9.4g}"
            change = f"{'?' if before is None else f'{before / measured:.2f}'} -> {after / measured:.2f}"
            print(f"{kind:<10} {backend:<12} {was:>9} {after:>9.4g} {measured:>9.4g} {change:>22}  {source}")
        print("\nfitted points, each left out of the fit in turn (its out-of-sample error): estimate / measured")
        for kind, source, est, meas, fitted, loo in errors(data, pub.FITTED):
            if fitted and loo is not None:
                print(f"{kind:<10} {'breakable' if 'tc_piecewise' not in source else 'tc_piecewise':<12} in fit {est / meas:>5.2f}  "
                      f"left out {loo:>5.2f}  {source}")
        print("\nbackend against breakable (same model and buckets): modelled ratio, measured ratio, error")
        for quantity, backend, source, modelled, measured in backend_ratios(data):
            error = "not modelled" if modelled is None else f"{modelled / measured:.2f}"
            shown = "-" if modelled is None else f"{modelled:.2f}"
            print(f"{quantity:<10} {backend:<12} {shown:>9} {measured:>9.3f} {error:>14}  {source}")
        return 0
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
