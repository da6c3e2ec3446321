"""radixrt's float32 CPU fast path, in one place: the C kernels' build and bindings (build.py,
kernels.py; sources in csrc/cpu/), the kernel versions of the model's layers (layers.py), the
`cpu` attention backend (attention.py), whole decoder layers as one C call per pass
(fused_layer.py), and the process set-up that turns them on (runtime.py)."""
