# Two commands do all the set-up on a fresh Debian 12 machine:
#   make run    installs what is missing, builds, serves examples/config
#   make test   installs what is missing, builds, runs every test
BUILD        ?= build
ASAN_BUILD   ?= build-asan
FUZZ_BUILD   ?= build-fuzz
BENCH_BUILD  ?= build-bench
FUZZ_SECONDS ?= 60
MESON_OPTS   ?=

.PHONY: all deps build test test-asan test-valgrind run fuzz bench clean

all: build

deps:
	@scripts/install-deps.sh
	@[ -d tests/interop/node_modules ] || \
	  npm ci --prefix tests/interop --no-audit --no-fund --loglevel=error

$(BUILD)/build.ninja:
	meson setup $(BUILD) $(MESON_OPTS)

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

test: build
	meson test -C $(BUILD) --print-errorlogs

# The same suites built with clang under AddressSanitizer and UBSan.
test-asan: deps
	[ -f $(ASAN_BUILD)/build.ninja ] || CC=clang meson setup $(ASAN_BUILD) \
	  -Db_sanitize=address,undefined -Db_lundef=false $(MESON_OPTS)
	ninja -C $(ASAN_BUILD)
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  meson test -C $(ASAN_BUILD) --print-errorlogs

# The C suites under valgrind memcheck (slow; not in CI).
test-valgrind: build
	tests/valgrind/run.sh $(BUILD)

run: build
	tools/run-example.sh $(BUILD)

# libFuzzer targets built with clang, each run for FUZZ_SECONDS; non-zero
# on any finding.
fuzz: deps
	fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# Optimised build, every benchmark; BENCH lines and tables on stdout.
bench: deps
	bench/run.sh $(BENCH_BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(BENCH_BUILD)
