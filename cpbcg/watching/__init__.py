"""`cpbcg watch`: follow running SGLang servers' logs (and metrics endpoints), judge their
prefill graphs over rolling windows, export Prometheus metrics, gate a canary (docs/watch.md).

Layers: `follow` (files like `tail -F`, standard input), `cpbcg.engines.sglang.logs.lines` (the one adapter onto the
SGLang log reader), `cpbcg.engines.sglang.metrics` (SGLang's Prometheus endpoint), `exporter` (cpbcg's own metrics),
`session` (the loop, windows and gates); the rules themselves are the planner's
(`cpbcg.assembly.window`, `evaluate`, `observed`) and `cpbcg.gates.gates`'.
"""
