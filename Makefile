# Makefile: `make` builds the product -- the CPU trainer (train_gpt), the
# tokenizer (tokenize) and, when nvcc is found, the GPU trainer (train_gptcu).
# `make test` also builds the test programs, the benchmarks, the dev/cuda
# kernel checkers and the GPU programs compiled for the CPU emulation
# (build/emu/), then runs the suite. Optional parts are detected by
# test-compiling and reported at the top of every build:
#   OpenMP   -fopenmp                     (NO_OMP=1 to disable)
#   OpenBLAS cblas_sgemm                  (NO_BLAS=1 to disable)
#   MPI      mpicc --showme               (NO_MPI=1 to disable)
#   zstd     libzstd                      (NO_ZSTD=1 to disable)
#   CUDA     nvcc, cuBLASLt, cuDNN, NCCL  (NO_CUDA=1; CUDNN_HOME=..., NCCL_HOME=... to locate)
# Other knobs: SANITIZER=address|undefined|address,undefined (both in one build, build-address-undefined/), COVERAGE=1 (gcov counts in build-coverage/, for
# tests/coverage.sh), DEBUG=1 (make debug), CUDA_ARCHS="sm_80 sm_90",
# CPU_ISA=avx2|portable (x86-64: build for a narrower instruction set than
# this machine's, AVX2 + FMA without AVX-512 or SSE2 only, in build-$(CPU_ISA)/;
# the native CPU kernels' vector width and register tile follow it).

CC ?= gcc
ifeq ($(CC),cc)
  CC := gcc
endif
BUILD ?= build
WARN := -Wall -Wextra -Werror -Wno-unused-function -Wno-psabi
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -ffp-contract=fast -fno-math-errno $(WARN) -I. -MMD -MP
LDLIBS := -lm -lpthread

ifeq ($(DEBUG),1)
  OPT := -O0 -g3 -march=native
else
  OPT := -O3 -march=native -g
endif
COMMA := ,
SANITIZER_DIR := $(subst $(COMMA),-,$(SANITIZER))
ifneq ($(SANITIZER),)
  OPT := -O1 -g -march=native -fno-omit-frame-pointer -fsanitize=$(SANITIZER) -fno-sanitize-recover=all
  # --matmul auto takes OpenBLAS here whatever its kernel (llmc/cpu_matmul.h): the library is not instrumented,
  # our kernel is and runs several times slower; test_cpu_kernels and test_gpt_cpu run it under the sanitizers
  OPT += -DLLMC_MATMUL_AUTO_BLAS
  LDFLAGS += -fsanitize=$(SANITIZER)
  BUILD := build-$(SANITIZER_DIR)
endif
ifeq ($(COVERAGE),1)
  OPT := -O1 -g -march=native --coverage -Wno-maybe-uninitialized  # (gcc -O1 --coverage: false positives)
  LDFLAGS += --coverage
  BUILD := build-coverage
endif

# Narrower instruction sets than -march=native's, for CPU_ISA and the kernel tests below (x86-64 only)
ISA_FLAGS_avx2 := -mno-avx512f
ISA_FLAGS_portable := -mno-avx
ifneq ($(filter x86_64%,$(shell $(CC) -dumpmachine)),)
  NARROW_ISAS := avx2 portable
endif
CPU_ISA ?= native
ifneq ($(CPU_ISA),native)
  ifeq ($(filter $(CPU_ISA),$(NARROW_ISAS)),)
    $(error CPU_ISA=$(CPU_ISA): expected native or one of: $(or $(NARROW_ISAS),none on this architecture))
  endif
  OPT += $(ISA_FLAGS_$(CPU_ISA))
  BUILD := build-$(CPU_ISA)$(if $(SANITIZER),-$(SANITIZER_DIR))
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
else
  CFLAGS_BASE += -Wno-unknown-pragmas  # the OpenMP pragmas are simply serial
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

