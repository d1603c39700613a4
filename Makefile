# kosoku — top-level commands. Every target that builds or runs first installs what it needs (make deps).
#   make run     build the appliance image (conf/appliance.conf) and boot it in QEMU: http://127.0.0.1:8080/,
#                its serial console in this terminal (PORT=N to change the port)
#   make run-host  serve conf/default.conf with the host binary on http://127.0.0.1:8080/
#   make test    unit tests under ASan+UBSan, fuzzers (bounded), integration tests against the release binary
#   make fuzz-soak  each libFuzzer target for FUZZ_SOAK_SECONDS (default 600), its corpus kept in build/fuzz
#   make bench   kosoku vs nginx side by side (bench/run)
#   make image   the appliance image (image/build-image)
SHELL := /bin/bash
BUILD ?= build
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 30
PYTHON ?= /usr/bin/python3
CONF ?= conf/default.conf

.PHONY: all deps build build-asan build-fuzz run run-host console test unit fuzz fuzz-soak integration bench image clean

all: build

deps:
	@./.ci/deps.sh

$(BUILD)/release/build.ninja: | deps
	cmake -S . -B $(BUILD)/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DKOSOKU_STATIC=ON -DKOSOKU_TESTS=OFF

build: deps $(BUILD)/release/build.ninja
	ninja -C $(BUILD)/release -j$(JOBS) kosoku kosoku-loadgen
	@file $(BUILD)/release/kosoku | grep -q 'statically linked' || { echo "kosoku is not statically linked"; exit 1; }

build-asan: deps
	cmake -S . -B $(BUILD)/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKOSOKU_SANITIZE=ON >/dev/null
	ninja -C $(BUILD)/asan -j$(JOBS)

build-fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B $(BUILD)/fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKOSOKU_FUZZ=ON >/dev/null
	ninja -C $(BUILD)/fuzz -j$(JOBS)

run: image
	./image/run-qemu $(if $(PORT),--port $(PORT))

run-host: build
	$(BUILD)/release/kosoku -c $(CONF)

console:
	./image/console

unit: build-asan
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(BUILD)/asan/unit_tests

# Each libFuzzer target runs FUZZ_SECONDS on its seed corpus (copied, so seeds stay clean), with its dictionary
# (tests/fuzz/NAME.dict) and extra libFuzzer flags (tests/fuzz/NAME.flags, one line) where they exist.
fuzz: build-fuzz
	@set -eo pipefail; for f in $(BUILD)/fuzz/*_fuzz; do \
	  name=$$(basename $$f _fuzz); corpus=$(BUILD)/fuzz/corpus-$$name; mkdir -p $$corpus; \
	  [ -d tests/fuzz/corpus/$$name ] && cp -r tests/fuzz/corpus/$$name/. $$corpus/ || true; \
	  dict=""; [ -f tests/fuzz/$$name.dict ] && dict="-dict=tests/fuzz/$$name.dict"; \
	  flags=""; [ -f tests/fuzz/$$name.flags ] && flags="$$(cat tests/fuzz/$$name.flags)"; \
	  echo "fuzz: $$name for $(FUZZ_SECONDS)s"; \
	  $$f $$corpus $$dict $$flags -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 2>&1 | tail -n 3; \
	done

# The long run before an issue touching a parser is resolved: every target for FUZZ_SOAK_SECONDS on the corpus
# the bounded runs grew (build/fuzz/corpus-NAME), FUZZ_SOAK_JOBS targets at a time; each target's log
# (executions, coverage, any crash) goes to build/fuzz/soak-NAME.log, and a crash fails the target.
FUZZ_SOAK_SECONDS ?= 600
FUZZ_SOAK_JOBS ?= 1
fuzz-soak: build-fuzz
	@ls $(BUILD)/fuzz/*_fuzz | xargs -P $(FUZZ_SOAK_JOBS) -I{} sh -c 'name=$$(basename {} _fuzz); \
	  corpus=$(BUILD)/fuzz/corpus-$$name; mkdir -p $$corpus; \
	  [ -d tests/fuzz/corpus/$$name ] && cp -r tests/fuzz/corpus/$$name/. $$corpus/ || true; \
	  dict=""; [ -f tests/fuzz/$$name.dict ] && dict="-dict=tests/fuzz/$$name.dict"; \
	  flags=""; [ -f tests/fuzz/$$name.flags ] && flags="$$(cat tests/fuzz/$$name.flags)"; \
	  {} $$corpus $$dict $$flags -max_total_time=$(FUZZ_SOAK_SECONDS) -print_final_stats=1 \
	     -artifact_prefix=$(BUILD)/fuzz/crash-$$name- > $(BUILD)/fuzz/soak-$$name.log 2>&1; rc=$$?; \
	  echo "fuzz-soak: $$name exit $$rc: $$(grep -E "stat::number_of_executed_units|^#[0-9]+.*DONE" $(BUILD)/fuzz/soak-$$name.log | tr "\n" " ")"; \
	  exit $$rc'

integration: build build-asan
	KOSOKU_BIN=$(BUILD)/release/kosoku $(PYTHON) -m pytest -q tests/integration
	KOSOKU_BIN=$(BUILD)/asan/kosoku KOSOKU_SANITIZED=1 $(PYTHON) -m pytest -q -x tests/integration -k "conformance or engine"
	KOSOKU_BIN=$(BUILD)/asan/kosoku KOSOKU_SANITIZED=1 $(PYTHON) -m pytest -q -x tests/integration/test_http2.py \
	  tests/integration/test_http2_attacks.py

test: unit fuzz integration

bench: build
	./bench/run

image: build
	./image/build-image $(if $(CONFIG),--config $(CONFIG)) $(if $(SITE),--site $(SITE))

clean:
	rm -rf $(BUILD)
