"""Prefix cache over `hash_ids` (512-token blocks), as SGLang's radix cache sees a trace."""

from __future__ import annotations

from collections import OrderedDict

from cpbcg.planner.traces.records import BLOCK_TOKENS


class PrefixCache:
    """Prefix cache over 512-token blocks: `unlimited` (never evicts) or LRU of `capacity_tokens`.

    Hash ids name a block together with everything before it (Mooncake's remapped prefix
    hashes), so a request's hit is the run of its leading ids already cached. LRU order is
    kept leaf-first like a radix tree's eviction: a request's blocks are touched last block
    first, so its first block is the most recent and evicted last.
    """

    def __init__(self, capacity_tokens: int | None):
        self.capacity_blocks = None if capacity_tokens is None else capacity_tokens // BLOCK_TOKENS
        self._blocks: set[int] | OrderedDict[int, None] = set() if capacity_tokens is None else OrderedDict()

    def cached_tokens(self, hash_ids: list[int], input_tokens: int) -> int:
        """Tokens of the request's prompt already cached, at most `input_tokens - 1`."""
        blocks, hit = self._blocks, 0
        for block in hash_ids:
            if block not in blocks:
                break
            hit += 1
        if hit and isinstance(blocks, OrderedDict):
            for block in reversed(hash_ids[:hit]):
                blocks.move_to_end(block)
        return min(hit * BLOCK_TOKENS, input_tokens - 1)

    def insert(self, hash_ids: list[int]) -> None:
        """Cache every block of a request whose prefill finished (evicting LRU blocks if full)."""
        blocks = self._blocks
        if not isinstance(blocks, OrderedDict):
            blocks.update(hash_ids)
            return
        for block in reversed(hash_ids):
            blocks[block] = None
            blocks.move_to_end(block)
        while self.capacity_blocks is not None and len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)


def make_cache(setting: str | int) -> PrefixCache | None:
    """The cache for `SchedulerSettings.prefix_cache` (`off` gives None)."""
    if setting == "off":
        return None
    return PrefixCache(None if setting == "unlimited" else int(setting))
