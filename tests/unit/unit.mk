# Unit tests (doctest) of the layers below the wrappers, and the symbol test.
UNIT_SRCS := $(wildcard tests/unit/*.cc)
UNIT_OBJS := $(UNIT_SRCS:%.cc=$(BUILD)/%.o)
UNIT_BIN := $(BUILD)/tests/unit/xpress-unit

# doctest wants exceptions and RTTI; the library itself is built without.
# No LTO for the tests: with it the link compares their classes (RTTI in
# the vtable) with the library's of the same name (none) and warns that
# they break the one-definition rule.
$(BUILD)/tests/unit/%.o: CXXFLAGS += -fexceptions -frtti -fno-lto

$(UNIT_BIN): $(UNIT_OBJS) $(CORE)
	$(CXX) -o $@ $(UNIT_OBJS) $(CORE) $(LDLIBS)

-include $(UNIT_OBJS:.o=.d)

.PHONY: test-unit test-symbols
test-unit: $(UNIT_BIN)
	$(UNIT_BIN)

# The static TLS check and its program (tests/unit/tls.sh).
SMALL_STACK := $(BUILD)/tests/unit/small-stack
$(SMALL_STACK): tests/unit/small_stack.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -Wall -Wextra -Werror -pthread -o $@ $<

test-symbols: $(LIB) $(TEST_LIB) $(SMALL_STACK)
	bash tests/unit/symbols.sh $(LIB) --test-lib $(TEST_LIB) preload/interpose_table.def preload/alloc_table.def
	bash tests/unit/tls.sh $(LIB) $(SMALL_STACK)

# What a preloaded process loads before its first connection (issue 31).
.PHONY: test-startup
test-startup: $(LIB)
	bash tests/unit/startup.sh $(LIB)

TEST_TARGETS += test-unit test-symbols test-startup

# The same unit tests built with AddressSanitizer and UBSan (the library code
# they cover is compiled again with the sanitizers, not taken from $(CORE)).
ASAN_DIR := $(BUILD)/asan
ASAN_SRCS := $(CORE_SRCS) $(UNIT_SRCS)
ASAN_OBJS := $(ASAN_SRCS:%.cc=$(ASAN_DIR)/%.o)
ASAN_FLAGS := -std=c++20 -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all \
              -fno-omit-frame-pointer -pthread -DXP_CHECK_LOCKS -I. -I$(BUILD)/gen -MMD -MP -Wall -Wextra -Werror
$(ASAN_OBJS): $(ASAN_DIR)/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(ASAN_FLAGS) -c $< -o $@
$(ASAN_DIR)/preload/lifecycle.o: $(BUILD)/gen/xp_version.h
$(ASAN_DIR)/xpress-unit: $(ASAN_OBJS)
	$(CXX) -fsanitize=address,undefined -o $@ $^ $(LDLIBS)
-include $(ASAN_OBJS:.o=.d)

.PHONY: test-sanitize
test-sanitize: $(ASAN_DIR)/xpress-unit
	$(ASAN_DIR)/xpress-unit

TEST_TARGETS += test-sanitize
