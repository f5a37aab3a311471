# Pass-through overhead of the preload: sockperf latency and iperf3 throughput,
# plain vs preloaded, interleaved; prints a Markdown table and writes
# results/overhead.md and results/overhead.json.  Not part of `make test`
# (it only reports; it never fails on timing).
# Knobs (environment or make variables): XPRESS_LIB, ROUNDS, SP_SECS, SP_MSG,
# IPERF_SECS, PIN, XPRESS_ENV — see bench/overhead.sh.
XPRESS_LIB ?= $(abspath $(LIB))

.PHONY: bench-overhead
bench-overhead: $(if $(filter $(abspath $(LIB)),$(abspath $(XPRESS_LIB))),$(LIB))
	XPRESS_LIB=$(abspath $(XPRESS_LIB)) bash bench/overhead.sh

# Allocator churn: the hooked allocator against glibc malloc (throughput and
# RSS, interleaved; see bench/alloc-churn.sh).  Reports only.
$(BUILD)/bench/alloc-churn: bench/alloc-churn.cc
	@mkdir -p $(dir $@)
	$(CXX) -std=c++20 -O2 -g -pthread $(WARN) -o $@ $<

.PHONY: bench-alloc
bench-alloc: $(BUILD)/bench/alloc-churn $(if $(filter $(abspath $(LIB)),$(abspath $(XPRESS_LIB))),$(LIB))
	XPRESS_LIB=$(abspath $(XPRESS_LIB)) bash bench/alloc-churn.sh

# Ping-pong with the client waiting in recv, poll, epoll_wait or select, kernel
# TCP vs xpress builds in one VM boot (bench/readiness-pingpong.sh).  Reports only.
$(BUILD)/bench/readiness-pingpong: bench/readiness-pingpong.c bench/lib/latency.h
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -Wall -Wextra -Werror -o $@ $<

.PHONY: bench-readiness
bench-readiness: $(BUILD)/bench/readiness-pingpong $(LIB) softroce-kernel
	bash bench/readiness-pingpong.sh

# Many threads, each with its own connection, 64 B request/response (epoll
# workers on the server, poll or blocking recv on the client): TCP vs xpress
# in one VM boot (bench/mt-pingpong.sh).  Reports only.
$(BUILD)/bench/mt-pingpong: bench/mt-pingpong.c bench/lib/latency.h
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -Wall -Wextra -Werror -pthread -o $@ $<

.PHONY: bench-threads
bench-threads: $(BUILD)/bench/mt-pingpong $(LIB) softroce-kernel
	bash bench/mt-pingpong.sh

# User-space instructions of the RDMA data path per 64 B round trip and per
# empty receive, over the unit tests' fake link (callgrind; deterministic, no
# device; bench/hotpath.sh).  The unit tests linked like the library (LTO).
HOTPATH_UNIT := $(BUILD)/tests/unit/xpress-unit-lto
$(HOTPATH_UNIT): $(UNIT_OBJS) $(CORE)
	$(CXX) $(LIB_LTO) -o $@ $(UNIT_OBJS) $(CORE) $(LDLIBS)

.PHONY: bench-hotpath
bench-hotpath: $(HOTPATH_UNIT)
	XPRESS_UNIT=$(abspath $(HOTPATH_UNIT)) bash bench/hotpath.sh
