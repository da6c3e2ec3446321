// extend_attention_f32.c over an fp8 e4m3 KV pool (kv.h, fp8.h): the same source compiled again with
// kv_t = one byte per value and a float32 scale per row; its exported functions end in _kve4m3.
#define RT_KV_E4M3 1
#include "extend_attention_f32.c"
