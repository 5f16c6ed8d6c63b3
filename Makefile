# Top-level build. Everything lands in $(BUILD):
#   $(BUILD)/lib   libxseg.a, libxseg.so.MAJOR.MINOR.PATCH with its SONAME and
#                  dev links (libxseg = xtypes + src), libpeer.a
#   $(BUILD)/bin   every program: peers/<name>/, tools/<name>/, bench/<name>/
#   $(BUILD)/tests every Check test program: tests/test_*.c
# New directories and files are picked up by wildcard; no per-file rules.
#
#   make                      build everything
#   make check                build and run the whole test suite
#   make check SANITIZE=address|thread   same, in build-address / build-thread
#   make run                  the main job on the embedded default (see README)
#   make bench                every benchmark, figures on stdout
#   make figures [QUICK=1]    bench/run-figures.sh, then bench/plot into docs/figures
#   make install PREFIX=/usr/local DESTDIR=    (make uninstall: the same files)
#   make static               the programs (not sosd) linked statically, in
#                             build-static/bin: they run where the libraries are missing
#   make LTO=0                the programs without link-time optimisation (a
#                             flag change rebuilds nothing: use another BUILD or clean)

SANITIZE ?=
BUILD    ?= build$(if $(SANITIZE),-$(SANITIZE))
PREFIX   ?= /usr/local
DESTDIR  ?=

CC       ?= cc
# The project's version is written once, in include/xseg/version.h.
XSEG_VERSION := $(shell sed -n 's/^\#define XSEG_VERSION  *"\(.*\)"/\1/p' include/xseg/version.h)
# libxseg.so's ABI version (MAJOR.MINOR.PATCH; the SONAME holds MAJOR).
XSEG_ABI     := $(shell sed -n 's/^\#define XSEG_ABI_VERSION  *"\(.*\)"/\1/p' include/xseg/version.h)
XSEG_SONAME  := libxseg.so.$(firstword $(subst ., ,$(XSEG_ABI)))

PKGS     := liburcu liburcu-cds libxxhash
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   := $(shell pkg-config --libs check 2>/dev/null)
# sd_notify (peers/runtime/notify.c): linked into programs, not into libxseg.
SYSTEMD_CFLAGS := $(shell pkg-config --cflags libsystemd 2>/dev/null)
SYSTEMD_LIBS   := $(shell pkg-config --libs libsystemd 2>/dev/null)
ifeq ($(SYSTEMD_LIBS)$(filter clean,$(MAKECMDGOALS)),)
  $(error pkg-config finds no libsystemd (peers call sd_notify): tools/install-deps installs libsystemd-dev)
endif

# STATIC=1 (set by `make static`): every program linked with -static, with
# the static archives of liburcu and libxxhash (their -dev packages ship
# them). librados has none: sosd is left out. libsystemd.a is used where it
# exists; Debian ships none, and then tools/static/no_systemd.c stands in
# for sd_notify (nothing sent: static peers cannot run as Type=notify units).
STATIC ?=
ifeq ($(STATIC),1)
  LDFLAGS  += -static
  PKG_LIBS := -Wl,--start-group $(shell pkg-config --static --libs $(PKGS)) -Wl,--end-group
  SYSTEMD_A := $(wildcard $(shell pkg-config --variable=libdir libsystemd)/libsystemd.a)
  ifneq ($(SYSTEMD_A),)
    SYSTEMD_LIBS := $(shell pkg-config --static --libs libsystemd)
  else
    SYSTEMD_LIBS :=
    STATIC_EXTRA_OBJ := $(BUILD)/obj/tools/static/no_systemd.o
  endif
endif

OPT      ?= -O2 -g
# LTO=1 (the default without SANITIZE): the programs are linked with
# link-time optimisation, so a request's path through libxseg, the runtime
# and the peer is inlined across files (callgrind, bench/run-instructions.sh:
# 9-16 % fewer instructions per request on every row of issue 24). The
# objects stay fat: the tests (-fno-lto), libxseg.a and libxseg.so link as
# before.
# LTO=0 turns it off; sanitizer builds leave it off (faster, plainer reports).
LTO      ?= $(if $(SANITIZE),0,1)
ifeq ($(LTO),1)
  LTO_CFLAGS := -flto=auto -ffat-lto-objects
  PROG_LDFLAGS := -flto=auto
  TEST_LDFLAGS := -fno-lto   # gcc would LTO-link them too, seeing LTO objects
