// Cascade decode attention, float32 arithmetic over float32 or bfloat16 KV (kv.h), or
// bfloat16 products over bfloat16 KV (attention_pairs.h): a prefix
// shared by several requests of a decode batch is read once per layer for all of them (see
// attend_shared below).
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attention_heads.h"

// The radix tree gives every request that hits a cached prefix the same KV slots for it, so
// requests whose slot rows begin with the same run of at least MIN_SHARED slots form a group.
// A group's queries (all its members' heads, laid out (hkv, members, g, d)) attend over the
// shared run in key ranges, each K and V row read once for all of them; each member then
// attends over its own remaining keys; the partial softmaxes are merged per request and head
// as in attention_f32.c's attend_ranges. Requests in no group have one suffix item over all their keys.
#ifndef MIN_SHARED
#define MIN_SHARED 64  // shorter shared runs are attended per request (grouping would not pay)
#endif
#ifndef SHARED_RANGE_KEYS
#define SHARED_RANGE_KEYS 128  // keys per range of a group's shared run (at least)
#endif
#ifndef GROUP_GEMM_QUERIES
#define GROUP_GEMM_QUERIES 24  // queries per KV head from which attend_group pays its transposes
#endif
#ifndef MAX_GROUP_RANGES
#define MAX_GROUP_RANGES 64  // ranges of a group's shared run at most
#endif
#ifndef MIN_RANGE_KEYS
#define MIN_RANGE_KEYS 32  // keys per range at least when a short run is split across threads
#endif

// Ranges a group's shared run of `shared` keys is attended in: one per SHARED_RANGE_KEYS, and
// at least one per thread where each still gets MIN_RANGE_KEYS (a single range would leave
// the other threads idle while one attends the whole run).
static int64_t group_ranges(int64_t shared, int64_t threads) {
  int64_t r = shared / SHARED_RANGE_KEYS;
  const int64_t per_thread = shared / MIN_RANGE_KEYS < threads ? shared / MIN_RANGE_KEYS : threads;
  r = r < per_thread ? per_thread : r;
  return r < 1 ? 1 : r > MAX_GROUP_RANGES ? MAX_GROUP_RANGES : r;
}

typedef struct {
  int64_t first, count, shared;  // members order[first .. first+count), shared slots
  float* q;                      // gathered queries (hkv, count, g, d)
} group_t;

typedef struct {
  int64_t group, req, l0, l1;  // group >= 0: a range of its shared run; else request req's keys
  int64_t off;                 // of part in the plan's buffer
  float* part;                 // unnormalised outputs (nq, d), then (max, sum) per query
} item_t;

static int64_t common_slots(const int32_t* a, const int32_t* b, int64_t n) {
  int64_t l = 0;
  while (l < n && a[l] == b[l]) ++l;
  return l;
}

// Whether request row `row` is already among order[first .. n).
static int has_row(const int64_t* rows, const int64_t* order, int64_t first, int64_t n,
                   int64_t row) {
  for (int64_t t = first; t < n; ++t)
    if (rows[order[t]] == row) return 1;
  return 0;
}

// Whether `slot` is among the b slots this pass stores.
static int is_stored(const int64_t* out_loc, int64_t b, int32_t slot) {
  for (int64_t t = 0; t < b; ++t)
    if (out_loc[t] == slot) return 1;
  return 0;
}

// Whether rows ri and rj (seq_i, seq_j keys) are one request's: their common run of keys ends
// in a slot this pass stores (a draft tree's root or a shared ancestor node).
static int one_request(const int32_t* ri, const int32_t* rj, int64_t seq_i, int64_t seq_j,
                       const int64_t* out_loc, int64_t b) {
  const int64_t run = common_slots(ri, rj, seq_i < seq_j ? seq_i : seq_j);
  return run > 0 && is_stored(out_loc, b, ri[run - 1]);
}

