"""The model room: families (per-architecture modules), layers, attention backends,
the CPU kernels, the CUDA kernels and tensor-parallel communication."""
