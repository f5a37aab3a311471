# The verbs/flow data-path building blocks on real Soft-RoCE (inside the VM).
CHANNEL_TEST := $(BUILD)/tests/verbs/xp-channel-test
$(BUILD)/tests/verbs/%.o: CXXFLAGS += -fexceptions

$(CHANNEL_TEST): $(BUILD)/tests/verbs/xp-channel-test.o $(CORE)
	$(CXX) -o $@ $< $(CORE) $(LDLIBS)

-include $(BUILD)/tests/verbs/xp-channel-test.d

.PHONY: test-verbs
test-verbs: $(CHANNEL_TEST) softroce-kernel
	tools/softroce/vm run -q --timeout 400 -e XP_CHANNEL_TEST=$(abspath $(CHANNEL_TEST)) -- \
	  bash $(abspath tests/verbs/channel.sh)

TEST_TARGETS += test-verbs
