// One Llama-family decoder layer for a decode batch (one new token per request), float32, as
// a single call: the sequence of kernels the layer's modules would run one Python call each.
//
//   residual += x; x = rmsnorm(residual) * ln1          (in place)
//   qkv = x @ Wqkv^T + bqkv; rotate q and k              (scratch)
//   store k, v at out_loc; attn = attention(q)           (scratch; KV in the pool's type)
//   x = attn @ Wo^T + bo
//   residual += x; x = rmsnorm(residual) * ln2
//   x = down(silu(gate) * up) with gate_up = x @ Wgu^T + bgu
//
// x and residual (b, hidden) contiguous are updated in place: on return x is the MLP output
// and residual the layer's new residual stream, as LlamaDecoderLayer.forward returns them.
// Each linear's weight is float32 panels (its s_* NULL), int8 panels with scales s_*, or,
// when bf16_weights is nonzero, bfloat16 panels (every linear of the layer; s_* NULL).
#include <stdint.h>

#include "rt_cpu.h"

static void lin(const float* x, int64_t ldx, int64_t m, int64_t k, const void* w,
                const float* s, int64_t n, const float* bias, float* y, int64_t ldy,
                int64_t bf16) {
  if (bf16)
    rt_linear_bf16(x, ldx, m, k, (const uint16_t*)w, n, bias, y, ldy);
  else if (s)
    rt_linear_q8(x, ldx, m, k, (const int8_t*)w, s, n, bias, y, ldy);
  else
    rt_linear_f32(x, ldx, m, k, (const float*)w, n, bias, y, ldy);
}

void rt_decode_layer_f32(float* x, float* residual, int64_t b, int64_t hidden,
                         const float* ln1, const float* ln2, float eps, const void* w_qkv,
                         const float* b_qkv, const float* s_qkv, const void* w_o,
                         const float* b_o, const float* s_o, const void* w_gu,
                         const float* b_gu, const float* s_gu, const void* w_down,
                         const float* b_down, const float* s_down, int64_t hq, int64_t hkv, int64_t d, int64_t inter,
                         const float* cos, const float* sin, void* k_buf, void* v_buf,
                         const int64_t* out_loc, const int32_t* req_to_token, int64_t ld_table,
                         const int64_t* rows, const int64_t* seq_lens, float scale,
                         float* scratch, int64_t bf16_weights, int64_t kv_kind) {
  const int64_t bf = bf16_weights;
  const int64_t width = (hq + 2 * hkv) * d;
  // scratch: qkv (b, width) | attn (b, hq*d) | gate_up (b, 2*inter) | act (b, inter)
  float* qkv = scratch;
  float* attn = qkv + b * width;
  float* gate_up = attn + b * hq * d;
  float* act = gate_up + b * 2 * inter;

  rt_rmsnorm_f32(x, hidden, residual, hidden, ln1, b, hidden, eps);
  lin(x, hidden, b, hidden, w_qkv, s_qkv, width, b_qkv, qkv, width, bf);
  rt_rotary_f32(qkv, width, hq, qkv + hq * d, width, hkv, cos, sin, d, b, d);
  const float *kn = qkv + hq * d, *vn = qkv + (hq + hkv) * d;
  if (kv_kind == 1)
    rt_decode_attention_f32_kvbf16(qkv, width, kn, vn, width, (uint16_t*)k_buf, (uint16_t*)v_buf,
                                   out_loc, req_to_token, ld_table, rows, seq_lens, attn, hq * d,
                                   b, hq, hkv, d, scale);
  else if (kv_kind == 2)
    rt_decode_attention_f32_kve4m3(qkv, width, kn, vn, width, (uint8_t*)k_buf, (uint8_t*)v_buf,
                                   out_loc, req_to_token, ld_table, rows, seq_lens, attn, hq * d,
                                   b, hq, hkv, d, scale);
  else if (kv_kind == 3)
    rt_decode_attention_f32_kve5m2(qkv, width, kn, vn, width, (uint8_t*)k_buf, (uint8_t*)v_buf,
                                   out_loc, req_to_token, ld_table, rows, seq_lens, attn, hq * d,
                                   b, hq, hkv, d, scale);
  else
    rt_decode_attention_f32(qkv, width, kn, vn, width, (float*)k_buf, (float*)v_buf, out_loc,
                            req_to_token, ld_table, rows, seq_lens, attn, hq * d, b, hq, hkv, d,
                            scale);
  lin(attn, hq * d, b, hq * d, w_o, s_o, hidden, b_o, x, hidden, bf);
  rt_rmsnorm_f32(x, hidden, residual, hidden, ln2, b, hidden, eps);
  lin(x, hidden, b, hidden, w_gu, s_gu, 2 * inter, b_gu, gate_up, 2 * inter, bf);
  rt_silu_mul_f32(gate_up, 2 * inter, act, inter, b, inter);
  lin(act, inter, b, inter, w_down, s_down, hidden, b_down, x, hidden, bf);
}
