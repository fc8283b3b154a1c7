"""0.5.23 `arg_groups/pd_disaggregation_hook.py`: the PD-disaggregation checks that refuse a start. A step of
`pipeline.STEPS`; the graph roles of a PD server are `cuda_graph.apply_cuda_graph_disaggregation_roles`."""

from __future__ import annotations

from cpbcg.engines.sglang.startup.state import Resolution


def handle_pd_disaggregation(r: Resolution) -> None:
    """`handle_pd_disaggregation`: a PD prefill server (`--disaggregation-mode prefill`) refuses the `fake`
    transfer backend (its assert); it captures no decode CUDA graph (`apply_cuda_graph_disaggregation_roles`),
    said in a note. Its other checks (decode host buffering, role switching, radix cache on decode, the
    `prefill_complete` policy) read arguments cpbcg does not model (`NOT_MODELLED`)."""
    mode = r.raw("disaggregation_mode", "null")
    if mode == "prefill" and r.raw("disaggregation_transfer_backend", "mooncake") == "fake":
        r.refuse("handle_pd_disaggregation", "Prefill server does not support 'fake' as the transfer backend")
    if mode == "prefill":
        r.notes.append("--disaggregation-mode prefill: 0.5.23 captures no decode CUDA graph on a PD prefill server "
                       "(apply_cuda_graph_disaggregation_roles); its prefill graphs are planned")
