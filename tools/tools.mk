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

# The README's settings and profiles tables come from common/settings.def:
# `make settings-doc` rewrites them; test-settings fails when they differ,
# and runs the settings end to end (--print-config, the configuration file).
.PHONY: settings-doc test-settings
settings-doc:
	python3 tools/gen-settings.py common/settings.def README.md --write

test-settings: $(LIB) $(XPRESS_STAT)
	bash tests/unit/settings.sh

TEST_TARGETS += test-settings
