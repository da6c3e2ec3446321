// attention_shared.c over an fp8 e5m2 KV pool (kv.h, fp8.h): the same source compiled again with
// kv_t = one byte per value and a float32 scale per row; its exported functions end in _kve5m2.
#define RT_KV_E5M2 1
#include "attention_shared.c"
