# Installing xpress (README.md, "Build, install, run").  Included by the top Makefile.
#   make install [PREFIX=/usr/local] [DESTDIR=] [LIBDIR=$(PREFIX)/lib]
#   make uninstall                  the same variables
#   make deb                        build/xpress_<version>_<arch>.deb (lintian clean)
#   make test-install               the package built, checked and installed into a scratch root
VERSION := $(shell cat VERSION)
SOVERSION := $(firstword $(subst ., ,$(VERSION)))
SONAME := libxpress.so.$(SOVERSION)
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DESTDIR ?=
MAN_PAGES := $(BUILD)/man/xpress.7 $(BUILD)/man/xpress-run.1 $(BUILD)/man/xpress-stat.1 \
             $(BUILD)/man/xpress-probe.1

.PHONY: install uninstall deb man test-install
man: $(MAN_PAGES)

# xpress(7)'s settings come from the README's tables, its reasons from
# docs/statistics.md's (one place each).
$(BUILD)/man/xpress.7: packaging/man/xpress.7.in README.md docs/statistics.md packaging/gen-man.py VERSION
	@mkdir -p $(dir $@)
	python3 packaging/gen-man.py packaging/man/xpress.7.in README.md $(VERSION) docs/statistics.md > $@
$(BUILD)/man/%.1: packaging/man/%.1.in VERSION
	@mkdir -p $(dir $@)
	sed 's/@VERSION@/$(VERSION)/g' $< > $@

install: $(LIB) $(XPRESS_STAT) $(XPRESS_PROBE) $(MAN_PAGES)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man7
	install -m 0644 $(LIB) $(DESTDIR)$(LIBDIR)/libxpress.so.$(VERSION)
	ln -sf libxpress.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libxpress.so
	install -m 0755 $(XPRESS_STAT) $(DESTDIR)$(BINDIR)/xpress-stat
	install -m 0755 $(XPRESS_PROBE) $(DESTDIR)$(BINDIR)/xpress-probe
	sed -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@VERSION@|$(VERSION)|g' tools/xpress-run > $(DESTDIR)$(BINDIR)/xpress-run
	chmod 0755 $(DESTDIR)$(BINDIR)/xpress-run
	install -m 0644 $(BUILD)/man/xpress.7 $(DESTDIR)$(MANDIR)/man7/xpress.7
	install -m 0644 $(BUILD)/man/xpress-run.1 $(BUILD)/man/xpress-stat.1 $(BUILD)/man/xpress-probe.1 \
	  $(DESTDIR)$(MANDIR)/man1/
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ]; then ldconfig; fi

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libxpress.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME) \
	      $(DESTDIR)$(LIBDIR)/libxpress.so $(DESTDIR)$(BINDIR)/xpress-stat $(DESTDIR)$(BINDIR)/xpress-run \
	      $(DESTDIR)$(BINDIR)/xpress-probe $(DESTDIR)$(MANDIR)/man1/xpress-probe.1 \
	      $(DESTDIR)$(MANDIR)/man7/xpress.7 $(DESTDIR)$(MANDIR)/man1/xpress-run.1 \
	      $(DESTDIR)$(MANDIR)/man1/xpress-stat.1
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ]; then ldconfig; fi

deb: $(LIB) $(XPRESS_STAT) $(XPRESS_PROBE) $(MAN_PAGES)
	bash packaging/deb/build.sh $(VERSION) $(BUILD)

test-install: deb
	bash packaging/test-install.sh $(BUILD) $(VERSION)

TEST_TARGETS += test-install
