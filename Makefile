# kiln: `make demo` and `make test` work on a fresh Debian 12 machine as root.
# Each installs the Debian packages it needs (apt-get), configures with CMake
# + Ninja, builds, and runs.

BUILD ?= build
SAN_BUILD ?= build-sanitize
ARM_BUILD ?= build-arm64
FUZZ_SECONDS ?= 60
JOBS ?= $(shell nproc)

# Build and test dependencies, all Debian packages.
# dpkg-dev: dpkg-shlibdeps, for the Debian package's dependencies (make package, and its test);
# abigail-tools: abidiff, for the stable C ABI's check against its baseline;
# libgloo-dev: the distributed backend across machines; iproute2: ip netns,
# the two-node test's network namespaces; zlib1g-dev: gzip data files;
# dataset-fashion-mnist: the MLP example's data (IDX files); libzip-dev: .npz archives;
# libdnnl-dev: oneDNN, the convolution kernels; ccache: the compiler cache of every
# build (CMakeLists.txt, KILN_CCACHE).
PKGS := cmake ninja-build g++ pkg-config libopenblas-dev libhwy-dev libcli11-dev \
        nlohmann-json3-dev libgtest-dev dpkg-dev abigail-tools libgloo-dev iproute2 \
        zlib1g-dev dataset-fashion-mnist libzip-dev libdnnl-dev ccache
# The demo trains on the text of Debian's fortune files.
DEMO_PKGS := fortunes
# Benchmarks also compare against PyTorch 1.13's C++ library.
BENCH_PKGS := libtorch-dev libopenmpi-dev openmpi-bin
# The instrumented build (sanitizers, fuzz targets) needs clang with libFuzzer and its sanitizer runtimes.
FUZZ_PKGS := clang libclang-rt-14-dev
# The arm64 build: Debian's cross compiler and qemu-user (the arm64 libraries
# come into a sysroot from Debian's arm64 packages: cmake/arm64-sysroot.sh).
ARM_PKGS := g++-aarch64-linux-gnu qemu-user

.PHONY: demo build-cli test check-format sanitize-build check-sanitize fuzz bench bench-pytorch build package package-arm64 icount-arm64 deps demo-deps \
        bench-deps fuzz-deps clean arm64 test-arm64 arm64-deps

define install_missing
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then \
	    echo "kiln: missing Debian packages:$$missing"; \
	    echo "kiln: run as root, or install them with: sudo apt-get install$$missing"; exit 1; \
	  fi; \
	  echo "kiln: installing$$missing"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	fi
endef

deps:
	$(call install_missing,$(PKGS))

demo-deps: deps
	$(call install_missing,$(DEMO_PKGS))

bench-deps: deps
	$(call install_missing,$(BENCH_PKGS))

fuzz-deps: deps
	$(call install_missing,$(FUZZ_PKGS))

arm64-deps: deps
	$(call install_missing,$(ARM_PKGS))
	bash cmake/arm64-sysroot.sh $(CURDIR)/$(ARM_BUILD)/sysroot

$(BUILD)/build.ninja: CMakeLists.txt
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The library and the kiln CLI alone (what the demo runs): no tests or benchmarks.
build-cli: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target kiln-cli

# Trains the default character GPT (a few minutes on 2 cores; --time-limit
# caps it on slower machines), then samples from the checkpoint.
demo: demo-deps build-cli
	./$(BUILD)/bin/kiln info
	./$(BUILD)/bin/kiln train --out $(BUILD)/demo.safetensors --overwrite --time-limit 285
	./$(BUILD)/bin/kiln generate --ckpt $(BUILD)/demo.safetensors --prompt "The meaning of life" --tokens 300 --top-k 20

# Tests run side by side, JOBS at a time (the compile differential's shards
# take most of the time; tests sharing /dev/shm hold a resource lock).
test: build
	ctest --test-dir $(BUILD) -j $(JOBS) --output-on-failure

# The Debian package of the library, headers and CLI (CPack), in $(BUILD).
package: build
	cmake --build $(BUILD) --target package

# The C and C++ lines changed since .clang-format was written follow it
# (tools/check_format.sh; CI runs this first).
check-format:
	$(call install_missing,clang-format git)
	bash tools/check_format.sh

