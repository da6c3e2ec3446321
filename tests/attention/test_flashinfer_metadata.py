"""CPU checks of the FlashInfer page table, at page size 1 and 4: the same slots per request as
torch_native attends, and a plain-torch paged attention driven by that table (FlashInfer's
semantics: page ids, last page length) reproduces torch_native's output; a sliding window's
table is the whole one less the pages before the window."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from benchmarks.fixtures.synthetic import SyntheticPools
from radixrt.core.forward_batch import ForwardBatch, ForwardMode
from radixrt.model.attention.base import AttentionLayer
from radixrt.model.attention.flashinfer_metadata import (
    FlashInferMetadata,
    PageTables,
    build_flashinfer_metadata,
    paged_kv,
)
from radixrt.model.attention.torch_native import TorchNativeAttnBackend

LAYER = AttentionLayer(layer_id=1, num_heads=4, num_kv_heads=2, head_dim=16, scaling=16**-0.5)
MIXED = ([0, 7, 12, 3, 0], [9, 1, 5, 1, 1])  # prefills, decodes, an extend after a prefix
DECODE = ([4, 17, 1], [1, 1, 1])


def _pools(seed: int = 0, page_size: int = 1) -> SyntheticPools:
    return SyntheticPools(
        num_layers=2,
        num_kv_heads=LAYER.num_kv_heads,
        head_dim=LAYER.head_dim,
        capacity=200,
        max_reqs=8,
        max_context_len=64,
        dtype=torch.float32,
        device="cpu",
        seed=seed,
        page_size=page_size,
    )


def _torch_native_slots(backend: TorchNativeAttnBackend, fb: ForwardBatch) -> list[list[int]]:
    """The pool slots torch_native attends to for each request, from its own metadata."""
    slots: dict[int, list[int]] = {}
    starts = fb.extend_start_loc.tolist()
    for piece in backend._extend_pieces(0):
        i = starts.index(piece.q.start)
        slots[i] = (
            piece.kv_idx.tolist() if piece.kv_idx is not None else fb.out_loc[piece.q].tolist()
        )
    if backend._decode is not None:
        g = backend._decode
        prefix = {int(m): grp.prefix_slots.tolist() for grp in g.plan.groups for m in grp.members}
        rows = zip(g.rows.tolist(), g.plan.kv_idx, g.plan.mask[:, 0, 0], strict=True)
        for i, (row, idx, mask) in enumerate(rows):
            slots[starts.index(row)] = prefix.get(i, []) + idx[mask].tolist()
    return [slots[i] for i in range(fb.batch_size)]


def _slots(meta: FlashInferMetadata, b: int) -> list[int]:
    """Request b's KV slots as FlashInfer reads them: whole pages, the last one cut short."""
    p, kv = meta.page_size, meta.kv_indptr.tolist()
    pages = meta.kv_indices[kv[b] : kv[b + 1]].tolist()
    slots = [page * p + i for page in pages for i in range(p)]
    return slots[: len(slots) - p + int(meta.kv_last_page_len[b])]


def _paged_attention(q: torch.Tensor, meta: FlashInferMetadata, fb: ForwardBatch) -> torch.Tensor:
    """FlashInfer's semantics in plain torch: pages of meta.page_size, causal aligned to each
    KV's end."""
    k_buf, v_buf = fb.token_to_kv_pool.get_kv_buffer(LAYER.layer_id)
    out = torch.empty_like(q)
    qo = meta.qo_indptr.tolist()
    for b in range(fb.batch_size):
        slots = torch.tensor(_slots(meta, b))
        q_len, kv_len = qo[b + 1] - qo[b], slots.numel()
        q_pos = torch.arange(kv_len - q_len, kv_len)
        mask = torch.arange(kv_len)[None, :] <= q_pos[:, None]  # (q_len, kv_len)
        out[qo[b] : qo[b + 1]] = F.scaled_dot_product_attention(
            q[qo[b] : qo[b + 1]].transpose(0, 1),
            k_buf[slots].transpose(0, 1),
            v_buf[slots].transpose(0, 1),
            attn_mask=mask,
            scale=LAYER.scaling,
            enable_gqa=True,
        ).transpose(0, 1)
    return out


PAGE_SIZES = pytest.mark.parametrize("page_size", [1, 4], ids=["page1", "page4"])
LENS = pytest.mark.parametrize("lens", [MIXED, DECODE], ids=["mixed", "decode"])


