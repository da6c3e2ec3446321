// radixrt's CPU kernels: plain C over raw float32 pointers, no torch headers, so they build in
// about a second with the system compiler; radixrt/model/cpu/build.py compiles them into one shared
// library per ISA variant (simd.h) and loads the one this CPU runs best with ctypes.
// Strides ("ld*") are in elements between rows.
#pragma once
#include <stddef.h>
#include <stdint.h>

// Wp (ceil(n/32), k, 32) <- w (n, k): see gemm.c for the layout.
void rt_pack_f32(const float* w, int64_t n, int64_t k, float* wp);
// y (m, n) = x (m, k) @ w^T + bias (n,) or no bias when NULL; wp packed by rt_pack_f32.
void rt_linear_f32(const float* x, int64_t ldx, int64_t m, int64_t k, const float* wp,
                   int64_t n, const float* bias, float* y, int64_t ldy);

// Weight-only int8: wp (ceil(n/32), k, 32) int8 and scale (ceil(n/32) * 32) <- w (n, k), one
// scale per output column (max |w| / 127); see gemm.c.
void rt_pack_q8(const float* w, int64_t n, int64_t k, int8_t* wp, float* scale);
// y (m, n) = x (m, k) @ (wq * scale)^T + bias, wp and scale from rt_pack_q8.
void rt_linear_q8(const float* x, int64_t ldx, int64_t m, int64_t k, const int8_t* wp,
                  const float* scale, int64_t n, const float* bias, float* y, int64_t ldy);

// bfloat16 weights: wp holds rt_bf16_packed_size(n, k) raw bf16 values <- w (n, k) rounded to
// nearest even, in the variant's layout: panels as rt_pack_f32's (gemm.c), or AMX tiles in
// the amx variant (gemm_amx.c). rt_unpack_bf16 writes the (n, k) float32 values back.
int64_t rt_bf16_packed_size(int64_t n, int64_t k);
void rt_pack_bf16(const float* w, int64_t n, int64_t k, uint16_t* wp);
void rt_unpack_bf16(const uint16_t* wp, int64_t n, int64_t k, float* w);
// 0 when this thread's process may use AMX tile data (asked of the kernel once; the amx
// variant), else nonzero.
int rt_amx_ready(void);
// y (m, n) = x (m, k) @ w^T + bias, wp from rt_pack_bf16: float32 arithmetic on the bf16
// weights (panels), or x rounded to bf16 and float32 accumulation (AMX).
void rt_linear_bf16(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* wp,
                    int64_t n, const float* bias, float* y, int64_t ldy);
// out (m, n/2) = silu(g) * u where [g | u] = rt_linear_bf16(x, wp, n, bias) (W's rows: n/2
// gate, then n/2 up), in one pass: the (m, n) product is never written (AMX; the same values
// as the two calls). 0; -3 when n is not a multiple of 64, -2 in a variant without AMX, -1
// out of memory: out is then left as it was and the caller runs the two calls.
int rt_linear_bf16_silu(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* wp,
                        int64_t n, const float* bias, float* out, int64_t ldo);

// W8A8 int8 (gemm_q8a8.c): wp holds rt_q8a8_packed_size(n, k) bytes <- rt_pack_q8's panels
// q8 re-laid for AMX-INT8 / VNNI (and column sums). rt_linear_q8a8: y = x quantized per row
// to int8 (symmetric; planes 2: and its rounding residual) @ (wq * scale)^T + bias, int32
// sums; path 2 AMX tiles, 1 AVX-512 VNNI
// (returns 0; -1 for a path this library does not run here, -2 out of memory, y then left as
// it was). rt_q8a8_path: the best path here, 0 when none.
int64_t rt_q8a8_packed_size(int64_t n, int64_t k);
void rt_pack_q8a8(const int8_t* q8, int64_t n, int64_t k, int8_t* wp);
int rt_q8a8_path(void);
int rt_linear_q8a8(const float* x, int64_t ldx, int64_t m, int64_t k, const int8_t* wp,
                   const float* scale, int64_t n, const float* bias, float* y, int64_t ldy,
                   int64_t path, int64_t planes);

// Per row of x (t, h): with residual, residual += x and x = rmsnorm(residual) * w; without,
// x = rmsnorm(x) * w. In place.
void rt_rmsnorm_f32(float* x, int64_t ldx, float* residual, int64_t ldr, const float* w,
                    int64_t t, int64_t h, float eps);
// Rotate-half rotary, in place on q (t, hq, d) and k (t, hk, d) whose heads are contiguous
// within a row; cos, sin (t, d) rows `ldc` apart, halves repeated.
void rt_rotary_f32(float* q, int64_t ldq, int64_t hq, float* k, int64_t ldk, int64_t hk,
                   const float* cos, const float* sin, int64_t ldc, int64_t t, int64_t d);
// out (t, inter) = silu(gu[:, :inter]) * gu[:, inter:].
void rt_silu_mul_f32(const float* gu, int64_t ldg, float* out, int64_t ldo, int64_t t,
                     int64_t inter);
