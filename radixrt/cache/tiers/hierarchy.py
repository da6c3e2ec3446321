"""The tiers below the device pool as one hierarchy: what the radix tree spills into when it
evicts, and what admission loads back from.

Who owns which copy of a block's K/V, and when it goes:

| copy                        | owner                  | written               | freed            |
|-----------------------------|------------------------|-----------------------|------------------|
| device slots (a tree node's)| the radix tree         | the forward pass      | `evict` (after   |
|                             |                        |                       | `spill`), reset  |
| host buffer slot            | HostTier               | `spill`,              | its LRU (pushed  |
|                             |                        | `write_through`       | to disk), clear  |
| file `<hash>.kv`            | DiskTier, shared with  | its writer thread     | its LRU,         |
|                             | processes on the folder|                       | clear(disk)      |
| a loaded block's new slots  | the request, then the  | `load`                | as the tree's    |
|                             | tree (`insert`)        |                       | other slots      |

The radix tree indexes the device pool only; a lower tier is indexed by block hashes
(radixrt/cache/blocks.py), so a tier may drop any block at any time and the tree never points
at a dropped copy. A device node's blocks are spilled when it is evicted (write-back), unless a
tier already holds them; prefixes of at least `write_through_min_tokens`, and pinned ones, are
also written to the lowest tier as soon as they are in the tree (write-through), which is what
a restart finds. Admission (KVCacheManager.admit) asks `lookup` for whole blocks that continue
the device match, allocates device slots, and `load`s them before the request's extend.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from radixrt.cache.blocks import blocks_ending_in, chain_hashes, root_hash
from radixrt.cache.kv_layout import write_rows
from radixrt.cache.memory_pool import TokenToKVPool
from radixrt.cache.tiers.base import BaseKVTier, Block
from radixrt.cache.tiers.contract import BaseKVTiers, LoadResult, TierHit, TierInfo
from radixrt.cache.tree_node import TreeNode, path_nodes


class KVTiers(BaseKVTiers):
    """Host and/or disk tiers (top first) over `pool`; blocks of `block_size` tokens whose
    hashes start from the model's fingerprint."""

    def __init__(self, pool: TokenToKVPool, tiers: list[BaseKVTier], block_size: int,
                 fingerprint: str, write_through_min_tokens: int) -> None:  # fmt: skip
        if not tiers:
            raise ValueError("KVTiers needs at least one tier (else use NoKVTiers)")
        self.pool = pool
        self.tiers = tiers
        self.names = tuple(t.name for t in tiers)
        self.block_size = block_size
        self.salt = bytes.fromhex(fingerprint)
        self.write_through_min_tokens = write_through_min_tokens
        self._roots: dict[str | None, bytes] = {}

    # ---- spill and write-through ---------------------------------------------------------

    def spill(self, node: TreeNode) -> None:
        tokens, slots, start = _path(node)
        blocks = blocks_ending_in(start, len(tokens), self.block_size)
        if not blocks:
            return
        hashes = chain_hashes(tokens, self.block_size, self._root(node.extra_key), blocks.stop)
        todo = [b for b in blocks if not any(t.contains(hashes[b]) for t in self.tiers)]
        for block in self._gather(tokens, slots, todo, hashes, node.extra_key):
            self._put(0, block)

    def wants_write_through(self, num_tokens: int) -> bool:
        m = self.write_through_min_tokens  # 0: write-back only
        return m > 0 and num_tokens >= m

    def write_through(self, node: TreeNode) -> None:
        tokens, slots, _ = _path(node)
        n = len(tokens) // self.block_size
        hashes = chain_hashes(tokens, self.block_size, self._root(node.extra_key), n)
        last = len(self.tiers) - 1
        todo = [b for b in range(n) if not self.tiers[last].contains(hashes[b])]
        for block in self._gather(tokens, slots, todo, hashes, node.extra_key):
            self._put(last, block)

    # ---- lookup and load -----------------------------------------------------------------

    def lookup(self, key: list[int], extra_key: str | None, start: int) -> TierHit | None:
        b = self.block_size
        first, n = start // b, len(key) // b
        if first >= n:
            return None
        hashes = chain_hashes(key, b, self._root(extra_key), n)
        keys: list[bytes] = []
        where: list[int] = []
        for h in hashes[first:]:
            tier = next((i for i, t in enumerate(self.tiers) if t.contains(h)), None)
            if tier is None:
                break
            keys.append(h)
            where.append(tier)
        if not keys:
            return None
        end = (first + len(keys)) * b
        path = np.asarray(key[:end], dtype=np.uint32)
        return TierHit(start, end, first, keys, where, path, extra_key)

    def load(self, hit: TierHit, slots: torch.Tensor) -> LoadResult:
        t0 = time.perf_counter()
        b = self.block_size
        result = LoadResult()
        datas: list[torch.Tensor] = []
        for i, (h, tier_idx) in enumerate(zip(hit.keys, hit.tiers)):
            tier = self.tiers[tier_idx]
            index = hit.first_block + i
            data = tier.get(h, index, hit.path, hit.extra_key)
            if data is None:
                break
            lo = max(index * b, hit.start)
            datas.append(data[:, :, lo - index * b :])
            got = (index + 1) * b - lo
            result.by_tier[tier.name] = result.by_tier.get(tier.name, 0) + got
            tier.counters.hit_tokens += got
            tier.counters.loaded_blocks += 1
            result.tokens += got
        if datas:
            self._scatter(datas, slots[: result.tokens])
        result.seconds = time.perf_counter() - t0
        for name in result.by_tier:  # the time is shared by the tiers that served
            tier = next(t for t in self.tiers if t.name == name)
            tier.counters.load_s += result.seconds / len(result.by_tier)
        return result

    def clear(self, disk: bool) -> list[str]:
        cleared = []
        for tier in self.tiers:
            if tier.name != "disk" or disk:
                tier.clear()
                cleared.append(tier.name)
        return cleared

    def info(self) -> list[TierInfo]:
        out = []
        for t in self.tiers:
            c = t.counters
            out.append(TierInfo(t.name, t.num_blocks, t.num_blocks * self.block_size,
                                t.used_bytes, t.capacity_bytes, c.stored_blocks,
                                c.dropped_blocks, c.hit_tokens, c.loaded_blocks, c.load_s,
                                c.corrupt_blocks, c.write_errors))  # fmt: skip
        return out

    def close(self) -> None:
        for tier in self.tiers:
            tier.close()

    # ---- private -------------------------------------------------------------------------

    def _root(self, extra_key: str | None) -> bytes:
        root = self._roots.get(extra_key)
        if root is None:
            if len(self._roots) > 4096:
                self._roots.clear()
            root = self._roots[extra_key] = root_hash(self.salt, extra_key)
        return root

    def _put(self, level: int, block: Block) -> None:
        """Put `block` in tier `level`; what its LRU pushes out goes one tier down."""
        pushed = self.tiers[level].put(block)
        if level + 1 < len(self.tiers):
            for old in pushed:
                self._put(level + 1, old)

    def _gather(self, tokens: list[int], slots: torch.Tensor, todo: list[int],
                hashes: list[bytes], extra_key: str | None) -> list[Block]:  # fmt: skip
        """Copy blocks `todo` of the path out of the device pool: a CPU tensor
        (num_layers, 2, B, num_kv_heads, row_width) per block (pinned with CUDA; fp8 rows
        carry their scales, memory_pool.py).

        On the CPU each block is copied on its own: block-sized copies stay in the heap the
        process reuses, while one large temporary costs fresh pages and, measured here, runs
        up to 6x slower on two cores. On CUDA the blocks are gathered on the device and
        brought over in one copy."""
        if not todo:
            return []
        b, pool = self.block_size, self.pool
        rows = [slots[i * b : (i + 1) * b].to(pool.device, torch.int64) for i in todo]
        shape = (pool.num_layers, 2, b, pool.num_kv_heads, pool.row_width)
        if pool.device.type == "cpu":
            datas = []
            for idx in rows:
                out = torch.empty(shape, dtype=pool.dtype)
                for layer in range(pool.num_layers):
                    k, v = pool.get_kv_buffer(layer)
                    torch.index_select(k, 0, idx, out=out[layer, 0])
                    torch.index_select(v, 0, idx, out=out[layer, 1])
                datas.append(out)
        else:
            idx = torch.cat(rows)
            n = len(todo)
            stacked = torch.empty((n, *shape), dtype=pool.dtype, device=pool.device)
            for layer in range(pool.num_layers):
                k, v = pool.get_kv_buffer(layer)
                stacked[:, layer, 0].copy_(k.index_select(0, idx).view(n, *shape[2:]))
                stacked[:, layer, 1].copy_(v.index_select(0, idx).view(n, *shape[2:]))
            host = torch.empty(stacked.shape, dtype=pool.dtype, pin_memory=True)
            host.copy_(stacked)  # synchronous: the pinned copy is complete on return
            datas = list(host.unbind(0))
        path = np.asarray(tokens[: (todo[-1] + 1) * b], dtype=np.uint32)
        return [Block(hashes[i], i, path, datas[j], extra_key) for j, i in enumerate(todo)]

    def _scatter(self, datas: list[torch.Tensor], slots: torch.Tensor) -> None:
        """Write `datas` (each (num_layers, 2, n_i, num_kv_heads, head_dim), in order) at
        device `slots` (sum n_i,): block by block on the CPU (see `_gather`), in one pass per
        layer on CUDA after the blocks are on the device."""
        pool = self.pool
        idx = slots.to(pool.device, torch.int64)
        if pool.device.type == "cpu":
            pos = 0
            for data in datas:
                rows = idx[pos : pos + data.shape[2]]
                pos += data.shape[2]
                for layer in range(pool.num_layers):
                    k, v = pool.get_kv_buffer(layer)
                    write_rows(k, rows, data[layer, 0])
                    write_rows(v, rows, data[layer, 1])
            return
        on_device = torch.cat([d.to(pool.device, non_blocking=True) for d in datas], dim=2)
        for layer in range(pool.num_layers):
            k, v = pool.get_kv_buffer(layer)
            write_rows(k, idx, on_device[layer, 0])
            write_rows(v, idx, on_device[layer, 1])


def _path(node: TreeNode) -> tuple[list[int], torch.Tensor, int]:
    """The token path from the root to `node`'s end, its slots, and where `node` starts."""
    chain = path_nodes(node)
    tokens = [t for n in chain for t in n.key]
    slots = torch.cat([n.slots for n in chain]) if chain else torch.empty(0, dtype=torch.int64)
    return tokens, slots, len(tokens) - len(node.key)
