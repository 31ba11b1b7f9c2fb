// test_flash_emulated.cpp: the flash attention of llmc/attention_flash.cuh
// (its launchers and the forward, delta, dk/dv and dq kernels: the text nvcc
// compiles for the GPU) run on the CPU through tests/cuda_emulator.h: the
// attention rows of tests/kernel_cases.h's table through llmc's launchers,
// against the CPU attention of llmc/cpu_layers.h on the same bf16 inputs
// (out, lse and dq|dk|dv within bf16 tolerances; nothing left unwritten:
// outputs start as NaN, shared memory is NaN before every block), at head
// sizes 64 and 32, T from 1 to 333 (partial tiles, one tile, several), with
// cp.async completing at issue and at the last moment, under a random
// accumulator layout; and with query offsets (context parallel: a rank's two
// chunks against the whole sequence's K and V). CI has no GPU: this is how
// every change to the kernels' tiling, masking, barriers and indexing gets run
// there; speed and the hardware's own rounding are for dev/cuda/attention.cu
// on a GPU. (Its own binary: the attention kernels compile beside the
// other families' in test_kernels_emulated, not after them.)
#include "tests/cuda_emulator.h"

#define KC_ATTENTION
#include "tests/kernel_cases.h"

int main(void) {
    kernel_cases_run("attention", &LLMC_KERNELS);
    return test_exit_code();
}
