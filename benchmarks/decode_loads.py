"""Decode graphs at rising load: SGLang 0.5.23's default decode list against cpbcg's recommended one.

Run: `python benchmarks/decode_loads.py [--trace ../shared/traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv]
[--loads 1,2,3,4,6,8] [-- extra plan options, e.g. --gpu H100 --cp-size 1]`

1. `cpbcg plan --format json --time-scale LOADS` on the trace: the server's decode list as 0.5.23
   captures it (its `max_bs`) and the list cpbcg recommends from the simulated decode steps of all loads;
2. `cpbcg.api.decode_loads`: the trace simulated again at each load with each `max_bs` in the loop
   (a decode step above it runs eagerly, 2.06x the step time: the assumed factor of sglang #40346),
   so eager steps lengthen the running requests' stay (the fall-off feedback).

Prints one Markdown table (what the README shows). The step times are the scheduler's model
(`--decode-fixed-ms`, `--decode-ms-per-request`), not measurements.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from cpbcg import api


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", default="../shared/traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv")
    parser.add_argument("--loads", default="1,2,3,4,6,8")
    parser.add_argument("extra", nargs="*", help="further plan options (after --)")
    args = parser.parse_args()
    loads = [float(x) for x in args.loads.split(",")]
    cmd = [sys.executable, "-m", "cpbcg", "plan", "-t", args.trace, "--format", "json", "--time-scale", args.loads, "-j", "1", *args.extra]
    doc = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    decode = doc["decode"]
    default_bs, recommended_bs = decode["server"]["max_bs"], decode["recommended"]["max_bs"]
    overrides: dict[str, object] = {}
    for i, word in enumerate(args.extra):
        if word == "--gpu":
            overrides["server.gpu"] = args.extra[i + 1]
        elif word == "--cp-size":
            overrides["cp_size"] = int(args.extra[i + 1])
    deployment = api.load_config_and_deployment(None, overrides)[1]
    rows = api.decode_loads(args.trace, deployment, loads, {"SGLang default": default_bs, "recommended": recommended_bs})
    print(f"trace {args.trace}; plan options {' '.join(args.extra) or '(defaults)'}; "
          f"SGLang 0.5.23 decode max_bs {default_bs} ({decode['server']['max_bs_rule']}), recommended {recommended_bs}")
    print("| load | list (max_bs) | decode steps | eager steps | eager share | most running | decode s | span s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['load']:g}x | {r['list']} ({r['max_bs']}) | {r['decode_steps']:,} | {r['eager_steps']:,} | {100 * r['eager_share']:.1f}% "
              f"| {r['max_running']} | {r['decode_s']:,.0f} | {r['simulated_s']:,.0f} |")


if __name__ == "__main__":
    main()
