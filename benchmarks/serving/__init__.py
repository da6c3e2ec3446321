"""The serving suite against its peers (llama.cpp, transformers, vLLM), the load generator, the
shared-prefix and JSON benchmarks, the soak."""