# --- CUDA (optional): nvcc + cuBLASLt; cuDNN and NCCL from CUDNN_HOME /
# NCCL_HOME (include/ and lib/ under each) or else the toolkit's own dirs.
# Device code: a fat binary with a cubin for each of CUDA_ARCHS and the PTX of
# the last one (which the driver JIT-compiles on newer GPUs); by default sm_80
# (A100; its cubin also runs on sm_86 and sm_89) and sm_90 (H100, H200), and
# sm_100 (B200) where this nvcc has it (nvcc --list-gpu-code). train_gptcu
# checks at start-up that it holds code for its GPU (llmc/device_check.cuh).
# Sanitizer and coverage builds leave the CUDA programs out (host sanitizers and gcov do not cover them).
CUDA_HOME ?= /usr/local/cuda
ifeq ($(origin CUDA_ARCH),command line)
  $(error CUDA_ARCH is CUDA_ARCHS, a list: make CUDA_ARCHS="$(CUDA_ARCH)")
endif
ifneq ($(NO_CUDA),1)
ifeq ($(SANITIZER)$(COVERAGE),)
  NVCC := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard $(CUDA_HOME)/bin/nvcc))
  ifneq ($(NVCC),)
    ifneq ($(wildcard $(CUDA_HOME)/include/cublasLt.h),)
      HAVE_CUDA := yes
    endif
  endif
endif
endif
ifeq ($(origin CUDA_ARCHS),undefined)
  CUDA_ARCHS := sm_80 sm_90 $(if $(NVCC),$(filter sm_100,$(shell $(NVCC) --list-gpu-code 2>/dev/null)))
endif
ifneq ($(filter-out sm_%,$(CUDA_ARCHS)),)
  $(error CUDA_ARCHS="$(CUDA_ARCHS)": expected a list of sm_XY names)
endif
CUDA_LAST_ARCH := $(lastword $(CUDA_ARCHS:sm_%=%))
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS:sm_%=%),-gencode arch=compute_$(a),code=sm_$(a)) \
                -gencode arch=compute_$(CUDA_LAST_ARCH),code=compute_$(CUDA_LAST_ARCH)
# The CUDA test and dev programs (test_gpt_cu, dev/cuda checkers, the step profiler) run only where
# they are built: one cubin, for this machine's GPU (nvidia-smi), else the last of CUDA_ARCHS (a
# machine without a GPU only compiles them: a fat binary of each would triple the suite's nvcc time)
GPU_ARCH := $(shell command -v nvidia-smi >/dev/null 2>&1 && \
              nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d . | sed -n 's/^\([0-9][0-9]*\)$$/\1/p')
CUDA_DEV_ARCH ?= $(or $(GPU_ARCH),$(CUDA_LAST_ARCH))
ifneq ($(GPU_ARCH)$(filter command line environment,$(origin CUDA_DEV_ARCH)),)
  CUDA_DEV_GENCODE := -gencode arch=compute_$(CUDA_DEV_ARCH),code=sm_$(CUDA_DEV_ARCH)
  CUDA_DEV_HOST_OPT := -O3
else
  # no GPU to run them on: PTX only (nvcc's front end still checks their device code; ptxas runs on
  # train_gptcu's kernels, which they share) and unoptimised host code: half their nvcc time
  CUDA_DEV_GENCODE := -gencode arch=compute_$(CUDA_DEV_ARCH),code=compute_$(CUDA_DEV_ARCH)
  CUDA_DEV_HOST_OPT := -O0
