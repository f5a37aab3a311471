# xpress: top-level build.  `make deps` installs every Debian package the build,
# tests and benchmarks need; `make test` runs every test.  Each test area keeps
# its own fragment (*.mk) next to its files and appends to TEST_TARGETS.
SHELL := /bin/bash
CXX ?= g++
CC ?= gcc
BUILD := build
LIB := $(BUILD)/libxpress.so
CORE := $(BUILD)/libxpress_core.a

WARN := -Wall -Wextra -Werror
CXXFLAGS ?= -O2 -g
CXXFLAGS += -std=c++20 -U_FORTIFY_SOURCE -fPIC -fno-exceptions -fno-rtti -fvisibility=hidden \
            -pthread $(WARN) -I. -I$(BUILD)/gen -MMD -MP
# The library is linked with link-time optimisation: the data path crosses
# per-concern files (conn_io -> mux -> record_channel -> rc_link), and LTO
# inlines across them (bench/hotpath.sh; docs/results/tuning.md).  Objects are fat, so
# the unit tests and tools link their ordinary code without LTO.  LTO=0 off.
LTO ?= 1
ifeq ($(LTO),1)
CXXFLAGS += -flto=auto -ffat-lto-objects
LIB_LTO := -flto=auto -O2 -g
endif
# rdma-core (libibverbs, librdmacm) and libunwind are not linked: verbs/
# dlopens rdma-core when a connection could first use it (verbs/rdma_lib.h),
# preload/backtrace.cc libunwind when XPRESS_BACKTRACE asks for it, so a
# preloaded process that never connects does not load them.
LDLIBS := -ldl -pthread
# The library needs no C++ run time of its own (preload/cxxrt.cc defines the
# entry points its code calls; the rest of libstdc++ it uses is header code),
# and carries the few libgcc helpers it uses: a C program preloaded with it
# then loads and relocates no libstdc++.
LIB_STATIC_RT := -static-libstdc++ -static-libgcc
# Lazy binding (no -z now): a preloaded library is loaded by every process,
# and -z now makes the loader look up all ~100 of its imports at every exec
# (two thirds of its start-up instructions) although a process that never
# opens an inet socket calls a handful of them.  Lazy resolution is safe in
# every place a wrapper can run: glibc's resolver (_dl_fixup) takes no lock
# and allocates nothing, so it may run in a signal handler, between fork's
# atfork handlers, in a vfork child (it writes the same GOT value the parent
# would) and before our constructor (relocation is done before any
# constructor runs).  Full RELRO would buy little here: the real functions'
# pointers (preload/real.cc) are writable data anyway.  test-startup bounds
# the bindings made at start.  No DT_FINI (-fini names a function that does
# not exist): crt's _fini is empty, and calling it at exit faults in the last
# text page in every process (destructors run from .fini_array).
# -z noseparate-code: two LOAD segments (headers, text and read-only data in
# one, read and execute; the writable data) instead of four, so the loader
# makes two mmaps fewer and start-up faults one page fewer at every exec.
# What becomes executable is constants and symbol tables, never writable
# data (tests/unit/startup.sh, two_load_segments).
LIB_LDFLAGS := -Wl,-z,lazy -Wl,-z,relro -Wl,-z,defs -Wl,-fini=xp_no_fini -Wl,-z,noseparate-code

