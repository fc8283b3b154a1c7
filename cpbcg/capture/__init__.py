"""`cpbcg capture`: real breakable CUDA graphs per bucket on a proxy model (the only torch user).

Modules: `presets` (model dims, no torch), `model` (proxy layers and graph pieces), `zigzag`
(CP sharding, gather, attention), `graphs` (capture/replay with static buffers and one pool),
`comm` (emulated or NCCL rank groups), `layouts` (live layouts to replay), `forward`
(CP forward, verification, timing), `harness` (orchestration, `replay_batches`), `report`
(manifest document). See docs/capture.md.
"""