// One new token per request i < b: store k_new/v_new[i] (hkv*d each) at slot out_loc[i] of
// k_buf/v_buf (slots, hkv, d), then attend q[i] (hq*d) over the slots
// req_to_token[rows[i], :seq_lens[i]] (the new slot among them) into out[i].
void rt_decode_attention_f32(const float* q, int64_t ldq, const float* k_new,
                             const float* v_new, int64_t ld_new, float* k_buf, float* v_buf,
                             const int64_t* out_loc, const int32_t* req_to_token,
                             int64_t ld_table, const int64_t* rows, const int64_t* seq_lens,
                             float* out, int64_t ldo, int64_t b, int64_t hq, int64_t hkv,
                             int64_t d, float scale);
// The same over a bfloat16 KV pool (raw bits): the new K/V rounded to nearest even as they
// are stored, every K/V element widened to float32 as it is read (float32 arithmetic).
void rt_decode_attention_f32_kvbf16(const float* q, int64_t ldq, const float* k_new,
                                    const float* v_new, int64_t ld_new, uint16_t* k_buf,
                                    uint16_t* v_buf, const int64_t* out_loc,
                                    const int32_t* req_to_token, int64_t ld_table,
                                    const int64_t* rows, const int64_t* seq_lens, float* out,
                                    int64_t ldo, int64_t b, int64_t hq, int64_t hkv, int64_t d,
                                    float scale);
// The same with bfloat16 products (the extend kernel's arithmetic, attention_pairs.h): q *
// scale and the probabilities rounded to bfloat16, exact products, float32 sums and softmax;
// on VDPBF16PS in the amx and avx512bf16 variants, in float32 FMAs (same values) elsewhere.
void rt_decode_attention_bf16_kvbf16(const float* q, int64_t ldq, const float* k_new,
                                     const float* v_new, int64_t ld_new, uint16_t* k_buf,
                                     uint16_t* v_buf, const int64_t* out_loc,
                                     const int32_t* req_to_token, int64_t ld_table,
                                     const int64_t* rows, const int64_t* seq_lens, float* out,
                                     int64_t ldo, int64_t b, int64_t hq, int64_t hkv, int64_t d,
                                     float scale);
// The same over an fp8 KV pool (e4m3 / e5m2): rows of d bytes and a float32 scale each, so
// k_buf/v_buf are (slots, hkv, d + 4) bytes; stored and read as csrc/cpu/kv.h says.
void rt_decode_attention_f32_kve4m3(const float* q, int64_t ldq, const float* k_new,
                                    const float* v_new, int64_t ld_new, uint8_t* k_buf,
                                    uint8_t* v_buf, const int64_t* out_loc,
                                    const int32_t* req_to_token, int64_t ld_table,
                                    const int64_t* rows, const int64_t* seq_lens, float* out,
                                    int64_t ldo, int64_t b, int64_t hq, int64_t hkv, int64_t d,
                                    float scale);
void rt_decode_attention_f32_kve5m2(const float* q, int64_t ldq, const float* k_new,
                                    const float* v_new, int64_t ld_new, uint8_t* k_buf,
                                    uint8_t* v_buf, const int64_t* out_loc,
                                    const int32_t* req_to_token, int64_t ld_table,
                                    const int64_t* rows, const int64_t* seq_lens, float* out,
                                    int64_t ldo, int64_t b, int64_t hq, int64_t hkv, int64_t d,
                                    float scale);
// Store t rows of new K/V (hkv*d floats each, rows ld_new apart) at slots out_loc (t,) of
// k_buf/v_buf, rounded to the pool's type as the decode kernels store them.
void rt_store_kv(const float* k_new, const float* v_new, int64_t ld_new, float* k_buf,
                 float* v_buf, const int64_t* out_loc, int64_t t, int64_t hkv, int64_t d);
void rt_store_kv_kvbf16(const float* k_new, const float* v_new, int64_t ld_new,
                        uint16_t* k_buf, uint16_t* v_buf, const int64_t* out_loc, int64_t t,
                        int64_t hkv, int64_t d);
void rt_store_kv_kve4m3(const float* k_new, const float* v_new, int64_t ld_new, uint8_t* k_buf,
                        uint8_t* v_buf, const int64_t* out_loc, int64_t t, int64_t hkv,
                        int64_t d);
void rt_store_kv_kve5m2(const float* k_new, const float* v_new, int64_t ld_new, uint8_t* k_buf,
                        uint8_t* v_buf, const int64_t* out_loc, int64_t t, int64_t hkv,
                        int64_t d);
// A whole decoder layer for one new token per request; see layer_f32.c. Each linear is its
// packed weight w_*, bias b_* (or NULL) and int8 scales s_* (NULL: float32 panels, or
// bfloat16 panels for every linear when bf16_weights is nonzero). scratch holds
// b * ((hq + 2*hkv)*d + hq*d + 3*inter) floats; cos, sin (b, d). k_buf, v_buf hold the KV
// pool's type kv_kind: 0 float32, 1 bfloat16, 2 fp8 e4m3, 3 fp8 e5m2 (with scales); `bf16`
// (a bfloat16 pool): attention with bfloat16 products (rt_decode_attention_bf16_kvbf16). a8:
// the int8 linears' W8A8 weights and the call sizes that take them (layer_f32.c), or NULL.
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
                         int64_t bf16_weights, int64_t kv_kind, int64_t bf16, const int64_t* a8);
