"""The values the configs accept for their enumerated fields (the CLI lists them too)."""

from __future__ import annotations

DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")
# The KV pool's element type; auto: the activations' dtype (float32 on the CPU). fp8_*: one
# byte per element plus a float32 scale per (token, KV head), CPU only (cache/kv_layout.py).
KV_CACHE_DTYPES = ("auto", "float32", "bfloat16", "fp8_e4m3", "fp8_e5m2")
# radixrt/model/cpu/guard.py: auto times each C kernel against torch once per machine
# and keeps the faster.
CPU_KERNEL_MODES = ("auto", "on", "off")
# Quantization at load, from float checkpoints (CPU kernels; radixrt/model/cpu/layers.py):
# int8 weights (one scale per output column), times float32 activations or, where the guard
# measures AMX-INT8 / VNNI faster, times activations quantized per token to two int8 planes
# (x and its rounding residual); w8a8 the same with one plane (faster, less precise).
QUANTIZATIONS = ("int8", "w8a8")
SCHEDULE_POLICIES = ("lpm", "dfs-weight", "fcfs", "random")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
# The names radixrt.grammar's registry knows (a test keeps the two equal); the first is the
# default.
GRAMMAR_BACKEND_NAMES = ("auto", "llguidance", "outlines")
# How the model writes tool calls (radixrt/serve/http/tools/formats.py; a test keeps the two
# equal); auto: the format the chat template shows, Hermes when it shows none.
TOOL_CALL_FORMATS = ("auto", "hermes", "llama3_json", "mistral", "granite")
# How a reasoning model's thinking is read out of its output (radixrt/serve/http/tools/
# reasoning.py); none: it stays in the text.
REASONING_PARSERS = ("none", "qwen3", "deepseek_r1")
