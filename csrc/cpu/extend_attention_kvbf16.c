// extend_attention_f32.c over a bfloat16 KV pool (kv.h): the same source compiled again with
// kv_t = bfloat16; its exported functions end in _kvbf16.
#define RT_KV_BF16 1
#include "extend_attention_f32.c"
