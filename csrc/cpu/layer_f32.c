// One Llama-family decoder layer as a single call, float32 activations: the sequence of
// kernels the layer's modules would run one Python call each, over every row of the batch.
//
//   residual += x; x = rmsnorm(residual) * ln1          (in place)
//   qkv = x @ Wqkv^T + bqkv; rotate q and k              (scratch)
//   store k, v at out_loc; attn = attention(q)           (scratch; KV in the pool's type)
//   x = attn @ Wo^T + bo
//   residual += x; x = rmsnorm(residual) * ln2
//   x = down(silu(gate) * up) with gate_up = x @ Wgu^T + bgu
//
// rt_decode_layer_f32: a decode batch (one new token per request; the decode kernel stores
// and attends). rt_extend_layer_f32: any batch of prefill parts and decode rows, attention
// per segment as the "cpu" attention backend runs it (radixrt/model/cpu/attention.py): every
// new K/V stored first, then each extend request through the extend kernel, then the decode
// rows through the decode kernel.
// x and residual (rows, hidden) contiguous are updated in place: on return x is the MLP
// output and residual the layer's new residual stream, as LlamaDecoderLayer.forward returns
// them. Each linear's weight is float32 panels (its s_* NULL), int8 panels with scales s_*,
// or, when bf16 is nonzero, bfloat16 panels (every linear of the layer; s_* NULL).
// a8 (NULL: none) names the int8 linears' W8A8 weights, as PackedLinear runs them:
//   a8[0]                       the most rows of a decode-sized call (guard.DECODE_ROWS)
//   a8[1 + 5j .. 5 + 5j]        linear j (qkv, o, gate_up, down): rt_pack_q8a8 weight (0:
//                               none), path, planes, taken at decode sizes, at prefill sizes
// so that a call of m rows runs rt_linear_q8a8 where its size takes it, the weight-only
// int8 kernel otherwise: the arithmetic of the per-module path, call for call.
#include <stdint.h>

#include "rt_cpu.h"

// One layer's weights and sizes (pointers owned by the caller's modules).
typedef struct {
  const float *ln1, *ln2;
  const void* w[4];  // qkv, o, gate_up, down
  const float* b[4];
  const float* s[4];
  int64_t hidden, hq, hkv, d, inter, bf16;
  float eps;
  const int64_t* a8;  // W8A8 weights and where they are taken (see above), or NULL
} layer_t;

static void lin(const layer_t* L, int j, const float* x, int64_t ldx, int64_t m, int64_t k,
                int64_t n, float* y, int64_t ldy) {
  const int64_t* a8 = L->a8 ? L->a8 + 1 + 5 * j : 0;
  // (a W8A8 call that cannot run, out of memory for its quantized rows, leaves y as it was
  // and the weight-only kernel computes it)
  if (a8 && a8[0] && (m <= L->a8[0] ? a8[3] : a8[4]) &&
      rt_linear_q8a8(x, ldx, m, k, (const int8_t*)a8[0], L->s[j], n, L->b[j], y, ldy, a8[1],
                     a8[2]) == 0)
    return;
  if (L->bf16)
    rt_linear_bf16(x, ldx, m, k, (const uint16_t*)L->w[j], n, L->b[j], y, ldy);
  else if (L->s[j])
    rt_linear_q8(x, ldx, m, k, (const int8_t*)L->w[j], L->s[j], n, L->b[j], y, ldy);
  else
    rt_linear_f32(x, ldx, m, k, (const float*)L->w[j], n, L->b[j], y, ldy);
}

// The layer up to attention: x normed in place, qkv (rows, width) projected and rotated.
static void before_attention(const layer_t* L, float* x, float* residual, int64_t rows,
                             const float* cos, const float* sin, float* qkv) {
  const int64_t hidden = L->hidden, d = L->d, width = (L->hq + 2 * L->hkv) * d;
  rt_rmsnorm_f32(x, hidden, residual, hidden, L->ln1, rows, hidden, L->eps);
  lin(L, 0, x, hidden, rows, hidden, width, qkv, width);
  rt_rotary_f32(qkv, width, L->hq, qkv + L->hq * d, width, L->hkv, cos, sin, d, rows, d);
}

// The layer after attention: attn (rows, hq*d) -> x, residual; gate_up and act scratch.
static void after_attention(const layer_t* L, float* x, float* residual, int64_t rows,
                            const float* attn, float* gate_up, float* act) {
  const int64_t hidden = L->hidden, inter = L->inter, hd = L->hq * L->d;
  lin(L, 1, attn, hd, rows, hd, hidden, x, hidden);
  rt_rmsnorm_f32(x, hidden, residual, hidden, L->ln2, rows, hidden, L->eps);
  // bfloat16 panels on AMX: gate_up and SiLU in one pass (the (rows, 2I) product never
  // written; bit for bit the two calls); elsewhere (non-zero return) the two calls.
  if (!L->bf16 || rt_linear_bf16_silu(x, hidden, rows, hidden, (const uint16_t*)L->w[2],
                                      2 * inter, L->b[2], act, inter) != 0) {
    lin(L, 2, x, hidden, rows, hidden, 2 * inter, gate_up, 2 * inter);
    rt_silu_mul_f32(gate_up, 2 * inter, act, inter, rows, inter);
  }
  lin(L, 3, act, inter, rows, inter, hidden, x, hidden);
}

