# Makefile: builds the CPU trainer, the tools, the tests and (when nvcc is
# found) the GPU trainer. Optional parts are detected by test-compiling and
# reported at the top of every build:
#   OpenMP   -fopenmp                     (NO_OMP=1 to disable)
#   OpenBLAS cblas_sgemm                  (NO_BLAS=1 to disable)
#   MPI      mpicc --showme               (NO_MPI=1 to disable)
#   zstd     libzstd                      (NO_ZSTD=1 to disable)
#   CUDA     nvcc, cuBLASLt, cuDNN, NCCL  (NO_CUDA=1; CUDNN_HOME=..., NCCL_HOME=... to locate)
# Other knobs: SANITIZER=address|undefined, DEBUG=1 (make debug), CUDA_ARCH=sm_90.

CC ?= gcc
ifeq ($(CC),cc)
  CC := gcc
endif
BUILD ?= build
WARN := -Wall -Wextra -Werror -Wno-unused-function
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE $(WARN) -I. -MMD -MP
LDLIBS := -lm -lpthread

ifeq ($(DEBUG),1)
  OPT := -O0 -g3
else
  OPT := -O3 -march=native -g
endif
ifneq ($(SANITIZER),)
  OPT := -O1 -g -fno-omit-frame-pointer -fsanitize=$(SANITIZER) -fno-sanitize-recover=all
  LDFLAGS += -fsanitize=$(SANITIZER)
  BUILD := build-$(SANITIZER)
endif

# --- feature detection (each is one test compile, cached per make run) ---
HASH := \#
try_cc = $(shell printf '$(1)' | $(CC) -x c - -o /dev/null $(2) >/dev/null 2>&1 && echo yes)

ifneq ($(NO_OMP),1)
  HAVE_OMP := $(call try_cc,$(HASH)include <omp.h>\nint main(void){return omp_get_max_threads()<0;},-fopenmp)
endif
ifeq ($(HAVE_OMP),yes)
  CFLAGS_BASE += -fopenmp
  LDFLAGS += -fopenmp
endif

BLAS_INC ?= /usr/include/x86_64-linux-gnu/openblas-openmp
ifneq ($(NO_BLAS),1)
  BLAS_PROBE := $(HASH)include <cblas.h>\nint main(void){float a=1;return cblas_sdot(1, &a, 1, &a, 1) != 1.f;}
  HAVE_BLAS := $(call try_cc,$(BLAS_PROBE),-I$(BLAS_INC) -lopenblas)
endif
ifeq ($(HAVE_BLAS),yes)
  CFLAGS_BASE += -DLLMC_BLAS -I$(BLAS_INC)
  LDLIBS += -lopenblas
endif

ifneq ($(NO_MPI),1)
  MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
  MPI_LIBS := $(shell mpicc --showme:link 2>/dev/null)
  ifneq ($(MPI_LIBS),)
    HAVE_MPI := $(call try_cc,$(HASH)include <mpi.h>\nint main(void){return MPI_Init(0,0);},$(MPI_CFLAGS) $(MPI_LIBS))
  endif
endif
ifeq ($(HAVE_MPI),yes)
  CFLAGS_BASE += -DLLMC_MPI $(MPI_CFLAGS)
  LDLIBS += $(MPI_LIBS)
endif

ifneq ($(NO_ZSTD),1)
  HAVE_ZSTD := $(call try_cc,$(HASH)include <zstd.h>\nint main(void){return ZSTD_versionNumber()==0;},-lzstd)
endif
ifeq ($(HAVE_ZSTD),yes)
  CFLAGS_BASE += -DLLMC_ZSTD
  LDLIBS += -lzstd
endif

CFLAGS := $(CFLAGS_BASE) $(OPT) $(CFLAGS_EXTRA)

$(info llmc build: OpenMP=$(or $(HAVE_OMP),no) BLAS=$(or $(HAVE_BLAS),no) MPI=$(or $(HAVE_MPI),no) zstd=$(or $(HAVE_ZSTD),no) CUDA=$(or $(HAVE_CUDA),no) -> $(BUILD)/)

# --- programs ---
PROGRAMS := train_gpt tokenize
TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))

.PHONY: all test test-all debug run bench clean
all: $(PROGRAMS) $(TEST_BINS)

# The release binaries live at the top level (./train_gpt); sanitizer and debug
# builds live under their build directory only.
ifeq ($(BUILD),build)
$(PROGRAMS): %: $(BUILD)/%
	cp $< $@
else
$(PROGRAMS): %: $(BUILD)/%
endif

$(BUILD)/%: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(LDLIBS)

-include $(wildcard $(BUILD)/*.d $(BUILD)/tests/*.d)

# make test: build everything, run every test, print "N passed, N failed".
test: $(addprefix $(BUILD)/,$(PROGRAMS)) $(TEST_BINS)
	BUILD=$(BUILD) HAVE_MPI=$(HAVE_MPI) bash tests/run_tests.sh

# CI's command: the suite in a normal, an ASan and a UBSan build, one tally.
test-all:
	bash tests/run_all.sh

debug:
	$(MAKE) DEBUG=1 BUILD=build-debug build-debug/train_gpt

# The main job: a small GPT trained on the built-in default corpus.
run: train_gpt
	bash scripts/run_default.sh

bench: train_gpt
	bash scripts/bench_cpu.sh

clean:
	rm -rf build build-* $(PROGRAMS)
