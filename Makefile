# Two commands do all the set-up on a fresh Debian 12 machine:
#   make run    installs the Debian packages missing, builds the libraries
#               and programs only (no tests, no npm), serves examples/config
#   make test   installs what is missing (also the npm interop modules),
#               builds everything, runs every test
BUILD        ?= build
RUN_BUILD    ?= build-run
ASAN_BUILD   ?= build-asan
FUZZ_BUILD   ?= build-fuzz
BENCH_BUILD  ?= build-bench
FUZZ_SECONDS ?= 60
MESON_OPTS   ?=

.PHONY: all deps deps-run build test test-asan test-valgrind run fuzz bench bench-smoke clean

all: build

# What building and running needs: Debian packages only.
deps-run:
	@scripts/install-deps.sh run

# Everything the tests use, with the interop tests' npm modules.
deps:
	@scripts/install-deps.sh test
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

# A build directory of its own, without the tests (-Dtests=false).
$(RUN_BUILD)/build.ninja:
	meson setup $(RUN_BUILD) -Dtests=false $(MESON_OPTS)

run: deps-run $(RUN_BUILD)/build.ninja
	ninja -C $(RUN_BUILD)
	tools/run-example.sh $(RUN_BUILD)

# libFuzzer targets built with clang, each run for FUZZ_SECONDS; non-zero
# on any finding.
fuzz: deps
	fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# Optimised build, every benchmark; BENCH lines and tables on stdout.
bench: deps
	bench/run.sh $(BENCH_BUILD)

# The optimised build (-O3 finds warnings -O0 does not) and the benchmarks'
# smoke tests (reduced sizes: they check the benchmarks run, not speed).
bench-smoke: deps
	[ -f $(BENCH_BUILD)/build.ninja ] || meson setup $(BENCH_BUILD) \
	  -Dbench=true --buildtype=release $(MESON_OPTS)
	ninja -C $(BENCH_BUILD)
	meson test -C $(BENCH_BUILD) --suite bench --print-errorlogs

clean:
	rm -rf $(BUILD) $(RUN_BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(BENCH_BUILD)
