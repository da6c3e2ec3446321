"""float32 CPU kernels (csrc/cpu) behind torch-tensor functions.

Every function here expects CPU float32 activations whose rows are contiguous (stride(-1) == 1;
a linear layer's packed weight may also be bfloat16 or int8, a KV pool bfloat16 or fp8 with
per-row scales, radixrt/cache/kv_layout.py);
callers check `available()` once and keep to that layout. The torch definitions the attention
kernels are tested against are in reference.py; the packed weight layouts their linears read,
in weight_pack.py.
"""

from __future__ import annotations

import ctypes

import torch

from radixrt.cache.kv_layout import head_dim_of
from radixrt.model.cpu.build import build_error, get_cpu_lib

__all__ = [
    "available",
    "build_error",
    "decode_attention",
    "extend_attention",
    "bf16_extend_takes",
    "has_extend_attention",
    "isa",
    "linear",
    "linear_silu",
    "rmsnorm_",
    "rotary_",
    "silu_mul",
]


def available() -> bool:
    """True when the library builds (or is cached) and loads on this machine."""
    return get_cpu_lib() is not None


def lib() -> ctypes.CDLL:
    """The loaded library (RuntimeError naming the reason when it is unavailable)."""
    loaded = get_cpu_lib()
    if loaded is None:
        raise RuntimeError(f"radixrt CPU kernels unavailable: {build_error()}")
    return loaded


def _rows(t: torch.Tensor, name: str) -> None:
    if t.dtype != torch.float32 or t.device.type != "cpu" or t.stride(-1) != 1:
        raise ValueError(
            f"{name} must be a CPU float32 tensor with contiguous rows, "
            f"got {t.dtype} on {t.device} with strides {t.stride()}"
        )


def linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    n: int,
    bias: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """x (M, K) @ W^T + bias -> (M, n), W (n, K) given as pack_weight(W), pack_weight_bf16(W)
    or pack_weight_int8(W) (int8 `packed` with its `scale`); float32 arithmetic throughout."""
    _rows(x, "x")
    m, k = x.shape
    y = torch.empty(m, n, dtype=torch.float32)
    bias_ptr = None if bias is None else bias.data_ptr()
    if packed.dtype == torch.int8:
        if scale is None:
            raise ValueError("an int8 packed weight needs its scale")
        lib().rt_linear_q8(
            x.data_ptr(), x.stride(0), m, k, packed.data_ptr(), scale.data_ptr(), n, bias_ptr,
            y.data_ptr(), n,
        )  # fmt: skip
        return y
    if packed.dtype == torch.bfloat16:
        if packed.numel() != lib().rt_bf16_packed_size(n, k):
            raise ValueError(f"not a bfloat16 weight of ({n}, {k}) packed by this library")
        lib().rt_linear_bf16(
            x.data_ptr(), x.stride(0), m, k, packed.data_ptr(), n, bias_ptr, y.data_ptr(), n
        )
        return y
    lib().rt_linear_f32(
        x.data_ptr(), x.stride(0), m, k, packed.data_ptr(), n, bias_ptr, y.data_ptr(), n
    )
    return y