else ifneq ($(LTO),0)
  $(error LTO must be 0 or 1, not '$(LTO)')
endif
CFLAGS   += -std=gnu11 $(OPT) $(LTO_CFLAGS) -Wall -Wextra -Werror -fPIC -pthread \
            -Iinclude -MMD -MP $(PKG_CFLAGS) $(SYSTEMD_CFLAGS)
LDLIBS   += $(PKG_LIBS) -lpthread -lrt -lm

ifeq ($(SANITIZE),address)
  SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else ifeq ($(SANITIZE),thread)
  SAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
else ifneq ($(SANITIZE),)
  $(error SANITIZE must be address or thread, not '$(SANITIZE)')
endif
CFLAGS  += $(SAN_FLAGS)
LDFLAGS += $(SAN_FLAGS)

# ---- sources -------------------------------------------------------------
LIB_SRC     := $(wildcard xtypes/*.c) $(wildcard src/*.c)
RUNTIME_SRC := $(wildcard peers/runtime/*.c)
BENCH_COMMON_SRC := $(wildcard bench/common/*.c)
# A program is a directory under peers/, tools/ or bench/ with a file that
# defines main(); a directory without one yet is a module under way.
PROG_MAIN_SRC := $(shell grep -l '^int main' peers/*/*.c tools/*/*.c bench/*/*.c 2>/dev/null)
PROG_DIRS   := $(sort $(patsubst %/,%,$(dir $(PROG_MAIN_SRC))))
PROGS       := $(addprefix $(BUILD)/bin/,$(notdir $(PROG_DIRS)))
TEST_SRC    := $(wildcard tests/test_*.c)
TEST_SUPPORT_SRC := $(wildcard tests/support/*.c)
TEST_PROGS  := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

LIB_OBJ     := $(call obj,$(LIB_SRC))
RUNTIME_OBJ := $(call obj,$(RUNTIME_SRC))
BENCH_COMMON_OBJ := $(call obj,$(BENCH_COMMON_SRC))
TEST_SUPPORT_OBJ := $(call obj,$(TEST_SUPPORT_SRC))

LIBXSEG_A  := $(BUILD)/lib/libxseg.a
LIBXSEG_SO := $(BUILD)/lib/libxseg.so
LIBXSEG_SO_REAL := $(BUILD)/lib/libxseg.so.$(XSEG_ABI)
LIBPEER_A  := $(BUILD)/lib/libpeer.a

# Programs that need more than libxseg: LIBS_<name> := ...
LIBS_sosd := -lrados

.PHONY: all check run install uninstall clean bench figures fuzz static
# Keep test objects: they are intermediates of a pattern rule.
.SECONDARY:
all: $(LIBXSEG_A) $(LIBXSEG_SO) $(LIBPEER_A) $(PROGS) $(TEST_PROGS)

# V=1 shows full command lines.
Q := $(if $(V),,@)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(LIBXSEG_A): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(LIBXSEG_SO_REAL): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -shared $(LDFLAGS) -Wl,-soname,$(XSEG_SONAME) -o $@ $^ $(LDLIBS)

# The run-time link (SONAME) and the link-time one (-lxseg).
$(LIBXSEG_SO): $(LIBXSEG_SO_REAL)
	$(Q)ln -sf $(notdir $<) $(dir $@)$(XSEG_SONAME)
	$(Q)ln -sf $(XSEG_SONAME) $@

$(LIBPEER_A): $(RUNTIME_OBJ)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ && ar rcs $@ $^

# One program per directory; all objects of that directory are linked in.
define PROG_RULE
$(BUILD)/bin/$(notdir $(1)): $(call obj,$(wildcard $(1)/*.c)) $(if $(filter bench/%,$(1)),$(BENCH_COMMON_OBJ)) $(STATIC_EXTRA_OBJ) $(LIBPEER_A) $(LIBXSEG_A)
	@mkdir -p $$(dir $$@)
	@$(if $(Q),echo "  LINK  $$@")
	$(Q)$$(CC) $$(LDFLAGS) $(PROG_LDFLAGS) -o $$@ $$(filter %.o,$$^) $(LIBPEER_A) $(LIBXSEG_A) $$(LIBS_$(notdir $(1))) $(SYSTEMD_LIBS) $$(LDLIBS)
endef
$(foreach d,$(PROG_DIRS),$(eval $(call PROG_RULE,$(d))))

# The cache engine (peers/cached: the files that include engine_private.h,
# and the bucket layers below them) is linked into the tests that drive it
# directly; cached.c, the program around it, is not.
CACHED_ENGINE_SRC := $(shell grep -l '^\#include "engine_private.h"' peers/cached/*.c) \
                     peers/cached/buckets.c peers/cached/bucket_pool.c peers/cached/persist.c
CACHED_ENGINE_TESTS := test_cached_engine test_cached_req_states test_cached_mirror_engine
$(addprefix $(BUILD)/tests/,$(CACHED_ENGINE_TESTS)): $(call obj,$(CACHED_ENGINE_SRC))

# The xseg tool's route changes (plug.c and what it calls) are linked into
# the tests that race them in threads; xseg_cli.c, the program, is not.
XSEG_PLUG_SRC := tools/xseg/plug.c tools/xseg/control.c tools/xseg/statsjson.c
XSEG_PLUG_TESTS := test_xseg_unplug_splice
$(addprefix $(BUILD)/tests/,$(XSEG_PLUG_TESTS)): $(call obj,$(XSEG_PLUG_SRC))
$(addprefix $(BUILD)/obj/tests/,$(addsuffix .o,$(XSEG_PLUG_TESTS))): CFLAGS += -Itools/xseg

$(BUILD)/obj/tests/%.o: CFLAGS += $(CHECK_CFLAGS)
$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_SUPPORT_OBJ) $(LIBPEER_A) $(LIBXSEG_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK  $@")
	$(Q)$(CC) $(LDFLAGS) $(TEST_LDFLAGS) -o $@ $(filter %.o,$^) $(LIBPEER_A) $(LIBXSEG_A) $(CHECK_LIBS) $(SYSTEMD_LIBS) $(LDLIBS)

check: all
	BUILD=$(BUILD) SANITIZE=$(SANITIZE) tests/run-tests.sh

# libFuzzer targets (tests/fuzz/*.c), built with clang and run FUZZ_SECONDS each.
FUZZ_SECONDS ?= 60
FUZZ_SRC := $(wildcard tests/fuzz/*.c)
FUZZERS  := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRC))
$(BUILD)/fuzz/%: tests/fuzz/%.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  FUZZ  $@")
	$(Q)clang -g -O1 -Iinclude -fsanitize=fuzzer,address,undefined -o $@ $<
# `make -jN fuzz` runs N fuzzers at once (CI: one per CPU); each prints its
# stats when it ends, its whole log when it finds something.
FUZZ_RUNS := $(FUZZERS:%=%.run)
.PHONY: $(FUZZ_RUNS)
fuzz: $(FUZZ_RUNS)
$(FUZZ_RUNS): %.run: %
	@mkdir -p $*.corpus
	@$* -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $*.corpus \
		> $*.log 2>&1 || { echo "fuzzing $* FAILED:"; tail -40 $*.log; exit 1; }
	@echo "fuzzed $* for $(FUZZ_SECONDS)s:"; tail -4 $*.log

run: all
	BUILD=$(BUILD) tools/run-default.sh

# Statically linked programs for a machine without the libraries (issue 24:
# the benchmarks elsewhere); `file build-static/bin/*` says "statically linked".
STATIC_PROGS := $(filter-out sosd,$(notdir $(PROG_DIRS)))
static:
	$(MAKE) BUILD=build-static STATIC=1 $(addprefix build-static/bin/,$(STATIC_PROGS))
	@if [ -z "$$(pkg-config --variable=libdir libsystemd)" ] || \
	    [ ! -f "$$(pkg-config --variable=libdir libsystemd)/libsystemd.a" ]; then \
		echo "make static: no libsystemd.a here: sd_notify is a no-op in build-static (tools/static/no_systemd.c)"; fi

bench: all
	BUILD=$(BUILD) bench/run-benchmarks.sh

# The figures of docs/benchmarks.md: data into docs/figures/data (JSON
# lines), then drawn as SVG beside it (~5 minutes). QUICK=1: a smoke run
# (~30 s) into $(BUILD)/figures-quick, leaving docs/figures alone.
QUICK ?=
FIGURES_OUT  ?= $(if $(filter 1,$(QUICK)),$(BUILD)/figures-quick,docs/figures)
FIGURES_DATA ?= $(FIGURES_OUT)/data
figures: all
	TMPDIR=$${TMPDIR:-/dev/shm} BUILD=$(BUILD) QUICK=$(QUICK) bench/run-figures.sh $(FIGURES_DATA)
	bench/plot $(FIGURES_DATA) $(FIGURES_OUT)

# ---- install -------------------------------------------------------------
# Every file installed is named here, so uninstall removes exactly those.
BINDIR   := $(PREFIX)/bin
LIBDIR   := $(PREFIX)/lib
INCDIR   := $(PREFIX)/include
PCDIR    := $(LIBDIR)/pkgconfig
# systemd looks in /usr/lib/systemd/system and /usr/local/lib/systemd/system.
UNITDIR  ?= $(LIBDIR)/systemd/system
HEADER_DIRS := xseg xtypes peer
HEADERS  := $(foreach d,$(HEADER_DIRS),$(wildcard include/$(d)/*.h))
UNITS    := $(wildcard tools/systemd/*.service tools/systemd/*.target)
PC_FILES := libxseg.pc libpeer.pc
DEST := $(DESTDIR)
INSTALLED := $(addprefix $(DEST)$(BINDIR)/,$(notdir $(PROGS))) \
	$(addprefix $(DEST)$(LIBDIR)/,libxseg.a libpeer.a libxseg.so.$(XSEG_ABI) $(XSEG_SONAME) libxseg.so) \
	$(addprefix $(DEST)$(INCDIR)/,$(HEADERS:include/%=%)) \
	$(addprefix $(DEST)$(PCDIR)/,$(PC_FILES)) \
	$(addprefix $(DEST)$(UNITDIR)/,$(notdir $(UNITS)))
SUBST := sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@BINDIR@|$(BINDIR)|g' \
	     -e 's|@VERSION@|$(XSEG_VERSION)|g'

install: all
	install -d $(DEST)$(BINDIR) $(DEST)$(PCDIR) $(DEST)$(UNITDIR) \
		$(addprefix $(DEST)$(INCDIR)/,$(HEADER_DIRS))
	install -m 0755 $(PROGS) $(DEST)$(BINDIR)/
	install -m 0644 $(LIBXSEG_A) $(LIBPEER_A) $(DEST)$(LIBDIR)/
	install -m 0755 $(LIBXSEG_SO_REAL) $(DEST)$(LIBDIR)/
	ln -sf libxseg.so.$(XSEG_ABI) $(DEST)$(LIBDIR)/$(XSEG_SONAME)
	ln -sf $(XSEG_SONAME) $(DEST)$(LIBDIR)/libxseg.so
	for d in $(HEADER_DIRS); do install -m 0644 include/$$d/*.h $(DEST)$(INCDIR)/$$d/; done
	for f in $(PC_FILES); do $(SUBST) tools/$$f.in > $(DEST)$(PCDIR)/$$f; done
	for f in $(notdir $(UNITS)); do $(SUBST) tools/systemd/$$f > $(DEST)$(UNITDIR)/$$f; done

# Removes what install put, then the project's own header folders if empty.
uninstall:
	rm -f $(INSTALLED)
	rmdir $(addprefix $(DEST)$(INCDIR)/,$(HEADER_DIRS)) 2>/dev/null || true

clean:
	rm -rf build build-address build-thread build-static

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
