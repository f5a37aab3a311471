# Real programs (iperf3, sockperf, redis, nginx, python http.server, memcached)
# run without and with the preload; outputs must match.  See tests/programs/run.sh.
# `make test-programs XPRESS_LIB=/path/to/other.so` preloads another library
# (then build/libxpress.so is not built); PROGRAMS=... runs a subset of cases.
XPRESS_LIB ?= $(abspath $(LIB))
PROGRAMS ?=

.PHONY: test-programs
test-programs: $(if $(filter $(abspath $(LIB)),$(abspath $(XPRESS_LIB))),$(LIB))
	XPRESS_LIB=$(abspath $(XPRESS_LIB)) PROGRAMS_LOG=$(abspath $(BUILD))/tests/programs \
	  bash tests/programs/run.sh $(PROGRAMS)

TEST_TARGETS += test-programs