def linear_silu(
    x: torch.Tensor, packed: torch.Tensor, n: int, bias: torch.Tensor | None = None
) -> torch.Tensor | None:
    """silu(g) * up -> (M, n/2) where [g | up] = linear(x, packed, n, bias), packed a bfloat16
    weight of rows [gate; up], in one pass that never writes the (M, n) product (AMX tiles:
    the same values as `silu_mul(linear(...))`). None where this library cannot (no AMX, or
    n not a multiple of 64): the caller then runs the two."""
    _rows(x, "x")
    m, k = x.shape
    if packed.dtype != torch.bfloat16 or packed.numel() != lib().rt_bf16_packed_size(n, k):
        raise ValueError(f"not a bfloat16 weight of ({n}, {k}) packed by this library")
    out = torch.empty(m, n // 2, dtype=torch.float32)
    bias_ptr = None if bias is None else bias.data_ptr()
    rc = lib().rt_linear_bf16_silu(
        x.data_ptr(), x.stride(0), m, k, packed.data_ptr(), n, bias_ptr, out.data_ptr(), n // 2
    )
    return out if rc == 0 else None


def rmsnorm_(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> None:
    """In place on x (T, H): with residual, residual += x then x = rmsnorm(residual) * weight;
    without, x = rmsnorm(x) * weight."""
    _rows(x, "x")
    t, h = x.shape
    r_ptr, r_ld = (None, 0) if residual is None else (residual.data_ptr(), residual.stride(0))
    lib().rt_rmsnorm_f32(x.data_ptr(), x.stride(0), r_ptr, r_ld, weight.data_ptr(), t, h, eps)


def rotary_(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, d: int) -> None:
    """Rotate-half rotary in place on q (T, Hq*d) and k (T, Hk*d) (views with contiguous
    rows, e.g. slices of one qkv tensor) by cos, sin (T, d) float32."""
    t = q.shape[0]
    lib().rt_rotary_f32(
        q.data_ptr(),
        q.stride(0),
        q.shape[1] // d,
        k.data_ptr(),
        k.stride(0),
        k.shape[1] // d,
        cos.data_ptr(),
        sin.data_ptr(),
        cos.stride(0),
        t,
        d,
    )


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate_up[:, :I]) * gate_up[:, I:] -> (T, I)."""
    _rows(gate_up, "gate_up")
    t, two_i = gate_up.shape
    out = torch.empty(t, two_i // 2, dtype=torch.float32)
    lib().rt_silu_mul_f32(
        gate_up.data_ptr(), gate_up.stride(0), out.data_ptr(), two_i // 2, t, two_i // 2
    )
    return out


# The attention kernels' name suffix per KV pool dtype (csrc/cpu/kv.h), and the fused decode
# layer's kv_kind for each (csrc/cpu/rt_cpu.h).
KV_SUFFIX = {
    torch.float32: "",
    torch.bfloat16: "_kvbf16",
    torch.float8_e4m3fn: "_kve4m3",
    torch.float8_e5m2: "_kve5m2",
}
KV_KINDS = {"": 0, "_kvbf16": 1, "_kve4m3": 2, "_kve5m2": 3}


def kv_suffix(k_buf: torch.Tensor, v_buf: torch.Tensor) -> str:
    """Which build of the attention kernels reads this pool (ValueError for another dtype)."""
    if k_buf.dtype != v_buf.dtype or k_buf.dtype not in KV_SUFFIX:
        raise ValueError(
            f"the CPU attention kernels read float32, bfloat16 or fp8 (e4m3fn, e5m2) KV, got "
            f"{k_buf.dtype} and {v_buf.dtype}"
        )
    return KV_SUFFIX[k_buf.dtype]


def decode_attention(
    q: torch.Tensor,
    k_new: torch.Tensor | None,
    v_new: torch.Tensor | None,
    k_buf: torch.Tensor,
    v_buf: torch.Tensor,
    out_loc: torch.Tensor | None,
    req_to_token: torch.Tensor,
    rows: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    bf16: bool = False,
) -> torch.Tensor:
    """Store k_new, v_new (B, Hkv*D) at slots out_loc (B,) int64 of k_buf, v_buf (S, Hkv, D),
    then attend q (B, Hq*D) over req_to_token[rows[i], :seq_lens[i]] (int32 table; rows and
    seq_lens (B,) int64). Returns (B, Hq*D). Request i owns slot out_loc[i]. With k_new,
    v_new and out_loc None the new K/V are in the pool already: nothing is stored. A bfloat16
    pool stores k_new, v_new rounded to nearest even, an fp8 pool (S, Hkv, D + 4) scaled per
    row as kv_layout.to_rows does; either is widened to float32 as it is read. `bf16` (a
    bfloat16 pool): the extend kernel's arithmetic, q * scale and the probabilities rounded
    to bfloat16, float32 sums (`bf16_extend_takes` says where the model uses it)."""
    suffix = kv_suffix(k_buf, v_buf)
    if bf16 and suffix != "_kvbf16":
        raise ValueError(f"bfloat16 products need a bfloat16 KV pool, got {k_buf.dtype}")
    arithmetic = "bf16" if bf16 else "f32"
    fn = getattr(lib(), f"rt_decode_attention_{arithmetic}{suffix}")
    b, hq_d = q.shape
    hkv, d = k_buf.shape[1], head_dim_of(k_buf)
    if (k_new is None) != (v_new is None) or (k_new is None) != (out_loc is None):
        raise ValueError("k_new, v_new and out_loc come together (or all None)")
    # One row stride serves both (it is never used for a single row).
    if (
        k_new is not None
        and v_new is not None
        and (
            k_new.stride(-1) != 1
            or v_new.stride(-1) != 1
            or (b > 1 and k_new.stride() != v_new.stride())
        )
    ):
        raise ValueError("k_new and v_new must share one layout")
    out = torch.empty(b, hq_d, dtype=torch.float32)
    fn(
        q.data_ptr(),
        q.stride(0),
        0 if k_new is None else k_new.data_ptr(),
        0 if v_new is None else v_new.data_ptr(),
        0 if k_new is None else k_new.stride(0),
        k_buf.data_ptr(),
        v_buf.data_ptr(),
        0 if out_loc is None else out_loc.data_ptr(),
        req_to_token.data_ptr(),
        req_to_token.stride(0),
        rows.data_ptr(),
        seq_lens.data_ptr(),
        out.data_ptr(),
        hq_d,
        b,
        hq_d // d,
        hkv,
        d,
        scale,
    )
    return out


def isa() -> str:
    """The variant of the loaded library: "amx", "avx512bf16", "avx512", "avx2" or
    "portable"."""
    return lib().rt_isa().decode()


# The variants whose bfloat16 linear weights are k pairs multiplied by a bfloat16 dot product
# (AMX tiles, VDPBF16PS): x is rounded to bfloat16 too, and the gate_up+SiLU pass exists.
BF16_DOT_ISAS = ("amx", "avx512bf16")


def bf16_dot() -> bool:
    """Whether the loaded variant multiplies bfloat16 weights by x rounded to bfloat16
    (BF16_DOT_ISAS), rather than widening the weights to float32."""
    return isa() in BF16_DOT_ISAS


def has_extend_attention() -> bool:
    """True when the library has a vector extend-attention path (every variant but the
    portable one, which answers -2 and leaves the extends to torch)."""
    return isa() != "portable"


# "auto" takes the bfloat16-product kernel wherever it runs: on AMX tiles it measured faster
# than the float32 one from one new row up (docs/benchmarks.md section 15), on VDPBF16PS from
# 16 rows up and level below (section 8), so there is no size rule.
EXTEND_PATHS = ("auto", "f32", "bf16")
# The variants with an extend kernel of bfloat16 products (rt_extend_attention_bf16_kvbf16):
# AMX tiles, VDPBF16PS.
BF16_EXTEND_ISAS = ("amx", "avx512bf16")


def bf16_extend_takes(kv_dtype: torch.dtype, d: int, window: int = 0) -> bool:
    """True when the extend kernel of bfloat16 products can run here: the amx or avx512bf16
    variant, a bfloat16 pool, head dim a multiple of 32 up to 256, no sliding window. The
    decode kernel's rows then take the same arithmetic (decode_attention's `bf16`), so that a
    token's attention does not depend on whether it was computed in a prefill or a decode."""
    return (
        isa() in BF16_EXTEND_ISAS
        and kv_dtype == torch.bfloat16
        and d % 32 == 0
        and d <= 256
        and not window
    )