// Groups of requests sharing their first slots; grp[i] = group of request i or -1, pos[i] its
// index among the group's members. Returns the number of groups (0: nothing shared). A group
// holds one row per request row at most: the rows of a draft being verified (one request's
// rows, seq_lens one apart) attend alone, as that request's decode step would, so that their
// arithmetic is the decode step's whatever the draft (with bfloat16 weights a reordered sum
// can flip a near-tie). So do the rows of a draft tree (a row of the table per branch): two
// rows whose common keys end in a slot this pass stores (`out_loc`, when given) are one
// request's, since a new slot is its request's alone; a cached prefix's slots are not new.
static int64_t find_groups(const int32_t* req_to_token, int64_t ld_table, const int64_t* rows,
                           const int64_t* seq_lens, const int64_t* out_loc, int64_t b,
                           int64_t* grp, int64_t* pos, int64_t* order, group_t* groups) {
  int64_t ng = 0, n = 0;
  for (int64_t i = 0; i < b; ++i) grp[i] = -1;
  for (int64_t i = 0; i < b; ++i) {
    if (grp[i] != -1) continue;
    const int32_t* ri = req_to_token + rows[i] * ld_table;
    int64_t shared = seq_lens[i] - 1;  // every member keeps at least one key of its own
    const int64_t first = n;
    order[n++] = i;
    for (int64_t j = i + 1; j < b && shared >= MIN_SHARED; ++j) {
      const int32_t* rj = req_to_token + rows[j] * ld_table;
      if (grp[j] != -1 || rj[0] != ri[0] || has_row(rows, order, first, n, rows[j])) continue;
      const int64_t cap = shared < seq_lens[j] - 1 ? shared : seq_lens[j] - 1;
      const int64_t lcp = common_slots(ri, rj, cap);
      if (lcp < MIN_SHARED || (out_loc && one_request(ri, rj, seq_lens[i], seq_lens[j], out_loc, b)))
        continue;
      grp[j] = ng;
      order[n++] = j;
      shared = lcp < shared ? lcp : shared;
    }
    if (n - first < 2) {
      n = first;  // alone: attended over all its keys
      continue;
    }
    grp[i] = ng;
    for (int64_t t = first; t < n; ++t) pos[order[t]] = t - first;
    groups[ng++] = (group_t){first, n - first, shared, 0};
  }
  return ng;
}

// Query head j of request i from the group's layout.
static inline int64_t group_query(int64_t count, int64_t g, int64_t t, int64_t j) {
  return ((j / g) * count + t) * g + j % g;
}

#if defined(RT_VEC)
#define QB 4  // queries per register block of attend_group's scores
// attend_heads for a group's queries (ml != NULL): q (hkv, gq, d) over `len` keys of every KV
// head. Many queries share each key here, so a head's keys are first transposed into kt
// (d, lenp), lenp = len rounded up to 2*VW (zeros past len), and each block of QB queries
// takes its scores as a small matrix product, 2*VW keys at a time: broadcast FMAs, no
// per-key reductions. sc: scratch (hkv * gq, lenp). `bf16`: the probabilities rounded to
// bfloat16 for the V pass (q is rounded already), as attend_heads does; only where the K rows
// are not read as pairs (PAIR_KEYS: those groups take attend_heads, faster at any size).
static void attend_group(const float* q, float* out, int64_t gq, int64_t hkv, const kv_t* k_buf,
                         const kv_t* v_buf, const int32_t* slots, int64_t len, int64_t slot_len,
                         int64_t d, float scale, float* sc, float* kt, float* ml, int bf16) {
  const int64_t lenp = (len + 2 * VW - 1) / (2 * VW) * (2 * VW);
  const vf vs = vset1(scale);
  float qb[QB * 128];
#if KV_SCALED
  float wide[128];  // d <= 128 here (the caller's condition)
#endif
  for (int64_t h = 0; h < hkv; ++h) {
    for (int64_t l = 0; l < len; ++l) {
      const kv_t* krow = k_buf + (int64_t)slots[l] * slot_len + h * KV_ROW(d);
#if KV_SCALED  // fp8: the row widened and scaled in vectors (a byte's scalar read branches)
      const float* kr = kv_row_f32(krow, d, wide);
      for (int64_t c = 0; c < d; ++c) kt[c * lenp + l] = kr[c];
#else  // float32, bfloat16: each element read in place (measured faster than a row pass)
      for (int64_t c = 0; c < d; ++c) kt[c * lenp + l] = kv_get(krow, c);
#endif
    }
    for (int64_t c = 0; c < d; ++c)
      for (int64_t l = len; l < lenp; ++l) kt[c * lenp + l] = 0.0f;
    for (int64_t j0 = 0; j0 < gq; j0 += QB) {
      const int64_t nb = gq - j0 < QB ? gq - j0 : QB;
      for (int64_t r = 0; r < QB; ++r)  // the block's queries, (QB, d) with zero rows past nb
        for (int64_t c = 0; c < d; ++c) qb[r * d + c] = r < nb ? q[(h * gq + j0 + r) * d + c] : 0;
      for (int64_t l = 0; l < lenp; l += 2 * VW) {
        vf a0[QB], a1[QB];
        for (int r = 0; r < QB; ++r) a0[r] = a1[r] = vzero();
        for (int64_t c = 0; c < d; ++c) {
          const vf k0 = vload(kt + c * lenp + l), k1 = vload(kt + c * lenp + l + VW);
          for (int r = 0; r < QB; ++r) {
            const vf qv = vset1(qb[r * d + c]);
            a0[r] = vfma(qv, k0, a0[r]);
            a1[r] = vfma(qv, k1, a1[r]);
          }
        }
        for (int64_t r = 0; r < nb; ++r) {
          float* row = sc + (h * gq + j0 + r) * lenp + l;
          vstore(row, vmul(vs, a0[r]));
          vstore(row + VW, vmul(vs, a1[r]));
        }
      }
    }
  }
  for (int64_t j = 0; j < hkv * gq; ++j) {  // unnormalised: (max, sum) of each row to ml
    float* row = sc + j * lenp;
    ml[2 * j] = max_f32(row, len);
    ml[2 * j + 1] = softmax_numerators(row, len, ml[2 * j]);
    if (bf16) round_bf16_f32(row, len);
  }
  for (int64_t h = 0; h < hkv; ++h) {
    if (weighted_heads(sc + h * gq * lenp, lenp, gq, v_buf + h * KV_ROW(d), slots, len, slot_len,
                       d, out + h * gq * d, h == 0 ? hkv * KV_ROW(d) * (int64_t)sizeof(kv_t) : 0) == 0)
      continue;
    for (int64_t j = h * gq; j < (h + 1) * gq; ++j) {
      float* o = out + j * d;
      const float* p = sc + j * lenp;
      memset(o, 0, sizeof(float) * (size_t)d);
      for (int64_t l = 0; l < len; ++l)
        axpy_kv(o, p[l], v_buf + (int64_t)slots[l] * slot_len + h * KV_ROW(d), d);
    }
  }
}
#endif

