# OpenNeuron. `make demo` and `make test` set everything up from a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
SAN    := build/libtrn-asan
TSAN   := build/libtrn-tsan
PLAIN  := build/libtrn-test

.PHONY: demo test lint format test-c test-c-asan test-c-tsan test-py build deps bench docs clean fuzz fuzz-asan

deps: $(VENV)/.deps-stamp

$(VENV)/.deps-stamp: requirements-dev.txt scripts/install-deps.sh
	bash scripts/install-deps.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -r requirements-dev.txt
	touch $@

# Editable install: CMake builds libtrn and the _C extension into the package.
build: deps
	$(PIP) install -q --no-build-isolation -e .

demo: build
	$(PY) examples/quickstart.py
	$(PY) examples/train_gpt.py

test: build lint test-c test-c-asan test-c-tsan test-py

# Lint and format: ruff (ruff.toml: pyflakes, pycodestyle, a few bug patterns;
# the formatter) and clang-format (.clang-format) over every tracked C/C++ file.
# `make format` rewrites what `make lint` rejects.
C_SOURCES = $(shell git ls-files '*.c' '*.h' '*.cpp' '*.hpp')
lint: deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@clang-format --dry-run --Werror $(C_SOURCES) && echo "clang-format: $(words $(C_SOURCES)) files clean"

format: deps
	$(VENV)/bin/ruff format .
	clang-format -i $(C_SOURCES)

# Kernels at two CPU levels: the tests run at the best one and, for the
# kernel tests and the level's choice, again at the avx2 baseline.
test-c: deps
	cmake -S libtrn -B $(PLAIN) -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DTRN_CPU_LEVELS=avx2;native" >/dev/null
	cmake --build $(PLAIN)
	cd $(PLAIN) && ctest --output-on-failure

test-c-asan: deps
	cmake -S libtrn -B $(SAN) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTRN_SANITIZE=ON >/dev/null
	cmake --build $(SAN)
	cd $(SAN) && ctest --output-on-failure

# ThreadSanitizer over what runs concurrently: streams (worker threads and
# inline), the device thread pool (and its chunk claims), fork, the compiler (gcc from several
# threads) and the collective engine's threads; any report fails the run.
TSAN_TESTS := parallel|stream_async|stream_inline|event|device|fork|compiler|collectives|memory|observe|status|elementwise_async
test-c-tsan: deps
	cmake -S libtrn -B $(TSAN) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTRN_SANITIZE_THREAD=ON >/dev/null
	cmake --build $(TSAN)
	cd $(TSAN) && TSAN_OPTIONS=halt_on_error=1:exitcode=66 ctest --output-on-failure -R '^trn_($(TSAN_TESTS))'

# The whole suite (worker-thread streams, the default); then tensor and fallback
# tests (and compiled graphs) with device memory unreadable from host code
# outside kernels (catches any host-side access); then tensor, stream, profiler and Adaptive Eager
# tests with inline streams (launches run on the calling thread; Adaptive Eager's trials are timed on the host there).
test-py: build
	$(PY) -m pytest -q tests
	TORCH_NEURONX_DEBUG_PROTECT_MEMORY=1 $(PY) -m pytest -q tests/test_tensors.py tests/test_fallback.py tests/test_fallback_aliasing.py \
	  tests/test_elementwise.py tests/test_reduce.py tests/test_index_ops.py tests/test_blas.py \
	  tests/conformance/test_opinfo_compile.py tests/test_compile_inplace.py tests/fuzz/test_fuzz.py
	TORCH_NEURONX_ENABLE_ASYNC_NRT=0 $(PY) -m pytest -q tests/test_tensors.py tests/test_streams.py tests/test_accelerator.py \
	  tests/test_elementwise.py tests/test_adaptive_eager.py tests/test_foreach_chain.py tests/test_observe_profiler.py

# The bad-input fuzzer's full run (docs/fuzz.md): every OpInfo entry, four
# dtypes, two samples each, every mutation; counts per class, report in
# build/fuzz-report.json; fails on a difference not in docs/fuzz.md's table.
fuzz: build
	$(PY) tests/fuzz/driver.py --report build/fuzz-report.json
	$(PY) tests/fuzz/driver.py --subset --protect

# The full run against libtrn built with AddressSanitizer + UBSan (device
# memory poisoned outside each tensor's requested bytes, see
# libtrn/src/runtime/memory.c), preloaded under the extension; any report
# involving OpenNeuron fails it (reports in build/fuzz-asan/).
fuzz-asan: build
	cmake -S libtrn -B $(SAN) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTRN_SANITIZE=ON >/dev/null
	cmake --build $(SAN) --target trn
	$(PY) tests/fuzz/driver.py --asan $(SAN)/libtrn.so --report build/fuzz-asan-report.json

bench: build
	$(PY) bench/bench_ops.py
	$(PY) bench/bench_copy.py
	$(PY) bench/bench_models.py
	$(PY) bench/bench_models.py --solo
	$(PY) bench/bench_models.py --generate
	OMP_NUM_THREADS=1 TORCH_NEURONX_NUM_THREADS=1 $(PY) bench/bench_fusion_models.py --rounds 3
	$(PY) bench/step_bound.py --top 12
	$(PY) bench/bench_moe.py
	$(PY) bench/bench_flex_attention.py
	cmake --build build/cmake --target trn_bench_stream && build/cmake/libtrn/trn_bench_stream
	$(PY) bench/bench_collectives.py
	cmake --build build/cmake --target trn_bench_comm_agree && build/cmake/libtrn/trn_bench_comm_agree
	$(PY) bench/bench_compile.py
	$(PY) bench/bench_nki.py

docs: build
	$(PY) scripts/gen_ops_doc.py

clean:
	rm -rf build torch_neuronx/_C*.so torch_neuronx/lib