def extend_attention(
    q: torch.Tensor,
    k_buf: torch.Tensor,
    v_buf: torch.Tensor,
    slots: torch.Tensor,
    prefix_len: int,
    scale: float,
    out: torch.Tensor,
    window: int = 0,
    path: str = "auto",
) -> None:
    """Causal attention of one request's new rows q (e, Hq*D) or (e, Hq, D), heads of each row
    contiguous, at positions prefix_len .. prefix_len+e-1 over the K/V at slots[:prefix_len+e]
    (int32, contiguous) of k_buf, v_buf (S, Hkv, D), which already hold the new tokens; with
    `window` > 0 row i sees only the keys prefix_len+i-window+1 .. prefix_len+i. Writes out
    (e, Hq*D) rows. k_buf, v_buf float32, bfloat16 or fp8 (widened as they are read).
    `path`: "auto" runs the kernel of bfloat16 products (queries and probabilities rounded to
    bfloat16: AMX tiles or VDPBF16PS) where `bf16_extend_takes` says so, else float32
    arithmetic; "f32" always the latter; "bf16" the former (ValueError where it cannot)."""
    suffix = kv_suffix(k_buf, v_buf)
    e = q.shape[0]
    hkv, d = k_buf.shape[1], head_dim_of(k_buf)
    if path not in EXTEND_PATHS:
        raise ValueError(f"path must be one of {EXTEND_PATHS}, got {path!r}")
    takes = bf16_extend_takes(k_buf.dtype, d, window)
    if path == "bf16" and not takes:
        raise ValueError(
            f"the bfloat16 extend kernel needs the {' or '.join(BF16_EXTEND_ISAS)} variant (this "
            f"is {isa()}), a bfloat16 pool (got {k_buf.dtype}), head dim a multiple of 32 up to "
            f"256 (got {d}) and no window"
        )
    bf16 = takes and path != "f32"
    fn_name = "rt_extend_attention_bf16_kvbf16" if bf16 else "rt_extend_attention_f32" + suffix
    if slots.dtype != torch.int32 or not slots.is_contiguous() or slots.numel() < prefix_len + e:
        raise ValueError("slots must be contiguous int32 covering every key")
    hq = q.shape[1] if q.dim() == 3 else q.shape[1] // d  # (e, Hq, D) or (e, Hq*D) rows
    rc = getattr(lib(), fn_name)(
        q.data_ptr(),
        q.stride(0),
        k_buf.data_ptr(),
        v_buf.data_ptr(),
        slots.data_ptr(),
        prefix_len,
        e,
        out.data_ptr(),
        out.stride(0),
        hq,
        hkv,
        d,
        scale,
        window,
    )
    if rc != 0:
        raise RuntimeError(f"{fn_name} failed ({rc})")
