# xpress-bench: the benchmark client/server (bench/xpress-bench/README.md).
# A plain sockets program: it must not link or include anything of xpress, and it builds
# with its own flags (exceptions and RTTI allowed, no -fPIC) rather than the library's.
XB_DIR := bench/xpress-bench
XB_BIN := $(BUILD)/xpress-bench
XB_SRCS := $(wildcard $(XB_DIR)/*.cc)
XB_OBJS := $(XB_SRCS:%.cc=$(BUILD)/%.o)
XB_CXXFLAGS := -std=c++20 -O2 -g -Wall -Wextra -Werror -pthread -MMD -MP

.PHONY: xpress-bench test-xpress-bench
all: $(XB_BIN)
xpress-bench: $(XB_BIN)

# A static pattern rule, so these objects never take the library's implicit %.o rule.
$(XB_OBJS): $(BUILD)/$(XB_DIR)/%.o: $(XB_DIR)/%.cc
	@mkdir -p $(dir $@)
	$(CXX) $(XB_CXXFLAGS) -c $< -o $@

$(XB_BIN): $(XB_OBJS)
	$(CXX) -pthread -o $@ $^

-include $(XB_OBJS:.o=.d)

# Quick loopback self-test of every scenario (well-formed JSON, integrity checks passed).
test-xpress-bench: $(XB_BIN)
	bash $(XB_DIR)/selftest.sh $(XB_BIN)

TEST_TARGETS += test-xpress-bench