int attend_shared(const float* q, int64_t ldq, const kv_t* k_buf, const kv_t* v_buf,
                         const int32_t* req_to_token, int64_t ld_table, const int64_t* rows,
                         const int64_t* seq_lens, const int64_t* out_loc, float* out, int64_t ldo,
                         int64_t b, int64_t hq, int64_t hkv, int64_t d, float scale, int bf16) {
  const int64_t g = hq / hkv, slot_len = hkv * KV_ROW(d);
  int64_t* idx = (int64_t*)malloc(sizeof(int64_t) * (size_t)(3 * b));
  group_t* groups = (group_t*)malloc(sizeof(group_t) * (size_t)b);
  if (!idx || !groups) {
    free(idx);
    free(groups);
    return -1;
  }
  int64_t *grp = idx, *pos = idx + b, *order = idx + 2 * b;
  const int64_t ng = find_groups(req_to_token, ld_table, rows, seq_lens, out_loc, b, grp, pos,
                                 order, groups);
  if (ng == 0) {
    free(idx);
    free(groups);
    return -1;
  }
  // Items: each group's shared run in ranges, then every request's own keys. Sizes first.
  const int64_t threads = omp_get_max_threads();
  int64_t n_items = b, floats = 0, max_sc = 0, max_kt = 0;
  for (int64_t k = 0; k < ng; ++k) {
    n_items += group_ranges(groups[k].shared, threads);
  }
  item_t* items = (item_t*)malloc(sizeof(item_t) * (size_t)n_items);
  int64_t n = 0;
  for (int64_t k = 0; items && k < ng; ++k) {
    const group_t* gr = &groups[k];
    const int64_t nq = hq * gr->count;
    const int64_t r = group_ranges(gr->shared, threads);
    const int64_t span = (gr->shared + r - 1) / r;
    for (int64_t l0 = 0; l0 < gr->shared; l0 += span, ++n) {
      const int64_t l1 = l0 + span < gr->shared ? l0 + span : gr->shared;
      items[n] = (item_t){k, -1, l0, l1, floats, 0};
      floats += nq * (d + 2);
      max_sc = nq * (l1 - l0 + 32) > max_sc ? nq * (l1 - l0 + 32) : max_sc;  // attend_group's
      max_kt = d * (l1 - l0 + 32) > max_kt ? d * (l1 - l0 + 32) : max_kt;    // padded rows
    }
    floats += nq * d;  // the gathered queries
  }
  for (int64_t i = 0; items && i < b; ++i, ++n) {
    const int64_t l0 = grp[i] >= 0 ? groups[grp[i]].shared : 0;
    items[n] = (item_t){-1, i, l0, seq_lens[i], floats, 0};
    floats += hq * (d + 2);
    max_sc = hq * (seq_lens[i] - l0) > max_sc ? hq * (seq_lens[i] - l0) : max_sc;
  }
  float* buf = items ? (float*)malloc(sizeof(float) * (size_t)floats) : 0;
  if (!buf) {
    free(items);
    free(idx);
    free(groups);
    return -1;
  }
  for (int64_t k = 0; k < n; ++k) items[k].part = buf + items[k].off;
  // Gather each group's queries after its items' parts: (hkv, count, g, d).
  for (int64_t k = 0, it = 0; k < ng; ++k) {
    group_t* gr = &groups[k];
    while (items[it].group == k) ++it;
    gr->q = items[it - 1].part + hq * gr->count * (d + 2);
    for (int64_t t = 0; t < gr->count; ++t)
      for (int64_t j = 0; j < hq; ++j)
        memcpy(gr->q + group_query(gr->count, g, t, j) * d, q + order[gr->first + t] * ldq + j * d,
               sizeof(float) * (size_t)d);
  }
#pragma omp parallel
  {
    float* sc = (float*)malloc(sizeof(float) * (size_t)(max_sc + max_kt + 16));
#pragma omp for schedule(dynamic, 1)
    for (int64_t k = 0; k < n; ++k) {
      const item_t* it = &items[k];
      const int64_t count = it->group >= 0 ? groups[it->group].count : 1;
      float* ml = it->part + hq * count * d;
      if (!sc) {  // no scratch memory: the rows read NaN rather than stale values
        for (int64_t j = 0; j < hq * count; ++j) ml[2 * j] = NAN, ml[2 * j + 1] = 0.0f;
        continue;
      }
      if (it->group >= 0) {
        const group_t* gr = &groups[it->group];
        const int32_t* slots = req_to_token + rows[order[gr->first]] * ld_table;
#if defined(RT_VEC)
        // (bf16 with PAIR_KEYS: attend_heads' pairs beat the transposes at any group size)
        if (d <= 128 && g * count >= GROUP_GEMM_QUERIES && !(bf16 && PAIR_KEYS(d))) {
          attend_group(gr->q, it->part, g * count, hkv, k_buf, v_buf, slots + it->l0,
                       it->l1 - it->l0, slot_len, d, scale, sc, sc + max_sc, ml, bf16);
          continue;
        }
#endif
        attend_heads(gr->q, it->part, g * count, 0, hkv, k_buf, v_buf, slots + it->l0,
                     it->l1 - it->l0, slot_len, d, scale, sc, ml, bf16);
      } else {
        const int32_t* slots = req_to_token + rows[it->req] * ld_table;
        attend_heads(q + it->req * ldq, it->part, g, 0, hkv, k_buf, v_buf, slots + it->l0,
                     it->l1 - it->l0, slot_len, d, scale, sc, ml, bf16);
      }
    }
    free(sc);
    // Merge: request i's head j from its group's ranges (if any) and its own item.
#pragma omp for schedule(static)
    for (int64_t i = 0; i < b; ++i) {
      const item_t* own = &items[n - b + i];
      const group_t* gr = grp[i] >= 0 ? &groups[grp[i]] : 0;
      int64_t first = 0, last = 0;  // the group's range items
      if (gr) {
        while (items[first].group != grp[i]) ++first;
        for (last = first; last < n && items[last].group == grp[i]; ++last) {
        }
      }
      for (int64_t j = 0; j < hq; ++j) {
        // Parts: the group's ranges (query jg of hq * count), then the request's own item.
        const float *o[MAX_GROUP_RANGES + 1], *ml[MAX_GROUP_RANGES + 1];
        const int64_t jg = gr ? group_query(gr->count, g, pos[i], j) : 0;
        const int64_t nqg = gr ? hq * gr->count : 0;
        int64_t n_parts = 0;
        for (int64_t k = first; k < last; ++k, ++n_parts) {
          o[n_parts] = items[k].part + jg * d;
          ml[n_parts] = items[k].part + nqg * d + 2 * jg;
        }
        o[n_parts] = own->part + j * d;
        ml[n_parts++] = own->part + hq * d + 2 * j;
        merge_parts(o, ml, n_parts, d, out + i * ldo + j * d);
      }
    }
  }
  free(buf);
  free(items);
  free(idx);
  free(groups);
  return 0;
}
