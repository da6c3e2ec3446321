"""`python -m radixrt.model.cuda`: build the CUDA extension now and say whether it is usable."""

from __future__ import annotations

import logging

from radixrt.model.cuda.build import build_error, build_seconds, cannot_build_reason, get_ops


def main() -> int:
    """Exit 1 only when a build was possible here and failed."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    reason = cannot_build_reason()
    if reason is not None:
        print(f"radixrt CUDA kernels not built: {reason} (torch references will be used)")
        return 0
    if get_ops() is None:
        print(f"radixrt CUDA kernels FAILED to build: {build_error()}")
        return 1
    print(f"radixrt CUDA kernels ready in {build_seconds() or 0.0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
