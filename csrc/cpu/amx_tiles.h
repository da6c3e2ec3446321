// AMX tile configuration of gemm_amx.c, gemm_q8a8.c and extend_attention_amx.c (internal
// header), the one place it is written: every one of the eight tiles 16 rows x 64 bytes (C:
// 16 x 16 float32 or int32; A, B: 16 x 32 bf16 or 16 x 64 int8). The configuration is per
// thread: each OpenMP thread loads it before its first tile instruction and releases the
// tiles (_tile_release) when done.
#pragma once

#include <stdint.h>
#include <string.h>

#include "simd.h"

#if defined(RT_AMX)
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} rt_tile_config;

static inline void rt_configure_tiles(void) {
  rt_tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  _tile_loadconfig(&cfg);
}
#endif
