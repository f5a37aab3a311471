# bench/compare: kernel TCP vs xpress vs rsocket vs raw verbs in the Soft-RoCE VM
# (bench/compare.d/README.md).  Included by the top Makefile.
#   make bench-compare   the full comparison (~10-15 min): results/compare/compare.{md,json,svg}
#                        COMPARE_ARGS="--quick" (~3 min) or any bench/compare option
#   make bench-host      host mode, no VM (~3 min): tcp vs xpress pass-through on 127.0.0.1,
#                        5 interleaved rounds, pinned, vs the 2% target: results/host/compare.{md,json,svg}
#                        HOST_ARGS="--quick" (~1 min) or any bench/compare option
#   make test-compare    smoke test (part of `make test`, < 3 min with the VM boot):
#                        report.py's comparison against raw verbs (test_report.py, no VM), then
#                        pingpong 64 B, tcp and xpress, 2 rounds of 1 s, then checks the files;
#                        then the same on the host (bench/compare --host, ~10 s)
COMPARE_ARGS ?=
HOST_ARGS ?=
COMPARE_SMOKE_DIR := $(BUILD)/compare-smoke
HOST_SMOKE_DIR := $(BUILD)/compare-host-smoke

.PHONY: bench-compare bench-host test-compare
bench-compare: softroce-kernel $(LIB) $(BUILD)/xpress-bench $(BUILD)/xpress-stat
	python3 bench/compare $(COMPARE_ARGS)

bench-host: $(LIB) $(BUILD)/xpress-bench $(BUILD)/xpress-stat
	python3 bench/compare --host $(HOST_ARGS)

test-compare: softroce-kernel $(LIB) $(BUILD)/xpress-bench $(BUILD)/xpress-stat
	@python3 bench/compare.d/test_report.py
	@rm -rf $(COMPARE_SMOKE_DIR)
	@start=$$(date +%s); \
	timeout -k 10 175 python3 bench/compare --scenarios pingpong --variants tcp,xpress --rounds 2 \
	  --duration 1 --pp-sizes 64 --timeout 150 --out $(COMPARE_SMOKE_DIR) > $(COMPARE_SMOKE_DIR).log 2>&1; \
	rc=$$?; tail -n 5 $(COMPARE_SMOKE_DIR).log; \
	echo "test-compare: bench/compare exited $$rc after $$(( $$(date +%s) - start )) s (log: $(COMPARE_SMOKE_DIR).log)"; \
	python3 bench/compare.d/check.py $(COMPARE_SMOKE_DIR) --variants tcp,xpress --scenarios pingpong && [ $$rc = 0 ]
	@rm -rf $(HOST_SMOKE_DIR)
	@start=$$(date +%s); \
	timeout -k 10 60 python3 bench/compare --host --scenarios pingpong --rounds 2 --duration 1 --pp-sizes 64 \
	  --out $(HOST_SMOKE_DIR) > $(HOST_SMOKE_DIR).log 2>&1; \
	rc=$$?; tail -n 3 $(HOST_SMOKE_DIR).log; \
	echo "test-compare: bench/compare --host exited $$rc after $$(( $$(date +%s) - start )) s (log: $(HOST_SMOKE_DIR).log)"; \
	python3 bench/compare.d/check.py $(HOST_SMOKE_DIR) --variants tcp,xpress --scenarios pingpong && [ $$rc = 0 ]

TEST_TARGETS += test-compare