// The same layer over any batch of t rows: extend requests (prefill chunks) and decode rows
// together; see layer_f32.c. ptrs: 14 addresses (ln1, ln2, then weight, bias, scales of qkv,
// o, gate_up, down; 0 for none); dims: hidden, hq, hkv, d, inter, bf16 weights. Every new
// K/V is stored at out_loc (t,) first; then per extend request r < n_ext, ext[4r..4r+3] =
// (first row, new rows e, prefix p, pool row) attends causally over req_to_token[row, :p+e]
// (with bfloat16 products when `bf16`: a bfloat16 pool, rt_extend_attention_bf16_kvbf16); then
// the bd decode rows, dec = (rows in the batch | pool rows | seq_lens), bd each, through the
// decode kernel (rt_decode_attention_bf16_kvbf16 when `bf16`). scratch holds
// t * ((hq + 2*hkv)*d + hq*d + 3*inter) + 2 * bd * hq*d floats; a8 as rt_decode_layer_f32's.
// Returns 0, or an extend kernel's error code (x, residual then undefined).
int rt_extend_layer_f32(float* x, float* residual, int64_t t, const int64_t* ptrs,
                        const int64_t* dims, float eps, const float* cos, const float* sin,
                        void* k_buf, void* v_buf, int64_t kv_kind, const int64_t* out_loc,
                        const int32_t* req_to_token, int64_t ld_table, const int64_t* ext,
                        int64_t n_ext, const int64_t* dec, int64_t bd, float scale, int64_t bf16,
                        float* scratch, const int64_t* a8);
// Causal attention of one request's e new query rows (positions p .. p+e-1) over its keys
// and values at slots[0 .. p+e-1], each row over its last `window` keys when window > 0; see
// extend_attention_f32.c. Returns 0, -1 when scratch memory ran out, -2 when built without a
// vector ISA (callers then use torch).
int rt_extend_attention_f32(const float* q, int64_t ldq, const float* k_buf,
                            const float* v_buf, const int32_t* slots, int64_t p, int64_t e,
                            float* out, int64_t ldo, int64_t hq, int64_t hkv, int64_t d,
                            float scale, int64_t window);
int rt_extend_attention_f32_kvbf16(const float* q, int64_t ldq, const uint16_t* k_buf,
                                   const uint16_t* v_buf, const int32_t* slots, int64_t p,
                                   int64_t e, float* out, int64_t ldo, int64_t hq, int64_t hkv,
                                   int64_t d, float scale, int64_t window);
int rt_extend_attention_f32_kve4m3(const float* q, int64_t ldq, const uint8_t* k_buf,
                                   const uint8_t* v_buf, const int32_t* slots, int64_t p,
                                   int64_t e, float* out, int64_t ldo, int64_t hq, int64_t hkv,
                                   int64_t d, float scale, int64_t window);
int rt_extend_attention_f32_kve5m2(const float* q, int64_t ldq, const uint8_t* k_buf,
                                   const uint8_t* v_buf, const int32_t* slots, int64_t p,
                                   int64_t e, float* out, int64_t ldo, int64_t hq, int64_t hkv,
                                   int64_t d, float scale, int64_t window);

// The same over a bfloat16 pool with bfloat16 products: on AMX tiles in the amx variant
// (extend_attention_amx.c), on VDPBF16PS in the avx512bf16 one (extend_attention_dot.c);
// queries and probabilities rounded to bfloat16, float32 softmax and accumulation. -2 in a
// variant with neither, -3 for a head dim or window it does not take (then call the one above).
int rt_extend_attention_bf16_kvbf16(const float* q, int64_t ldq, const uint16_t* k_buf,
                                    const uint16_t* v_buf, const int32_t* slots, int64_t p,
                                    int64_t e, float* out, int64_t ldo, int64_t hq, int64_t hkv,
                                    int64_t d, float scale, int64_t window);

// The calling thread's scratch for a GEMM's rows (gemm.c; NULL when out of memory).
void* rt_row_scratch(size_t bytes);

// Rows (or row blocks) per work chunk of a GEMM of m of them: at most `most` (a multiple of
// `align`), a multiple of `align`, the chunks as even as that allows. The GEMMs split (chunk,
// panel) items statically, in equal runs per thread, so a thread's work is even only when
// the chunks are: 97 rows as chunks of 96 and 1 gave one thread nearly all of them.
static inline int64_t rt_even_chunk(int64_t m, int64_t most, int64_t align) {
  const int64_t chunks = (m + most - 1) / most;
  const int64_t per = (m + chunks - 1) / chunks;
  return (per + align - 1) / align * align;
}

// The vector ISA this library was built for: "avx512", "avx2" or "portable" (simd.h).
const char* rt_isa(void);
