"""The GPU check (`python -m tests.gpu.check --out DIR`): every GPU test and benchmark
in one run on a device machine."""
