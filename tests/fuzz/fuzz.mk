# libFuzzer targets for the parsers of peer-controlled bytes, and of the
# configuration file a user may name (clang, Debian's clang package): `make fuzz` runs each for FUZZ_SECONDS (default 60) from
# its committed seed corpus (tests/fuzz/corpus/NAME; new inputs go to
# $(BUILD)/fuzz/corpus/NAME, crashes to $(BUILD)/fuzz/); `make test-fuzz`
# is the short pass `make test` runs (5 s each).
FUZZ_CXX ?= clang++
FUZZ_FLAGS := -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
              -pthread -I. -Wall -Wextra -Werror
FUZZ_TARGETS := wire_ring records settings upgrade
# The library code each target reaches, compiled again with the sanitizers.
FUZZ_SRCS_wire_ring :=
FUZZ_SRCS_records := flow/record_channel.cc flow/record_channel_cork.cc \
  flow/record_channel_replay.cc stream/mux.cc recover/siphash.cc common/bulk_copy.cc \
  common/logsink.cc common/status.cc
FUZZ_SRCS_settings := common/settings.cc
FUZZ_SRCS_upgrade := recover/upgrade.cc recover/upgrade_wire.cc recover/pake.cc recover/siphash.cc \
  recover/resume_wire.cc recover/reattach_wire.cc recover/rendezvous_wire.cc recover/move_wire.cc common/logsink.cc common/status.cc -ldl
FUZZ_SECONDS ?= 60

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.cc $(wildcard flow/*.h stream/mux.h verbs/wire_ring.h common/settings.* recover/*)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -o $@ $< $(FUZZ_SRCS_$*)

.PHONY: fuzz test-fuzz
fuzz: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
	@for t in $(FUZZ_TARGETS); do bash tests/fuzz/run.sh $$t $(FUZZ_SECONDS) $(BUILD) || exit 1; done
test-fuzz: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
	@for t in $(FUZZ_TARGETS); do bash tests/fuzz/run.sh $$t 5 $(BUILD) || exit 1; done

TEST_TARGETS += test-fuzz