# One instrumented build, clang with ASan + UBSan and libFuzzer's coverage
# (KILN_FUZZ, KILN_SANITIZE): its objects serve both the suite under the
# sanitizers and the fuzz targets, so CI compiles the library twice (release,
# instrumented) rather than three times. clang rather than GCC: 0.6 of GCC's
# compile time with the sanitizers on (reduce_kernels.cpp 25 s against 42 s);
# line tables only, which is what a sanitizer's stack trace prints.
SAN_FLAGS := -O2 -gline-tables-only -DNDEBUG
sanitize-build: fuzz-deps
	CC=clang CXX=clang++ cmake -S . -B $(SAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SAN_FLAGS)" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$(SAN_FLAGS)" \
	  -DKILN_SANITIZE=ON -DKILN_FUZZ=ON -DKILN_BUILD_BENCH=OFF
	cmake --build $(SAN_BUILD) -j $(JOBS)

check-sanitize: sanitize-build
	ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir $(SAN_BUILD) -j $(JOBS) --output-on-failure

# libFuzzer targets (safetensors reader, checkpoint loader, CLI arguments, data
# files, the store's requests) of the instrumented build, each run
# FUZZ_SECONDS from tests/fuzz/corpus, JOBS side by side; any finding fails.
# Then the kiln::compile differential tester for FUZZ_SECONDS on the programs from
# seed DIFF_FIRST on (by default those right after the 2,000 `make test`
# runs, so CI runs the same ones; DIFF_FIRST=$$(date +%s)000 explores new
# ones; `kiln-compile-differential --first SEED --count 1` replays a finding).
DIFF_FIRST ?= 2000
fuzz: sanitize-build build
	bash tests/fuzz/run.sh $(SAN_BUILD)/bin $(FUZZ_SECONDS) $(JOBS)
	./$(BUILD)/bin/kiln-compile-differential --first $(DIFF_FIRST) --count 1000000000 --seconds $(FUZZ_SECONDS)

bench: bench-deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)
	./$(BUILD)/bin/kiln-bench-ops --json
	./$(BUILD)/bin/kiln-bench-train --json --profile
	./$(BUILD)/bin/kiln-bench-attention --json
	./$(BUILD)/bin/kiln-bench-compile --json
	./$(BUILD)/bin/kiln-bench-stable --json
	./$(BUILD)/bin/kiln-bench-collectives --json
	./$(BUILD)/bin/kiln-bench-vision --json

# kiln-bench-vision beside PyTorch 2.9 itself (PyPI's wheel, in a venv of
# the build folder: never for tests or CI). PYTHON: the interpreter that makes it.
PYTHON ?= python3
TORCH_VENV ?= $(BUILD)/venv-pytorch
bench-pytorch: bench-deps
	$(call install_missing,python3-venv)
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS) --target kiln-bench-vision
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -c 'import torch' 2>/dev/null || $(TORCH_VENV)/bin/pip install -q 'torch==2.9.*' numpy
	KILN_BENCH_PYTHON=$(abspath $(TORCH_VENV))/bin/python ./$(BUILD)/bin/kiln-bench-vision --json

# kiln cross-built for arm64 (docs/ARCHITECTURE.md, "Arm"), and its tests under qemu-user:
# the suite on a NEON CPU (neoverse-n1: no SVE), the kernel tests again on
# SVE CPUs of 128, 256 and 512 bits (tests/CMakeLists.txt's kernels-sve*).
# ARM_TESTS: a ctest -R pattern (CI runs the subset .ci/run names).
ARM_TESTS ?= .
arm64: arm64-deps
	cmake -S . -B $(ARM_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCH=OFF \
	  -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DKILN_ARM64_SYSROOT=$(CURDIR)/$(ARM_BUILD)/sysroot
	cmake --build $(ARM_BUILD) -j $(JOBS)

# Instructions per element of the kernels on emulated Arm CPUs (a proxy for
# speed, which qemu cannot give; bench/arm64_icount.sh).
icount-arm64: arm64
	bash bench/arm64_icount.sh $(ARM_BUILD)

# The Debian package for arm64 (its Depends from the sysroot's shlibs records).
package-arm64: arm64
	cmake --build $(ARM_BUILD) --target package

test-arm64: arm64
	KILN_CXX=aarch64-linux-gnu-g++ KILN_CXX_MARCH=armv8-a QEMU_CPU=neoverse-n1 ctest --test-dir $(ARM_BUILD) -j $(JOBS) --output-on-failure -R '$(ARM_TESTS)'

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(ARM_BUILD)
