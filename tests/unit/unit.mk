# Unit tests (doctest) of the layers below the wrappers, and the symbol test.
UNIT_SRCS := $(wildcard tests/unit/*.cc)
UNIT_OBJS := $(UNIT_SRCS:%.cc=$(BUILD)/%.o)
UNIT_BIN := $(BUILD)/tests/unit/xpress-unit

# doctest wants exceptions and RTTI; the library itself is built without.
$(BUILD)/tests/unit/%.o: CXXFLAGS += -fexceptions -frtti

$(UNIT_BIN): $(UNIT_OBJS) $(CORE)
	$(CXX) -o $@ $(UNIT_OBJS) $(CORE) $(LDLIBS)

-include $(UNIT_OBJS:.o=.d)

.PHONY: test-unit test-symbols
test-unit: $(UNIT_BIN)
	$(UNIT_BIN)

test-symbols: $(LIB)
	bash tests/unit/symbols.sh $(LIB) preload/interpose_table.def

TEST_TARGETS += test-unit test-symbols
