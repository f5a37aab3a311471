# Soft-RoCE test bed (tools/softroce/README.md).  Included by the top Makefile.
#   make test-rdma        sanity suite inside the VM (part of `make test`)
#   make demo             kernel TCP vs xpress (LD_PRELOAD=$(LIB)) side by side
#   make bench-reference  raw verbs / kernel TCP / rsocket reference table
#   make softroce-kernel  fetch the kernel + build the initramfs (also run by `make deps`)
TEST_TARGETS += test-rdma

.PHONY: test-rdma demo bench-reference softroce-kernel

# Idempotent and quick once done (a stamp check); downloads the kernel package
# on a fresh machine, so each VM target works even without `make deps`.
softroce-kernel:
	@bash tools/softroce/fetch-kernel.sh --quiet

test-rdma: softroce-kernel
	@bash tests/rdma/run.sh

# The demo shows whatever the library does today; when it cannot be built yet
# the demo says so and still shows the kernel TCP side.
demo: softroce-kernel
	@$(MAKE) --no-print-directory $(LIB) || echo "demo: $(LIB) could not be built; the xpress half will be skipped"
	@bash tools/softroce/demo.sh "$(abspath $(LIB))"

bench-reference: softroce-kernel
	@bash bench/softroce-reference.sh
