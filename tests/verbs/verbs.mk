# The verbs/flow data-path building blocks on real Soft-RoCE (inside the VM).
CHANNEL_TEST := $(BUILD)/tests/verbs/xp-channel-test
UPGRADE_TEST := $(BUILD)/tests/verbs/xp-upgrade-test
$(BUILD)/tests/verbs/%.o: CXXFLAGS += -fexceptions

$(CHANNEL_TEST): $(BUILD)/tests/verbs/xp-channel-test.o $(CORE)
	$(CXX) -o $@ $< $(CORE) $(LDLIBS)

$(UPGRADE_TEST): $(BUILD)/tests/verbs/xp-upgrade-test.o $(CORE)
	$(CXX) -o $@ $< $(CORE) $(LDLIBS)

-include $(BUILD)/tests/verbs/xp-channel-test.d $(BUILD)/tests/verbs/xp-upgrade-test.d

.PHONY: test-verbs
test-verbs: $(CHANNEL_TEST) $(UPGRADE_TEST) softroce-kernel
	tools/softroce/vm run -q --timeout 400 -e XP_CHANNEL_TEST=$(abspath $(CHANNEL_TEST)) \
	  -e XP_UPGRADE_TEST=$(abspath $(UPGRADE_TEST)) -- \
	  bash $(abspath tests/verbs/channel.sh)

TEST_TARGETS += test-verbs