@PAGE_SIZES
@LENS
def test_metadata_matches_torch_native_slots(
    lens: tuple[list[int], list[int]], page_size: int
) -> None:
    pools = _pools(page_size=page_size)
    native = TorchNativeAttnBackend("cpu")
    fb = pools.make_batch(*lens, native)
    native.init_forward_metadata(fb)
    meta = build_flashinfer_metadata(fb)

    p = page_size
    assert meta.is_decode == (fb.mode == ForwardMode.DECODE) == (lens is DECODE)
    assert meta.qo_indptr.dtype == meta.kv_indptr.dtype == meta.kv_indices.dtype == torch.int32
    assert meta.qo_indptr[:-1].tolist() == fb.extend_start_loc.tolist()
    assert meta.qo_indptr[-1] == fb.num_tokens
    assert meta.page_size == p
    assert torch.diff(meta.kv_indptr).tolist() == [-(-n // p) for n in fb.seq_lens_cpu]
    assert meta.kv_last_page_len.tolist() == [(n - 1) % p + 1 for n in fb.seq_lens_cpu]
    assert int(meta.kv_indices.min()) >= 1  # page (or slot) 0 is padding, never attended
    assert [_slots(meta, b) for b in range(fb.batch_size)] == _torch_native_slots(native, fb)


@PAGE_SIZES
def test_metadata_follows_decode_steps_across_page_ends(page_size: int) -> None:
    """Requests grow one token at a time through their last page and onto fresh ones."""
    pools = _pools(page_size=page_size)
    native = TorchNativeAttnBackend("cpu")
    fb = pools.make_batch([0, 0, 0], [3, 4, 9], native)
    rows, lens = fb.req_pool_indices.tolist(), [3, 4, 9]
    for _ in range(6):
        fb = pools.decode_batch(rows, lens, [1, 2, 3], native)
        native.init_forward_metadata(fb)
        meta = build_flashinfer_metadata(fb)
        assert [_slots(meta, b) for b in range(3)] == _torch_native_slots(native, fb)
        lens = [n + 1 for n in lens]


@PAGE_SIZES
@LENS
def test_paged_attention_on_metadata_matches_torch_native(
    lens: tuple[list[int], list[int]], page_size: int
) -> None:
    torch.manual_seed(0)
    pools = _pools(seed=3, page_size=page_size)
    native = TorchNativeAttnBackend("cpu")
    fb = pools.make_batch(*lens, native)
    native.init_forward_metadata(fb)
    t, h, hkv, d = fb.num_tokens, LAYER.num_heads, LAYER.num_kv_heads, LAYER.head_dim
    q, k, v = torch.randn(t, h * d), torch.randn(t, hkv * d), torch.randn(t, hkv * d)
    want = native.forward(q, k, v, LAYER, fb)  # also stores k/v at out_loc
    got = _paged_attention(q.view(t, h, d), build_flashinfer_metadata(fb), fb)
    torch.testing.assert_close(got.reshape(t, h * d), want, rtol=1e-5, atol=1e-5)


@PAGE_SIZES
@pytest.mark.parametrize("window", [1, 5, 8, 100])
def test_window_tables_drop_whole_pages_before_the_window(page_size: int, window: int) -> None:
    """Request b keeps its slots from the start of the page holding its first new token's
    first visible key, max(0, prefix - window + 1); a window that cuts nothing shares the
    whole table."""
    pools = _pools(page_size=page_size)
    fb = pools.make_batch(*MIXED, TorchNativeAttnBackend("cpu"))
    tables = PageTables(fb)
    full, meta = tables.get(0), tables.get(window)
    p = page_size
    for b, q in enumerate(fb.extend_prefix_lens_cpu):
        first = max(0, q - window + 1) // p * p
        assert _slots(meta, b) == _slots(full, b)[first:]
    assert meta.kv_last_page_len.tolist() == full.kv_last_page_len.tolist()
    assert tables.get(window) is meta  # built once per batch
    cuts = any(max(0, q - window + 1) >= p for q in fb.extend_prefix_lens_cpu)
    assert (meta is full) == (not cuts)


def test_paged_kv_views_pages_of_the_pool() -> None:
    pools = _pools(page_size=4)
    fb = pools.make_batch([0], [6], TorchNativeAttnBackend("cpu"))
    k_pages, v_pages = paged_kv(LAYER, fb)
    k_buf, _ = fb.token_to_kv_pool.get_kv_buffer(LAYER.layer_id)
    assert k_pages.shape == (k_buf.shape[0] // 4, 4, LAYER.num_kv_heads, LAYER.head_dim)
    assert k_pages.data_ptr() == k_buf.data_ptr()  # a view: FlashInfer reads the pool itself
    assert torch.equal(k_pages[13, 2], k_buf[13 * 4 + 2])


def test_flashinfer_backend_refuses_cpu() -> None:
    from radixrt.model.attention.flashinfer_backend import FlashInferAttnBackend

    with pytest.raises(ValueError, match="CUDA"):
        FlashInferAttnBackend("cpu", num_heads=4, num_kv_heads=2, head_dim=16)


def test_registry_lists_flashinfer_and_defaults_to_torch_native_on_cpu() -> None:
    from radixrt.model.attention import ATTENTION_BACKENDS, default_backend

    assert "flashinfer" in ATTENTION_BACKENDS
    assert default_backend("cpu") == "torch_native"
    assert default_backend(torch.device("cpu")) == "torch_native"
    assert default_backend("cuda", torch.float32) == "torch_native"  # flashinfer has no fp32


def test_create_attention_backend_takes_the_head_layout_up_front() -> None:
    from radixrt.model.attention import create_attention_backend

    backend = create_attention_backend(
        "torch_native", "cpu", num_heads=4, num_kv_heads=2, head_dim=16
    )
    assert isinstance(backend, TorchNativeAttnBackend)
    with pytest.raises(ValueError, match="CUDA"):  # geometry accepted; the device is refused
        create_attention_backend("flashinfer", "cpu", num_heads=4, num_kv_heads=2, head_dim=16)
    with pytest.raises(ValueError, match="unknown attention backend"):
        create_attention_backend("nope", "cpu", num_heads=4, num_kv_heads=2, head_dim=16)
