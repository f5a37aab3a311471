# Real programs with xpress on both ends across the Soft-RoCE VM (one boot):
# iperf3, sockperf, redis, nginx + curl/wrk, memcached, a 200 MiB transfer,
# and the fallback to TCP against a peer without xpress.  Checks the data,
# both ends' statistics (mode rdma) and the rxe/veth counters.  See
# tests/rdma-programs/run.sh.
#   make test-rdma-programs RDMA_CASES="iperf3 redis"   runs a subset
RDMA_CASES ?=

.PHONY: test-rdma-programs
# The zero-copy stale-data program (cases/zerocopy.sh).
ZC_STALE := $(BUILD)/tests/rdma-programs/zc-stale
$(ZC_STALE): tests/rdma-programs/zc_stale.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -Wall -Wextra -Werror -o $@ $<

# The sender that exits without closing its socket (cases/exit.sh).
EXIT_UNCLOSED := $(BUILD)/tests/rdma-programs/exit-unclosed
$(EXIT_UNCLOSED): tests/rdma-programs/exit_unclosed.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -Wall -Wextra -Werror -o $@ $<

# The kernel-feature programs (cases/kfeat.sh): kernel TLS, io_uring.
KFEAT := $(BUILD)/tests/rdma-programs/kernel-features
$(KFEAT): tests/rdma-programs/kfeat.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -Wall -Wextra -Werror -DHAVE_LIBURING -o $@ $< -luring -pthread

# The hostile rdma_cm peer (cases/forger.sh): xpress's own wire formats and
# record channel, librdmacm directly for the requests it forges.
FORGER := $(BUILD)/tests/rdma-programs/xp-forger
$(FORGER): $(BUILD)/tests/rdma-programs/forger.o $(CORE)
	$(CXX) -o $@ $< $(CORE) $(LDLIBS) -lrdmacm -libverbs
-include $(BUILD)/tests/rdma-programs/forger.d

# The JVM case's classes (cases/java.sh), compiled here, not in the guest:
# javac's own JIT-compiled code once died of SIGSEGV there under QEMU TCG,
# and the case tests the JVM's sockets, not the compiler.
JAVA_HTTP := $(BUILD)/tests/rdma-programs/jh/JavaHttp.class
$(JAVA_HTTP): tests/rdma-programs/JavaHttp.java
	@mkdir -p $(dir $@)
	@if command -v javac >/dev/null; then javac -d $(dir $@) $<; else echo "java case: no javac (make deps)"; fi

test-rdma-programs: $(LIB) $(TEST_LIB) $(XPRESS_STAT) $(ZC_STALE) $(EXIT_UNCLOSED) $(KFEAT) $(FORGER) $(JAVA_HTTP) softroce-kernel
	@XPRESS_LIB=$(abspath $(XPRESS_LIB)) XPRESS_TEST_LIB=$(abspath $(TEST_LIB)) RDMA_PROGRAMS_LOG=$(abspath $(BUILD))/tests/rdma-programs \
	  bash tests/rdma-programs/run.sh $(RDMA_CASES)

TEST_TARGETS += test-rdma-programs
