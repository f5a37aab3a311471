# Tools: xpress-stat (live statistics viewer), xpress-probe (can this host
# reach an xpress peer over RDMA?) and xpress-run (launcher script).
XPRESS_STAT := $(BUILD)/xpress-stat
XPRESS_PROBE := $(BUILD)/xpress-probe
.PHONY: tools test-tools
tools: $(XPRESS_STAT) $(XPRESS_PROBE)

$(XPRESS_STAT): $(BUILD)/tools/xpress-stat.o $(CORE)
	$(CXX) -o $@ $< $(CORE) $(LDLIBS)

# The probe's rdma-core code (verbs/probe/) is its own: never in the library.
$(XPRESS_PROBE): $(BUILD)/tools/xpress-probe.o $(BUILD)/verbs/probe/probe.o
	$(CXX) -o $@ $^ -libverbs -lrdmacm

-include $(BUILD)/tools/xpress-stat.d $(BUILD)/tools/xpress-probe.d $(BUILD)/verbs/probe/probe.d

test-tools: $(LIB) $(XPRESS_STAT) $(XPRESS_PROBE)
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
