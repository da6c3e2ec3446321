"""ModelConfig: which model, on which device, in which dtype, on which kernels."""

from __future__ import annotations

import os
from dataclasses import dataclass

from radixrt.core.config.choices import CPU_KERNEL_MODES, DEVICES, DTYPES, QUANTIZATIONS


@dataclass(frozen=True)
class ModelConfig:
    """Which model, on which device, in which dtype."""

    model_path: str | None = None  # None: the bundled SmolLM2-135M-Instruct
    # auto: bfloat16 on CUDA; on the CPU bfloat16 linear weights where radixrt's kernels run a
    # vector variant, else float32 (radixrt/model/cpu/runtime.py bf16_on_kernels)
    dtype: str = "auto"
    device: str = "auto"  # auto: cuda when available
    context_length: int | None = None  # None: the model's max_position_embeddings
    attention_backend: str | None = None  # None: the best available for the device
    tp_size: int = 1
    nnodes: int = 1  # hosts that share the tp_size ranks, tp_size / nnodes each
    node_rank: int = 0  # this host's index; node 0 holds rank 0 and the HTTP server
    dist_init_addr: str | None = None  # host:port where the ranks meet; None: 127.0.0.1, any port
    # The secret every node shares (a path, so the secret stays out of argv and server info);
    # None: $RADIXRT_DIST_SECRET, else (one node only) a fresh one.
    dist_secret_file: str | None = None
    disable_cuda_graph: bool = False  # CUDA graphs replay decode steps (flashinfer, triton on CUDA)
    cuda_graph_max_bs: int = 64  # largest decode batch captured; bigger batches run eagerly
    cpu_kernels: str = "auto"  # float32 on CPU: radixrt's C kernels (auto: where faster than torch)
    quantization: str | None = (
        None  # int8: weight-only int8 linear layers (CPU), from float weights
    )

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if self.context_length is not None and self.context_length < 2:
            raise ValueError(f"context_length must be >= 2, got {self.context_length}")
        if self.tp_size < 1:
            raise ValueError(f"tp_size must be >= 1, got {self.tp_size}")
        if self.nnodes < 1 or self.tp_size % self.nnodes:
            raise ValueError(f"nnodes must divide tp_size {self.tp_size}, got {self.nnodes}")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"node_rank must be in [0, nnodes), got {self.node_rank}")
        if self.nnodes > 1 and not self.dist_init_addr:
            raise ValueError("nnodes > 1 needs dist_init_addr (host:port of node 0)")
        if self.dist_secret_file == "":
            raise ValueError("dist_secret_file must not be empty")
        if (
            self.nnodes > 1
            and self.dist_secret_file is None
            and not os.environ.get("RADIXRT_DIST_SECRET")
        ):
            raise ValueError(
                "nnodes > 1 needs the same secret on every node: set "
                "$RADIXRT_DIST_SECRET or --dist-secret-file"
            )
        if self.cpu_kernels not in CPU_KERNEL_MODES:
            raise ValueError(
                f"cpu_kernels must be one of {CPU_KERNEL_MODES}, got {self.cpu_kernels!r}"
            )
        if self.quantization is not None:
            if self.quantization not in QUANTIZATIONS:
                raise ValueError(
                    f"quantization must be one of {QUANTIZATIONS}, got {self.quantization!r}"
                )
            if self.device == "cuda" or self.dtype not in ("auto", "float32"):
                raise ValueError(
                    f"quantization {self.quantization} runs on radixrt's CPU kernels: it needs "
                    "the CPU and "
                    f"float32 activations (device {self.device!r}, dtype {self.dtype!r})"
                )
            if self.cpu_kernels == "off":
                raise ValueError(
                    f"quantization {self.quantization} runs on radixrt's CPU kernels: not with "
                    "cpu_kernels='off'"
                )
        if self.cuda_graph_max_bs < 1:
            raise ValueError(f"cuda_graph_max_bs must be >= 1, got {self.cuda_graph_max_bs}")