// The decode kernel of the pool's type (kv_kind as rt_cpu.h numbers them); with bfloat16
// products where `bf16` (a bfloat16 pool).
static void decode_attention(int64_t kv_kind, int64_t bf16, const float* q, int64_t ldq,
                             const float* kn, const float* vn, int64_t ld_new, void* k_buf,
                             void* v_buf, const int64_t* out_loc, const int32_t* table,
                             int64_t ld_table, const int64_t* rows, const int64_t* seq_lens,
                             float* out, int64_t ldo, int64_t b, int64_t hq, int64_t hkv,
                             int64_t d, float scale) {
  if (bf16)
    rt_decode_attention_bf16_kvbf16(q, ldq, kn, vn, ld_new, (uint16_t*)k_buf, (uint16_t*)v_buf,
                                    out_loc, table, ld_table, rows, seq_lens, out, ldo, b, hq,
                                    hkv, d, scale);
  else if (kv_kind == 1)
    rt_decode_attention_f32_kvbf16(q, ldq, kn, vn, ld_new, (uint16_t*)k_buf, (uint16_t*)v_buf,
                                   out_loc, table, ld_table, rows, seq_lens, out, ldo, b, hq,
                                   hkv, d, scale);
  else if (kv_kind == 2)
    rt_decode_attention_f32_kve4m3(q, ldq, kn, vn, ld_new, (uint8_t*)k_buf, (uint8_t*)v_buf,
                                   out_loc, table, ld_table, rows, seq_lens, out, ldo, b, hq,
                                   hkv, d, scale);
  else if (kv_kind == 3)
    rt_decode_attention_f32_kve5m2(q, ldq, kn, vn, ld_new, (uint8_t*)k_buf, (uint8_t*)v_buf,
                                   out_loc, table, ld_table, rows, seq_lens, out, ldo, b, hq,
                                   hkv, d, scale);
  else
    rt_decode_attention_f32(q, ldq, kn, vn, ld_new, (float*)k_buf, (float*)v_buf, out_loc,
                            table, ld_table, rows, seq_lens, out, ldo, b, hq, hkv, d, scale);
}

void rt_decode_layer_f32(float* x, float* residual, int64_t b, int64_t hidden,
                         const float* ln1, const float* ln2, float eps, const void* w_qkv,
                         const float* b_qkv, const float* s_qkv, const void* w_o,
                         const float* b_o, const float* s_o, const void* w_gu,
                         const float* b_gu, const float* s_gu, const void* w_down,
                         const float* b_down, const float* s_down, int64_t hq, int64_t hkv,
                         int64_t d, int64_t inter, const float* cos, const float* sin,
                         void* k_buf, void* v_buf, const int64_t* out_loc,
                         const int32_t* req_to_token, int64_t ld_table, const int64_t* rows,
                         const int64_t* seq_lens, float scale, float* scratch,
                         int64_t bf16_weights, int64_t kv_kind, int64_t bf16, const int64_t* a8) {
  const layer_t L = {ln1, ln2, {w_qkv, w_o, w_gu, w_down}, {b_qkv, b_o, b_gu, b_down},
                     {s_qkv, s_o, s_gu, s_down}, hidden, hq, hkv, d, inter, bf16_weights, eps,
                     a8};
  const int64_t width = (hq + 2 * hkv) * d;
  // scratch: qkv (b, width) | attn (b, hq*d) | gate_up (b, 2*inter) | act (b, inter)
  float* qkv = scratch;
  float* attn = qkv + b * width;
  float* gate_up = attn + b * hq * d;
  float* act = gate_up + b * 2 * inter;
  before_attention(&L, x, residual, b, cos, sin, qkv);
  decode_attention(kv_kind, bf16, qkv, width, qkv + hq * d, qkv + (hq + hkv) * d, width, k_buf,
                   v_buf, out_loc, req_to_token, ld_table, rows, seq_lens, attn, hq * d, b, hq,
                   hkv, d, scale);
  after_attention(&L, x, residual, b, attn, gate_up, act);
}