# Test-only code (fault injection, XPRESS_TEST_USER_MODE): compiled, with
# -DXP_TESTING, only into the test library $(TEST_LIB); the release library
# has neither the code nor its checks (tests/unit/symbols.sh proves it).
TESTING_SRCS := stream/fault.cc preload/test_user_mode.cc
# Layers below preload/ (no interposed symbols): linked into unit tests too.
CORE_SRCS := $(filter-out $(TESTING_SRCS), \
               $(wildcard common/*.cc stream/*.cc verbs/*.cc alloc/*.cc flow/*.cc recover/*.cc) \
               $(filter-out preload/wrap_%.cc preload/cxxrt.cc,$(wildcard preload/*.cc)))
# The wrappers and the library's own C++ run time (preload/cxxrt.cc): in the
# library only.
WRAP_SRCS := $(wildcard preload/wrap_*.cc) preload/cxxrt.cc
ASM_SRCS  := $(wildcard preload/*.S)
CORE_OBJS := $(CORE_SRCS:%.cc=$(BUILD)/%.o)
WRAP_OBJS := $(WRAP_SRCS:%.cc=$(BUILD)/%.o) $(ASM_SRCS:%.S=$(BUILD)/%.o)

TEST_TARGETS :=

.PHONY: all deps test clean format check-format
all: $(LIB) tools

$(BUILD)/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(BUILD)/%.o: %.S
	@mkdir -p $(dir $@)
	$(CC) -c $< -o $@

$(CORE): $(CORE_OBJS)
	@rm -f $@
	ar rcs $@ $^

# The export list is generated from the one interposition table.
$(BUILD)/exports.map: preload/interpose_table.def preload/alloc_table.def tools/gen-exports.sh
	@mkdir -p $(BUILD)
	bash tools/gen-exports.sh preload/interpose_table.def preload/alloc_table.def > $@

$(LIB): $(WRAP_OBJS) $(CORE) $(BUILD)/exports.map
	$(CXX) $(LIB_LTO) -shared -o $@ $(WRAP_OBJS) -Wl,--whole-archive $(CORE) -Wl,--no-whole-archive \
	  -Wl,--version-script=$(BUILD)/exports.map -Wl,-soname,libxpress.so.$(SOVERSION) $(LIB_LDFLAGS) $(LIB_STATIC_RT) $(LDLIBS)

-include $(CORE_OBJS:.o=.d) $(WRAP_OBJS:.o=.d)

# The test library: the same sources plus $(TESTING_SRCS), built with
# -DXP_TESTING into $(TEST_DIR).  Only the tests that inject faults or use
# XPRESS_TEST_USER_MODE preload it (test-semantics' user-mode run, the VM
# recovery case); everything else tests the release library.
TEST_DIR := $(BUILD)/test
TEST_LIB := $(TEST_DIR)/libxpress.so
TEST_OBJS := $(addprefix $(TEST_DIR)/,$(CORE_SRCS:.cc=.o) $(TESTING_SRCS:.cc=.o) $(WRAP_SRCS:.cc=.o))
$(TEST_OBJS): $(TEST_DIR)/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -DXP_TESTING -c $< -o $@
$(TEST_DIR)/preload/lifecycle.o: $(BUILD)/gen/xp_version.h
$(TEST_LIB): $(TEST_OBJS) $(ASM_SRCS:%.S=$(BUILD)/%.o) $(BUILD)/exports.map
	$(CXX) $(LIB_LTO) -shared -o $@ $(TEST_OBJS) $(ASM_SRCS:%.S=$(BUILD)/%.o) \
	  -Wl,--version-script=$(BUILD)/exports.map -Wl,-soname,libxpress.so.$(SOVERSION) $(LIB_LDFLAGS) $(LIB_STATIC_RT) $(LDLIBS)
-include $(TEST_OBJS:.o=.d)
.PHONY: test-lib
test-lib: $(TEST_LIB)

# The version and git revision for the start-up line (preload/lifecycle.cc):
# rewritten only when they change, so nothing else rebuilds.
$(BUILD)/gen/xp_version.h: FORCE
	@mkdir -p $(dir $@)
	@v="#define XP_VERSION \"$$(cat VERSION)\"\n#define XP_GIT_REV \"$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)\""; \
	  if [ "$$(cat $@ 2>/dev/null)" != "$$(printf "$$v")" ]; then printf "$$v\n" > $@; fi
.PHONY: FORCE
$(BUILD)/preload/lifecycle.o: $(BUILD)/gen/xp_version.h

include tests/unit/unit.mk
include tests/semantics/semantics.mk
include tests/programs/programs.mk
include tests/verbs/verbs.mk
include tests/fuzz/fuzz.mk
include tools/tools.mk
include tools/softroce/softroce.mk
include tests/rdma-programs/rdma-programs.mk
include bench/bench.mk
include bench/xpress-bench/xpress-bench.mk
include bench/compare.mk
include packaging/packaging.mk

deps:
	bash tools/install-deps.sh

test: $(TEST_TARGETS)
	@echo "make test: all test groups passed: $(TEST_TARGETS)"
	@echo "groups: $(words $(TEST_TARGETS)) passed, 0 failed"

format:
	clang-format -i $$(git ls-files '*.cc' '*.h' '*.c')

check-format:
	clang-format --dry-run -Werror $$(git ls-files '*.cc' '*.h' '*.c')

clean:
	rm -rf $(BUILD)
