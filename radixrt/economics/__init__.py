"""Sizing and cost, without torch or the server: how much KV cache a model needs and what fits
on a GPU (kv_bytes.py, kv_size.py, kv_size_report.py: `radixrt kv-size`), and what a workload
costs under each provider's prompt-caching rules and self-hosted (cost.py and rules/,
`radixrt cost`)."""