// Causal attention of one extend request's rows; the bfloat16-product kernel where `bf16` (a
// bfloat16 pool), else the float32 kernel of the pool's type. 0, or the kernel's error code.
static int extend_attention(int64_t kv_kind, int64_t bf16, const float* q, int64_t ldq,
                            const void* k_buf, const void* v_buf, const int32_t* slots,
                            int64_t p, int64_t e, float* out, int64_t ldo, int64_t hq,
                            int64_t hkv, int64_t d, float scale) {
  if (bf16)
    return rt_extend_attention_bf16_kvbf16(q, ldq, (const uint16_t*)k_buf,
                                           (const uint16_t*)v_buf, slots, p, e, out, ldo, hq, hkv,
                                           d, scale, 0);
  if (kv_kind == 1)
    return rt_extend_attention_f32_kvbf16(q, ldq, (const uint16_t*)k_buf, (const uint16_t*)v_buf,
                                          slots, p, e, out, ldo, hq, hkv, d, scale, 0);
  if (kv_kind == 2)
    return rt_extend_attention_f32_kve4m3(q, ldq, (const uint8_t*)k_buf, (const uint8_t*)v_buf,
                                          slots, p, e, out, ldo, hq, hkv, d, scale, 0);
  if (kv_kind == 3)
    return rt_extend_attention_f32_kve5m2(q, ldq, (const uint8_t*)k_buf, (const uint8_t*)v_buf,
                                          slots, p, e, out, ldo, hq, hkv, d, scale, 0);
  return rt_extend_attention_f32(q, ldq, (const float*)k_buf, (const float*)v_buf, slots, p, e,
                                 out, ldo, hq, hkv, d, scale, 0);
}

static void store_kv(int64_t kv_kind, const float* kn, const float* vn, int64_t ld_new,
                     void* k_buf, void* v_buf, const int64_t* out_loc, int64_t t, int64_t hkv,
                     int64_t d) {
  if (kv_kind == 1)
    rt_store_kv_kvbf16(kn, vn, ld_new, (uint16_t*)k_buf, (uint16_t*)v_buf, out_loc, t, hkv, d);
  else if (kv_kind == 2)
    rt_store_kv_kve4m3(kn, vn, ld_new, (uint8_t*)k_buf, (uint8_t*)v_buf, out_loc, t, hkv, d);
  else if (kv_kind == 3)
    rt_store_kv_kve5m2(kn, vn, ld_new, (uint8_t*)k_buf, (uint8_t*)v_buf, out_loc, t, hkv, d);
  else
    rt_store_kv(kn, vn, ld_new, (float*)k_buf, (float*)v_buf, out_loc, t, hkv, d);
}

int rt_extend_layer_f32(float* x, float* residual, int64_t t, const int64_t* ptrs,
                        const int64_t* dims, float eps, const float* cos, const float* sin,
                        void* k_buf, void* v_buf, int64_t kv_kind, const int64_t* out_loc,
                        const int32_t* req_to_token, int64_t ld_table, const int64_t* ext,
                        int64_t n_ext, const int64_t* dec, int64_t bd, float scale, int64_t bf16,
                        float* scratch, const int64_t* a8) {
  const layer_t L = {
      (const float*)ptrs[0], (const float*)ptrs[1],
      {(const void*)ptrs[2], (const void*)ptrs[5], (const void*)ptrs[8], (const void*)ptrs[11]},
      {(const float*)ptrs[3], (const float*)ptrs[6], (const float*)ptrs[9],
       (const float*)ptrs[12]},
      {(const float*)ptrs[4], (const float*)ptrs[7], (const float*)ptrs[10],
       (const float*)ptrs[13]},
      dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], eps, a8};
  const int64_t hq = L.hq, hkv = L.hkv, d = L.d, hd = hq * d, width = (hq + 2 * hkv) * d;
  // scratch: qkv (t, width) | attn (t, hq*d) | gate_up (t, 2*inter) | act (t, inter) |
  // decode rows' q, then their output (bd, hq*d each)
  float* qkv = scratch;
  float* attn = qkv + t * width;
  float* gate_up = attn + t * hd;
  float* act = gate_up + t * 2 * L.inter;
  float* dq = act + t * L.inter;
  float* dout = dq + bd * hd;
  before_attention(&L, x, residual, t, cos, sin, qkv);
  store_kv(kv_kind, qkv + hd, qkv + hd + hkv * d, width, k_buf, v_buf, out_loc, t, hkv, d);
  // ext: per extend request (first row in the batch, new rows, prefix, pool row)
  for (int64_t r = 0; r < n_ext; ++r) {
    const int64_t start = ext[4 * r], e = ext[4 * r + 1], p = ext[4 * r + 2];
    const int rc = extend_attention(kv_kind, bf16, qkv + start * width, width, k_buf, v_buf,
                                    req_to_token + ext[4 * r + 3] * ld_table, p, e,
                                    attn + start * hd, hd, hq, hkv, d, scale);
    if (rc != 0) return rc;
  }
  // dec: the decode rows' rows in the batch, pool rows and seq_lens, bd each
  if (bd > 0) {
    const int64_t *tok = dec, *rows = dec + bd, *seq_lens = dec + 2 * bd;
    for (int64_t i = 0; i < bd; ++i)
      for (int64_t j = 0; j < hd; ++j) dq[i * hd + j] = qkv[tok[i] * width + j];
    decode_attention(kv_kind, bf16, dq, hd, 0, 0, 0, k_buf, v_buf, 0, req_to_token, ld_table,
                     rows, seq_lens, dout, hd, bd, hq, hkv, d, scale);
    for (int64_t i = 0; i < bd; ++i)
      for (int64_t j = 0; j < hd; ++j) attn[tok[i] * hd + j] = dout[i * hd + j];
  }
  after_attention(&L, x, residual, t, attn, gate_up, act);
  return 0;
}
