# Fleet in C - plain Makefile.  `make` builds build/libfleet.{a,so}, tools and examples.
# Targets: all test test-cluster demo demo-quickstart bench install asan ubsan tsan valgrind clean deps
CC      ?= cc
PREFIX  ?= /usr/local
DESTDIR ?=
BUILD   ?= build
VERSION := 0.1.0
SOVER   := 0

WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wno-missing-field-initializers
OPT     ?= -O3
CFLAGS  ?=
CFLAGS  += -std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden $(OPT) -fno-trapping-math -fno-math-errno -g $(WARN) -Iinclude -pthread $(SAN)
# fl_version() (src/base/version.c) and the tools' --version print this.
CFLAGS  += -DFLEET_VERSION_STRING=\"$(VERSION)\"
LDLIBS  := -lopenblas -lcrypto -lcjson -lz -lm -pthread
LDFLAGS += $(SAN)

# An optional library that pkg-config finds, one row each:
#   $(eval $(call optional_pkg,VAR,PACKAGE,MACRO,LIBS))
# VAR is 1 when PACKAGE is installed, unless given (`make VAR=0` leaves it out even when
# installed; then `make clean`); with VAR 1 the sources see -DMACRO and the package's link
# flags go in LIBS (fleet.pc and FleetConfig.cmake list them) and LDLIBS.
define optional_pkg
ifndef $(1)
$(1) := $$(shell pkg-config --exists $(2) 2>/dev/null && echo 1 || echo 0)
endif
ifeq ($$($(1)),1)
$(4) := $$(shell pkg-config --libs $(2))
CFLAGS   += -D$(3) $$(shell pkg-config --cflags $(2))
LDLIBS   += $$($(4))
endif
endef

# Open MPI, optional: when pkg-config finds ompi-c (Debian: libopenmpi-dev) the MPI role
# maker (src/fleet/role_mpi.c) is built in; without it fleet_role_mpi returns
# FL_EUNSUPPORTED.
$(eval $(call optional_pkg,MPI,ompi-c,FL_HAVE_MPI,MPI_LIBS))

# oneDNN, optional: when its header is found (Debian: libdnnl-dev, which has no pkg-config
# file; a dnnl.pc is used where one exists) fc and mul_grad run on oneDNN's matmul
# primitives (src/tensor/dnn.c, FLEET_GEMM); without it on OpenBLAS.  Debian's oneDNN uses
# OpenMP: libgomp is linked for the team size.  `make DNNL=0` leaves it out (then `make clean`).
ifndef DNNL
DNNL := $(shell pkg-config --exists dnnl 2>/dev/null && echo 1 || (printf '\043include <dnnl.h>\n' | $(CC) -E -x c - >/dev/null 2>&1 && echo 1 || echo 0))
endif
ifeq ($(DNNL),1)
DNNL_LIBS := $(shell pkg-config --exists dnnl 2>/dev/null && pkg-config --libs dnnl || echo -ldnnl) -lgomp
CFLAGS   += -DFL_HAVE_DNNL $(shell pkg-config --cflags dnnl 2>/dev/null)
LDLIBS   += $(DNNL_LIBS)
# Our own two-thread jobs run on the same OpenMP team as oneDNN's primitives
# (src/tensor/parallel.c); the TSan build keeps them on parallel.c's own helper thread, as
# libgomp is not instrumented.
ifeq ($(findstring thread,$(SAN)),)
PAR_CFLAGS := -fopenmp
endif
endif

# RocksDB, optional: when pkg-config finds rocksdb (Debian: librocksdb-dev) sparse tables
# can keep their cold rows on disk (src/ps/table_ssd.c); without it a table with ssd_path
# is refused with FL_EUNSUPPORTED.
$(eval $(call optional_pkg,ROCKSDB,rocksdb,FL_HAVE_ROCKSDB,ROCKSDB_LIBS))

# libjpeg-turbo, optional: when pkg-config finds libturbojpeg (Debian: libturbojpeg0-dev) the
# image reader decodes JPEG files (src/data/image_decode.c); without it asking for an image
# reader is refused with FL_EUNSUPPORTED.
$(eval $(call optional_pkg,TURBOJPEG,libturbojpeg,FL_HAVE_TURBOJPEG,TURBOJPEG_LIBS))

