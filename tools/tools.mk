# Tools: xpress-stat (live statistics viewer) and xpress-run (launcher script).
XPRESS_STAT := $(BUILD)/xpress-stat
.PHONY: tools test-tools
tools: $(XPRESS_STAT)

$(XPRESS_STAT): $(BUILD)/tools/xpress-stat.o $(CORE)
	$(CXX) -o $@ $< $(CORE) $(LDLIBS)

-include $(BUILD)/tools/xpress-stat.d

test-tools: $(LIB) $(XPRESS_STAT)
	bash tests/unit/tools.sh

TEST_TARGETS += test-tools