endif
EMPTY :=
# nvcc's __CUDA_ARCH_LIST__ for these archs (sm_90 -> 900), given to the emulated build (tests/cuda_runtime_emulator.h)
CUDA_ARCH_LIST := $(subst $(EMPTY) $(EMPTY),$(COMMA),$(strip $(CUDA_ARCHS:sm_%=%0)))
ifeq ($(HAVE_CUDA),yes)
  CUDNN_INC := $(if $(CUDNN_HOME),$(CUDNN_HOME)/include,$(CUDA_HOME)/include)
  CUDNN_LIB := $(if $(CUDNN_HOME),$(CUDNN_HOME)/lib,$(CUDA_HOME)/lib64)
  NCCL_INC := $(if $(NCCL_HOME),$(NCCL_HOME)/include,$(CUDA_HOME)/include)
  NCCL_LIB := $(if $(NCCL_HOME),$(NCCL_HOME)/lib,$(CUDA_HOME)/lib64)
  HAVE_CUDNN := $(if $(and $(wildcard $(CUDNN_INC)/cudnn.h),$(wildcard $(CUDNN_LIB)/libcudnn.so*)),yes)
  HAVE_NCCL := $(if $(and $(wildcard $(NCCL_INC)/nccl.h),$(wildcard $(NCCL_LIB)/libnccl.so*)),yes)
  # nvcc hands the host compiler preprocessed code without comments, so the C
  # headers' "fall through" comments are invisible to it: that one check is off.
  NVCC_WARN := -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-function,-Wno-implicit-fallthrough
  NVCC_HOST_OPT := $(if $(filter -march=native,$(OPT)),-Xcompiler -march=native)
  NVCC_FLAGS := -O3 -std=c++17 $(CUDA_GENCODE) -lineinfo -I. $(NVCC_WARN) $(NVCC_HOST_OPT) -MMD -MP $(NVCC_EXTRA)
  NVCC_LIBS := -lcublasLt -lcublas -lm -lpthread
  # the test and dev programs: one arch (CUDA_DEV_GENCODE), host code at CUDA_DEV_HOST_OPT
  NVCC_DEV_FLAGS = $(patsubst -O3,$(CUDA_DEV_HOST_OPT),$(subst $(CUDA_GENCODE),$(CUDA_DEV_GENCODE),$(NVCC_FLAGS)))
  ifeq ($(HAVE_CUDNN),yes)
    NVCC_FLAGS += -DLLMC_CUDNN -I$(CUDNN_INC)
    NVCC_LIBS += -L$(CUDNN_LIB) -Xlinker -rpath=$(CUDNN_LIB) -lcudnn
  endif
  # the GPU trainer's ranks: MPI (host groups, the staged device backend) and NCCL
  ifeq ($(HAVE_MPI),yes)
    NVCC_FLAGS += -DLLMC_MPI $(MPI_CFLAGS)
    NVCC_LIBS += $(MPI_LIBS)
  endif
  ifeq ($(HAVE_NCCL),yes)
    NVCC_FLAGS += -DLLMC_NCCL -I$(NCCL_INC)
    NVCC_LIBS += -L$(NCCL_LIB) -Xlinker -rpath=$(NCCL_LIB) -lnccl
  endif
  ifeq ($(HAVE_OMP),yes)
    NVCC_FLAGS += -Xcompiler -fopenmp
    NVCC_LIBS += -lgomp
  endif
  ifeq ($(HAVE_BLAS),yes)
    NVCC_FLAGS += -DLLMC_BLAS -I$(BLAS_INC)
    NVCC_LIBS += -lopenblas
  endif
  ifeq ($(HAVE_ZSTD),yes)
    NVCC_FLAGS += -DLLMC_ZSTD
    NVCC_LIBS += -lzstd
  endif
  DEV_CUDA_BINS := $(patsubst dev/cuda/%.cu,$(BUILD)/cuda/dev_%,$(wildcard dev/cuda/*.cu))
  CUDA_PRODUCT := train_gptcu
  # for make test: the GPU model test, the kernel checkers, the step profiler
  CUDA_TEST_BINS := $(BUILD)/tests/test_gpt_cu $(DEV_CUDA_BINS) $(BUILD)/cuda/profile_step_gpu
  HAVE_CUDA := yes(cuDNN=$(or $(HAVE_CUDNN),no),NCCL=$(or $(HAVE_NCCL),no),$(subst $(EMPTY) $(EMPTY),+,$(strip $(CUDA_ARCHS))))
endif

CFLAGS := $(CFLAGS_BASE) $(OPT) $(CFLAGS_EXTRA)

$(info llmc build: OpenMP=$(or $(HAVE_OMP),no) BLAS=$(or $(HAVE_BLAS),no) MPI=$(or $(HAVE_MPI),no) zstd=$(or $(HAVE_ZSTD),no) CUDA=$(or $(HAVE_CUDA),no) -> $(BUILD)/)

# --- programs ---
PROGRAMS := train_gpt tokenize plan
TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
# the CPU kernels' test once more for each narrower instruction set this machine runs (their width
# and register tile are compile-time choices, so each is its own build of the test)
NARROW_TEST_BINS := $(patsubst %,$(BUILD)/tests/test_cpu_kernels_%,$(NARROW_ISAS))
TEST_BINS += $(NARROW_TEST_BINS)
# C++ tests: GPU kernels run on the CPU through tests/cuda_emulator.h. Kernel
# code reinterprets registers the way nvcc allows (bf16 pairs as 32-bit words)
# and carries #pragma unroll: without strict aliasing, and the pragma let be.
TEST_CXX_SRCS := $(wildcard tests/test_*.cpp)
TEST_BINS += $(patsubst tests/%.cpp,$(BUILD)/tests/%,$(TEST_CXX_SRCS))
# (nvcc's __CUDA_ARCH_LIST__ for CUDA_ARCHS: the emulated device code stands for those architectures)
# (-fno-math-errno left out: with sqrtf no longer a call, GCC vectorises a kernel's float4 path and contracts its
# multiply-adds otherwise than the element path's, where nvcc gives both paths the same bits, as
# tests/kernel_cases.h checks)
CXXFLAGS = $(filter-out -std=c11 -fno-math-errno,$(CFLAGS)) -std=c++17 -pthread -fno-strict-aliasing -Wno-unknown-pragmas \
           -D__CUDA_ARCH_LIST__=$(CUDA_ARCH_LIST)
# The GPU trainer, its model test, the device communication test, the NCCL
# emulation's own test and the emulated libraries' own test (tests/test_gpu_libs.cu)
# compiled for tests/cuda_emulator.h (every kernel, cuBLASLt call, stream and copy run
# on the CPU; NCCL emulated over MPI by tests/emu_include/nccl.h; cuDNN's
# backend API by tests/emu_include/cudnn.h, which runs the attention graphs
# node by node; MPI when the build has it): CI runs the GPU code paths end to end.
# The dev/cuda kernel checkers too (build/emu/dev_<family>): their validation
# at small shapes, no benchmarks (they need a GPU).
EMU_BINS := $(BUILD)/emu/train_gptcu $(BUILD)/emu/test_gpt_cu $(BUILD)/emu/test_comm_nccl $(BUILD)/emu/test_nccl_emulator \
            $(BUILD)/emu/profile_step_gpu $(BUILD)/emu/test_gpu_libs
DEV_EMU_BINS := $(patsubst dev/cuda/%.cu,$(BUILD)/emu/dev_%,$(wildcard dev/cuda/*.cu))
EMU_BINS += $(DEV_EMU_BINS)
EMU_FLAGS := -x c++ -include tests/cuda_emulator.h -Itests/emu_include -DLLMC_NCCL -DLLMC_CUDNN
# The sanitizer builds compile the emulated programs whose tests run longest there (the trainer, the step profiler,
# the emulated kernel tests: TEST_CXX_SRCS) at -O2, after OPT's -O1: instrumented, they run 1.6 to 2.8 times
# faster than at -O1 (the trainer 2.4), with the same checks; the others' runs are short, and -O2 would cost them
# more compile time than it saves
EMU_SANITIZER_OPT := $(if $(SANITIZER),-O2)
$(BUILD)/emu/train_gptcu $(BUILD)/emu/profile_step_gpu: EMU_FLAGS += $(EMU_SANITIZER_OPT)
# the checkers' validation runs seconds at -O1 and compiles three times faster than at -O3 -g (the
# sanitizer and coverage builds keep their own flags)
EMU_CHECKER_OPT := $(if $(SANITIZER)$(COVERAGE),,-O1 -g0)
$(DEV_EMU_BINS): EMU_FLAGS += $(EMU_CHECKER_OPT)
TEST_BINS += $(EMU_BINS)
# Fuzz targets (tests/fuzz/fuzz_NAME.c; tests/fuzz/README.md): each input runs in-process,
# the link wraps exit() and the allocation and file calls (tests/fuzz/fuzz_harness.h) so that
# bad input's exit(2) does not end the run. build/fuzz/replay_NAME runs the committed corpus
# in every build (gcc and its sanitizers); build/fuzz/libfuzzer_NAME (clang, libFuzzer with
# ASan and UBSan, the normal build only) fuzzes.
FUZZ_NAMES := $(patsubst tests/fuzz/fuzz_%.c,%,$(filter-out tests/fuzz/fuzz_replay_main.c,$(wildcard tests/fuzz/fuzz_*.c)))
FUZZ_WRAP := -Wl,--wrap=exit,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign,--wrap=free,--wrap=strdup,--wrap=fopen,--wrap=fdopen,--wrap=fclose
FUZZ_BINS := $(patsubst %,$(BUILD)/fuzz/replay_%,$(FUZZ_NAMES))
ifeq ($(SANITIZER)$(COVERAGE),)
  FUZZ_CC ?= clang
  HAVE_LIBFUZZER := $(shell printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d && n; }' | \
                      $(FUZZ_CC) -x c - -fsanitize=fuzzer -o /dev/null >/dev/null 2>&1 && echo yes)
endif
ifeq ($(HAVE_LIBFUZZER),yes)
  FUZZ_BINS += $(patsubst %,$(BUILD)/fuzz/libfuzzer_%,$(FUZZ_NAMES))
  FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-function -I. -MMD -MP -g -O1 \
                 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $(filter -DLLMC_ZSTD,$(CFLAGS_BASE))
endif
TEST_BINS += $(FUZZ_BINS)

# Every program depends on the flags it is built with, so a part installed or
# removed (MPI, OpenBLAS, ...) or another knob rebuilds it; the stamp file is
# rewritten only when the flags change. It names every compiler and flag set
# (C, C++, nvcc, the emulated builds' extra flags, the fuzz targets'), so it
# comes after them all.
FLAGS_STAMP := $(BUILD)/flags.stamp
FLAGS_NOW := $(CC) $(CFLAGS) $(LDFLAGS) $(LDLIBS) | $(CXX) $(CXXFLAGS) | $(NVCC) $(NVCC_FLAGS) $(NVCC_DEV_FLAGS) $(NVCC_LIBS) | $(EMU_FLAGS) $(EMU_CHECKER_OPT) $(EMU_SANITIZER_OPT) | $(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_WRAP)
$(shell mkdir -p $(BUILD) && (echo '$(FLAGS_NOW)' | cmp -s - $(FLAGS_STAMP) || echo '$(FLAGS_NOW)' > $(FLAGS_STAMP)))

DEV_BINS := $(BUILD)/dev/perf/bench_comm $(BUILD)/dev/perf/bench_dataloader $(BUILD)/dev/perf/profile_step_cpu \
            $(BUILD)/dev/perf/bench_matmul_cpu $(BUILD)/dev/perf/bench_crc32c \
            $(BUILD)/dev/perf/thread_round_trip  # benchmarks (docs/benchmarks.md)

.PHONY: all test test-all debug run bench clean
# the product only; the tests, benchmarks, kernel checkers and emulated programs are make test's
all: $(PROGRAMS) $(CUDA_PRODUCT)

# The release binaries live at the top level (./train_gpt); sanitizer and debug
# builds live under their build directory only (the empty recipe: `make
# SANITIZER=address` builds build-address/train_gpt and stops, where make's
# built-in rule would link train_gpt.c with it into ./train_gpt).
ifeq ($(BUILD),build)
$(PROGRAMS): %: $(BUILD)/%
	cp $< $@
else
$(PROGRAMS): %: $(BUILD)/% ;
endif

# The programs record the tree they were built from (train_loop.h's run record); outside the flags
# stamp, so a commit does not rebuild everything.
VERSION_DEF := -DLLMC_VERSION='"$(shell git describe --always --dirty 2>/dev/null || echo unknown)"'
$(BUILD)/%: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(VERSION_DEF) $< -o $@ $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(LDLIBS)

$(NARROW_TEST_BINS): $(BUILD)/tests/test_cpu_kernels_%: tests/test_cpu_kernels.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ISA_FLAGS_$*) $< -o $@ $(LDFLAGS) $(LDLIBS)

$(patsubst tests/%.cpp,$(BUILD)/tests/%,$(TEST_CXX_SRCS)): CXXFLAGS += $(EMU_SANITIZER_OPT)
$(BUILD)/tests/%: tests/%.cpp $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDFLAGS) $(LDLIBS) -pthread

$(BUILD)/emu/train_gptcu: train_gpt.cu
$(BUILD)/emu/test_gpt_cu: tests/test_gpt.cu
$(BUILD)/emu/test_comm_nccl: tests/test_comm_nccl.cu
$(BUILD)/emu/test_gpu_libs: tests/test_gpu_libs.cu
$(BUILD)/emu/test_nccl_emulator: tests/test_nccl_emulator.cu
$(BUILD)/emu/profile_step_gpu: dev/perf/profile_step_gpu.cu
$(DEV_EMU_BINS): $(BUILD)/emu/dev_%: dev/cuda/%.cu
$(EMU_BINS): $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(EMU_FLAGS) $(filter %.cu,$^) -x none -o $@ $(LDFLAGS) $(LDLIBS) -pthread

$(BUILD)/fuzz/replay_main.o: tests/fuzz/fuzz_replay_main.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/fuzz/replay_%: tests/fuzz/fuzz_%.c $(BUILD)/fuzz/replay_main.o $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/fuzz/replay_main.o -o $@ $(LDFLAGS) $(LDLIBS) $(FUZZ_WRAP)
$(BUILD)/fuzz/libfuzzer_%: tests/fuzz/fuzz_%.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $< -o $@ $(filter -lzstd,$(LDLIBS)) -lm -lpthread $(FUZZ_WRAP)

-include $(wildcard $(BUILD)/*.d $(BUILD)/tests/*.d $(BUILD)/dev/*.d $(BUILD)/dev/perf/*.d $(BUILD)/emu/*.d $(BUILD)/fuzz/*.d)

# --- CUDA programs: train_gptcu, build/cuda/dev_<family> for dev/cuda/*.cu,
# build/tests/test_gpt_cu (run by tests/run_tests.sh; it SKIPs without a GPU).
ifneq ($(NVCC_FLAGS),)
ifeq ($(BUILD),build)
train_gptcu: $(BUILD)/train_gptcu
	cp $< $@
else
train_gptcu: $(BUILD)/train_gptcu ;
endif
$(BUILD)/train_gptcu: train_gpt.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(VERSION_DEF) $< -o $@ $(NVCC_LIBS)
$(BUILD)/tests/test_gpt_cu: tests/test_gpt.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_DEV_FLAGS) $< -o $@ $(NVCC_LIBS)
$(BUILD)/cuda/dev_%: dev/cuda/%.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_DEV_FLAGS) $< -o $@ $(NVCC_LIBS)
$(BUILD)/cuda/profile_step_gpu: dev/perf/profile_step_gpu.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_DEV_FLAGS) $< -o $@ $(NVCC_LIBS)
-include $(wildcard $(BUILD)/cuda/*.d)
endif

# make test: build the product and every test program, run every test, print "N passed, N failed".
test: $(addprefix $(BUILD)/,$(PROGRAMS)) $(CUDA_PRODUCT) $(TEST_BINS) $(DEV_BINS) $(CUDA_TEST_BINS)
	BUILD=$(BUILD) HAVE_MPI=$(HAVE_MPI) bash tests/run_tests.sh

# CI's command: the suite in a normal, an ASan and a UBSan build, one tally.
test-all:
	bash tests/run_all.sh

debug:
	$(MAKE) DEBUG=1 BUILD=build-debug build-debug/train_gpt

# The main job: a small GPT trained on the built-in default corpus.
run: train_gpt tokenize
	bash scripts/run_default.sh

# make bench [CPU_ISA=avx2]: both matmul backends side by side (scripts/bench_cpu.sh)
bench: $(BUILD)/train_gpt $(BUILD)/tokenize $(BUILD)/dev/perf/bench_matmul_cpu $(BUILD)/dev/perf/thread_round_trip
	BUILD=$(BUILD) bash scripts/bench_cpu.sh

clean:
	rm -rf build build-* $(PROGRAMS) train_gptcu
