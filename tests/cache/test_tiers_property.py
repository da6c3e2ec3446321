"""Property test of the tiers below the pool: random requests (match, load back, compute,
insert), evictions (which spill), tier LRU drops, disk restarts, corrupted and deleted files and
flushes, through the real KVCacheManager, RadixCache, HostTier and DiskTier.

The K/V of a token is a function of its namespace and its whole path (`kv_value`), written into
the pool when a request "computes" it. After every admission each cached token's K/V in the
pool must equal that function: a block loaded from the wrong prefix, a stale or corrupted file,
or a slot reused while a tier still read it would show. After every step the tree passes
`check_integrity`, the pool is whole, each tier stays within its bound, and the disk tier's
byte count equals the sizes of its files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from radixrt.cache.kv_manager import KVCacheManager
from radixrt.cache.memory_pool import ReqToTokenPool, TokenSlotAllocator, TokenToKVPool
from radixrt.cache.paged_allocator import PagedSlotAllocator
from radixrt.cache.radix_cache import RadixCache
from radixrt.cache.tiers.disk import DiskTier
from radixrt.cache.tiers.disk_format import BlockSpec
from radixrt.cache.tiers.hierarchy import KVTiers
from radixrt.cache.tiers.host import HostTier
from radixrt.cache.tiers.spill import SpillToTiers
from radixrt.core import Req, SamplingParams

CAPACITY = 32
LAYERS, HEADS, DIM = 2, 1, 2
NAMESPACES = st.sampled_from([None, "a"])
TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=14)  # many shared prefixes
FINGERPRINT = "ab" * 32


def kv_value(extra_key: str | None, path: list[int]) -> float:
    """The K of the last token of `path` (its V is the negation); unique per path."""
    return float(hash((extra_key, tuple(path))) % 100_003)


class TiersMachine(RuleBasedStateMachine):
    page_size = 1
    block_size = 2
    host_blocks = 3  # 0: no host tier
    disk_blocks = 6
    device = "cpu"

    def __init__(self) -> None:
        super().__init__()
        p = self.page_size
        self.dir = Path(tempfile.mkdtemp(prefix="radixrt-tiers-"))
        self.pool = TokenToKVPool(CAPACITY, LAYERS, HEADS, DIM, torch.float32, self.device, p)
        self.alloc = (
            PagedSlotAllocator(CAPACITY, p) if p > 1 else TokenSlotAllocator(CAPACITY)
        )  # fmt: skip
        shape = (LAYERS, 2, self.block_size, HEADS, DIM)
        self.spec = BlockSpec(FINGERPRINT, self.block_size, torch.float32, shape)
        block_bytes = LAYERS * 2 * self.block_size * HEADS * DIM * 4
        tiers = []
        if self.host_blocks:
            tiers.append(HostTier(shape, torch.float32, self.host_blocks * block_bytes,
                                  pin_memory=self.device == "cuda"))  # fmt: skip
        self.file_bytes = block_bytes + 400  # header and path: well below 400 bytes here
        tiers.append(self._disk())
        self.tiers = KVTiers(self.pool, tiers, self.block_size, FINGERPRINT, 0)
        self.cache = RadixCache(self.alloc, p)
        self.cache.observers.add(SpillToTiers(self.tiers))
        rows = ReqToTokenPool(2, 64, self.device)
        self.kv = KVCacheManager(self.alloc, rows, self.cache, self.tiers)
        self.num = 0
        self.history: list[tuple[list[int], str | None]] = []

    def _disk(self) -> DiskTier:
        return DiskTier(self.dir, self.spec, self.disk_blocks * self.file_bytes)

    @property
    def disk(self) -> DiskTier:
        tier = self.tiers.tiers[-1]
        assert isinstance(tier, DiskTier)
        return tier

    def teardown(self) -> None:
        self.tiers.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- rules ---------------------------------------------------------------------------

    @rule(key=TOKENS, extra_key=NAMESPACES)
    def run_request(self, key: list[int], extra_key: str | None) -> None:
        """Admit (match + load back), check every cached token's K/V, compute the rest,
        finish (insert); the request holds its slots only in between."""
        self.history.append((key, extra_key))
        self._run(key, extra_key)

    @precondition(lambda self: self.history)
    @rule(which=st.integers(0, 999), evict_first=st.booleans())
    def repeat_request(self, which: int, evict_first: bool) -> None:
        """An earlier prompt again, after evicting everything evictable or not."""
        if evict_first:
            self.cache.evict(CAPACITY)
        self._run(*self.history[which % len(self.history)])

    def _run(self, key: list[int], extra_key: str | None) -> None:
        self.num += 1
        corrupt = sum(t.counters.corrupt_blocks for t in self.tiers.tiers)
        req = Req(f"r{self.num}", key, SamplingParams(max_new_tokens=1), extra_key=extra_key)
        self.kv.admit(req)
        by_tier = req.cached_tokens_by_tier
        assert sum(by_tier.values()) == req.cached_tokens == req.cached_len
        for name in ("host", "disk"):
            if by_tier.get(name):
                event(f"loaded from {name}")
        if sum(t.counters.corrupt_blocks for t in self.tiers.tiers) > corrupt:
            event("a damaged block was refused")
        self._check_values(req, 0, req.cached_len)
        req.extend_len = req.seq_len - req.kv_len
        try:
            out_loc = self.kv.alloc_for([req])
        except Exception:  # the pool is too small while this prefix is locked: give up
            self.kv.release(req)
            return
        for i, slot in enumerate(out_loc.tolist()):
            v = kv_value(extra_key, key[: req.kv_len + i + 1])
            for layer in range(LAYERS):
                k_buf, v_buf = self.pool.get_kv_buffer(layer)
                k_buf[slot], v_buf[slot] = v, -v
        req.kv_len = req.seq_len
        self._check_values(req, 0, req.kv_len)
        self.kv.release(req)

    @rule(num_tokens=st.integers(0, CAPACITY))
    def evict(self, num_tokens: int) -> None:
        self.cache.evict(num_tokens)

    @rule()
    def restart_disk(self) -> None:
        """A new process on the same folder: its index comes from the files alone."""
        self.disk.close()
        self.tiers.tiers[-1] = self._disk()

    @rule(data=st.data())
    def damage_a_file(self, data: st.DataObject) -> None:
        """Flip a byte, truncate, or delete a block file behind the tier's back."""
        # Draws do not depend on the files (their number varies with write timing).
        which, at = data.draw(st.integers(0, 999)), data.draw(st.integers(0, 9999))
        how = data.draw(st.sampled_from(["flip", "truncate", "delete"]))
        self.disk.flush()
        files = sorted(self.dir.rglob("*.kv"))
        if not files:
            return
        f = files[which % len(files)]
        raw = bytearray(f.read_bytes())
        if how == "flip":
            raw[at % len(raw)] ^= 0x40
            f.write_bytes(raw)
        elif how == "truncate":
            f.write_bytes(raw[: len(raw) // 2])
        else:
            os.unlink(f)

    @precondition(lambda self: self.kv.cache.root.lock_ref == 0)
    @rule(disk=st.booleans())
    def flush(self, disk: bool) -> None:
        self.cache.reset()
        cleared = self.tiers.clear(disk)
        assert ("disk" in cleared) == disk
        if disk:
            assert not list(self.dir.rglob("*.kv"))

    # ---- invariants ----------------------------------------------------------------------

    @invariant()
    def whole_and_bounded(self) -> None:
        self.cache.check_integrity()
        self.kv.check_whole()
        for tier in self.tiers.tiers:
            assert tier.used_bytes <= tier.capacity_bytes, tier.name
        self.disk.flush()
        on_disk = sum(f.stat().st_size for f in self.dir.rglob("*.kv"))
        # Files deleted behind the tier's back are still counted until looked up.
        assert self.disk.used_bytes >= on_disk

    def _check_values(self, req: Req, lo: int, hi: int) -> None:
        row = req.req_pool_idx
        assert row is not None
        slots = self.kv.req_to_token_pool.req_to_token[row, lo:hi].to(torch.int64)
        want = torch.tensor(
            [kv_value(req.extra_key, req.input_ids[: i + 1]) for i in range(lo, hi)]
        )
        for layer in range(LAYERS):
            k_buf, v_buf = self.pool.get_kv_buffer(layer)
            k_got, v_got = k_buf[slots.to(k_buf.device)].cpu(), v_buf[slots.to(k_buf.device)].cpu()
            assert torch.equal(k_got[:, 0, 0], want), f"layer {layer} K of {req.input_ids}"
            assert torch.equal(v_got[:, 0, 0], -want), f"layer {layer} V"


class PagedTiersMachine(TiersMachine):
    page_size = 2
    block_size = 4
    host_blocks = 2
    disk_blocks = 4


class DiskOnlyTiersMachine(TiersMachine):
    host_blocks = 0
    disk_blocks = 5


class CudaTiersMachine(TiersMachine):
    """The same on a CUDA pool: pinned host buffers, device-to-host gathers in one copy,
    host-to-device loads (hierarchy.py's CUDA paths)."""

    device = "cuda"


class CudaPagedTiersMachine(PagedTiersMachine):
    device = "cuda"


_SETTINGS = settings(
    max_examples=int(os.environ.get("TIERS_EXAMPLES", 60)), stateful_step_count=40, deadline=None
)
TestTiers = TiersMachine.TestCase
TestTiers.settings = _SETTINGS
TestPagedTiers = PagedTiersMachine.TestCase
TestPagedTiers.settings = _SETTINGS
TestDiskOnlyTiers = DiskOnlyTiersMachine.TestCase
TestDiskOnlyTiers.settings = _SETTINGS
TestCudaTiers = pytest.mark.gpu(CudaTiersMachine.TestCase)
TestCudaTiers.settings = _SETTINGS
TestCudaPagedTiers = pytest.mark.gpu(CudaPagedTiersMachine.TestCase)
TestCudaPagedTiers.settings = _SETTINGS