# libpng, optional: when pkg-config finds libpng (Debian: libpng-dev) the image reader also
# decodes PNG files (src/data/image_png.c); without it a PNG file is refused by name with
# FL_EUNSUPPORTED.
$(eval $(call optional_pkg,LIBPNG,libpng,FL_HAVE_PNG,PNG_LIBS))

# The compile and link flags of the last build: objects are rebuilt when they change (for
# example when Open MPI was installed since), not only when a source changes.
# NOBUILD=1 (an install from a finished build, see install) leaves the stamp alone.
FLAGS_STAMP := $(BUILD)/.flags
ifneq ($(NOBUILD),1)
$(shell mkdir -p $(BUILD); echo '$(CC) $(CFLAGS) $(LDLIBS)' | cmp -s - $(FLAGS_STAMP) || echo '$(CC) $(CFLAGS) $(LDLIBS)' > $(FLAGS_STAMP))
endif

LIB_SRC  := $(sort $(wildcard src/*/*.c src/*/*/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
EX_SRC   := $(sort $(wildcard examples/*/*.c))
EX_BIN   := $(EX_SRC:examples/%.c=$(BUILD)/examples/%)
BENCH_SRC:= $(sort $(wildcard bench/*.c))
BENCH_BIN:= $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
TOOL_SRC := $(sort $(wildcard tools/*.c))
# helper programs that multi-process tests start (tests/bin/NAME.c -> BUILD/tests/bin/NAME)
TBIN_SRC := $(sort $(wildcard tests/bin/*.c))
TBIN_BIN := $(TBIN_SRC:tests/bin/%.c=$(BUILD)/tests/bin/%)
TOOL_BIN := $(TOOL_SRC:tools/%.c=$(BUILD)/tools/%)
# fleetrun is several files: tools/fleetrun/*.c -> BUILD/tools/fleetrun-obj/*.o -> BUILD/tools/fleetrun
FR_SRC   := $(sort $(wildcard tools/fleetrun/*.c))
FR_OBJ   := $(FR_SRC:tools/fleetrun/%.c=$(BUILD)/tools/fleetrun-obj/%.o)
TOOL_BIN += $(BUILD)/tools/fleetrun
HEADERS  := $(wildcard include/fleet/*.h) include/fleet.h

.PHONY: all test test-cluster demo demo-quickstart bench install asan ubsan tsan valgrind clean deps lib
all: lib $(TEST_BIN) $(TBIN_BIN) $(EX_BIN) $(BENCH_BIN) $(TOOL_BIN)
lib: $(BUILD)/libfleet.a $(BUILD)/libfleet.so

deps:
	@scripts/ensure-deps.sh $(DEPS_PROFILE)

DEPS_PROFILE ?= build

Q := $(if $(V),,@)

$(BUILD)/%.o: %.c $(HEADERS) $(wildcard src/*/*.h src/*/*/*.h) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/src/tensor/parallel.o: CFLAGS += $(PAR_CFLAGS)

$(BUILD)/libfleet.a: $(LIB_OBJ)
	@rm -f $@
	@$(if $(V),,echo "  AR      $@")
	$(Q)ar rcs $@ $^

$(BUILD)/libfleet.so: $(LIB_OBJ) src/libfleet.map
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,libfleet.so.$(SOVER) -Wl,--version-script=src/libfleet.map -o $@.$(VERSION) $(LIB_OBJ) $(LDFLAGS) $(LDLIBS)
	$(Q)ln -sf libfleet.so.$(VERSION) $(BUILD)/libfleet.so.$(SOVER)
	$(Q)ln -sf libfleet.so.$(VERSION) $@

$(BUILD)/tests/%: tests/%.c $(BUILD)/libfleet.a $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CCLD    $@")
	$(Q)$(CC) $(CFLAGS) -Isrc -Itests $< -o $@ $(BUILD)/libfleet.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/bin/%: tests/bin/%.c $(BUILD)/libfleet.a $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CCLD    $@")
	$(Q)$(CC) $(CFLAGS) -Isrc -Itests $< -o $@ $(BUILD)/libfleet.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/examples/%: examples/%.c $(wildcard examples/*/*.h) $(BUILD)/libfleet.a
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CCLD    $@")
	$(Q)$(CC) $(CFLAGS) $< -o $@ $(BUILD)/libfleet.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libfleet.a $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CCLD    $@")
	$(Q)$(CC) $(CFLAGS) -Isrc -Itests $< -o $@ $(BUILD)/libfleet.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tools/%: tools/%.c $(wildcard tools/*.h) $(BUILD)/libfleet.a
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CCLD    $@")
	$(Q)$(CC) $(CFLAGS) -Isrc $< -o $@ $(BUILD)/libfleet.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tools/fleetrun-obj/%.o: tools/fleetrun/%.c $(wildcard tools/fleetrun/*.h tools/*.h) $(HEADERS) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -Isrc -Itools -DFLEET_VERSION='"$(VERSION)"' -c $< -o $@

$(BUILD)/tools/fleetrun: $(FR_OBJ) $(BUILD)/libfleet.a
	@$(if $(V),,echo "  CCLD    $@")
	$(Q)$(CC) $(CFLAGS) $(FR_OBJ) -o $@ $(BUILD)/libfleet.a $(LDFLAGS) $(LDLIBS)

# The README's test command.  Each test binary runs in its own process with a timeout.
test: DEPS_PROFILE=test
test: deps
	@$(MAKE) --no-print-directory all
	@scripts/run-tests.sh $(BUILD)

# The formatting (.clang-format) of the C lines changed since a base: the merge base with
# main, else the last commit; FORMAT_BASE=<commit> or FORMAT_BASE=--all (every file, whole).
# See scripts/check-format.sh and tests/README.md.
.PHONY: format-check
format-check: DEPS_PROFILE=test
format-check: deps
	@scripts/check-format.sh $(FORMAT_BASE)

# Multi-host jobs on 3 network namespaces (PS, collective, a killed worker, mpirun, Slurm):
# needs root; see tests/cluster/README.md.
test-cluster: DEPS_PROFILE=cluster
test-cluster: deps
	@$(MAKE) --no-print-directory all
	@tests/cluster/run.sh $(BUILD)

demo: DEPS_PROFILE=build
demo: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh $(BUILD)

# The quick-start MLP locally, on 2 collective trainers and with 2 servers + 2 workers.
demo-quickstart: DEPS_PROFILE=build
demo-quickstart: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo_quickstart.sh $(BUILD)

bench: DEPS_PROFILE=bench
bench: deps
	@$(MAKE) --no-print-directory all
	@bench/run.sh $(BUILD)

# SAN_TESTS selects the test binaries the sanitizer targets build and run: names, or
# patterns with one '*' (`make tsan SAN_TESTS="test_coll* test_ps_rpc"` runs test_coll,
# test_coll_fail, test_coll_mpi, test_collective and test_ps_rpc); empty: all of them (and
# the whole tree is built).  .ci/run's subsets and why: tests/README.md.
SAN_TESTS ?=
SAN_FILTER = $(if $(strip $(SAN_TESTS)),FLEET_TESTS="$(strip $(SAN_TESTS))")
SAN_BINS = $(filter $(addprefix $(BUILD)/tests/,$(subst *,%,$(SAN_TESTS))),$(TEST_BIN))
# what a sanitizer run builds: with SAN_TESTS, the library, tools, examples, test helpers
# and the selected tests (no benchmarks, no other tests)
SAN_GOAL = $(if $(strip $(SAN_TESTS)),SAN_TESTS="$(strip $(SAN_TESTS))" san-build,all)
.PHONY: san-build
san-build: lib $(TBIN_BIN) $(EX_BIN) $(TOOL_BIN) $(SAN_BINS)

asan:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" $(SAN_GOAL)
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 $(SAN_FILTER) scripts/run-tests.sh build-asan

ubsan:
	@$(MAKE) --no-print-directory BUILD=build-ubsan OPT=-O1 SAN="-fsanitize=undefined -fno-sanitize-recover=all" $(SAN_GOAL)
	@UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 $(SAN_FILTER) scripts/run-tests.sh build-ubsan

# OpenBLAS is not instrumented: its own worker threads hand off work in ways ThreadSanitizer
# cannot see, so it runs single-threaded here (Fleet's threads are all still checked).
# Every test runs with scripts/tsan.supp (uninstrumented libraries only); the tests that run
# Hogwild training (several trainer threads updating shared parameters without locks: the
# algorithm) run with scripts/tsan-hogwild.supp instead, so a race in the optimiser or
# lookup kernels anywhere else still fails.
TSAN_HOGWILD_TESTS = test_trainer test_ps_modes test_metrics test_ctr
tsan:
	@$(MAKE) --no-print-directory BUILD=build-tsan OPT=-O1 SAN="-fsanitize=thread" $(SAN_GOAL)
	@OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1:history_size=7:suppressions=$(CURDIR)/scripts/tsan.supp \
	  FLEET_TSAN_SUPP=$(CURDIR)/scripts/tsan-hogwild.supp FLEET_TSAN_SUPP_TESTS="$(TSAN_HOGWILD_TESTS)" \
	  $(SAN_FILTER) scripts/run-tests.sh build-tsan

valgrind: all
	@FLEET_TEST_WRAPPER="valgrind -q --error-exitcode=99 --leak-check=full" scripts/run-tests.sh $(BUILD)

# `make install PREFIX=/usr/local DESTDIR=`: headers, libfleet.{a,so}, every tool built in
# BUILD/tools (into bin/), fleet.pc, and the CMake package lib/cmake/Fleet (find_package(Fleet)
# gives Fleet::fleet and Fleet::fleet_static).  Flags for downstream builds carry no -Werror.
# NOBUILD=1 installs what BUILD already holds without building it: the install test uses
# it so that a sanitizer build dir is never rebuilt with other flags.
INSTALL_DEPS := $(if $(filter 1,$(NOBUILD)),,lib $(TOOL_BIN))
INSTALL_SED  := sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@MPI_LIBS@|$(MPI_LIBS)|g' -e 's|@DNNL_LIBS@|$(DNNL_LIBS)|g' -e 's|@ROCKSDB_LIBS@|$(ROCKSDB_LIBS)|g' -e 's|@TURBOJPEG_LIBS@|$(TURBOJPEG_LIBS)|g' -e 's|@PNG_LIBS@|$(PNG_LIBS)|g'
install: $(INSTALL_DEPS)
	@test -f $(BUILD)/libfleet.so.$(VERSION) || { echo "install: $(BUILD)/libfleet.so.$(VERSION) is missing: run make first" >&2; exit 1; }
	install -d $(DESTDIR)$(PREFIX)/include/fleet $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/lib/cmake/Fleet $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/fleet.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 include/fleet/*.h $(DESTDIR)$(PREFIX)/include/fleet/
	install -m 644 $(BUILD)/libfleet.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libfleet.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libfleet.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libfleet.so.$(SOVER)
	ln -sf libfleet.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libfleet.so
	@for t in $(BUILD)/tools/*; do \
	  if [ -f "$$t" ] && [ -x "$$t" ]; then echo "install -m 755 $$t $(DESTDIR)$(PREFIX)/bin/"; \
	    install -m 755 "$$t" $(DESTDIR)$(PREFIX)/bin/ || exit 1; fi; \
	done
	$(INSTALL_SED) fleet.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/fleet.pc
	$(INSTALL_SED) cmake/FleetConfig.cmake.in > $(DESTDIR)$(PREFIX)/lib/cmake/Fleet/FleetConfig.cmake
	$(INSTALL_SED) cmake/FleetConfigVersion.cmake.in > $(DESTDIR)$(PREFIX)/lib/cmake/Fleet/FleetConfigVersion.cmake

clean:
	rm -rf build build-asan build-ubsan build-tsan
