// device_check.cuh: the start-up checks of the GPU a process is given, each a
// one-line usage error before any work is queued:
//   - NCCL takes one GPU a rank: "Using the same CUDA device multiple times as
//     different ranks of the same NCCL communicator is not supported and may
//     lead to hangs" (NCCL User Guide, "Creating a Communicator"), so a node
//     with more ranks than GPUs is refused when NCCL carries the device
//     traffic (the staged MPI backend shares a GPU between ranks);
//   - the binary holds device code the GPU runs: a cubin for its major
//     compute capability at or below its minor, or PTX the driver can
//     JIT-compile for it (CUDA C++ Programming Guide, "Binary Compatibility",
//     "PTX Compatibility"); cudaFuncGetAttributes answers for the running
//     device, and __CUDA_ARCH_LIST__ (nvcc's list of the architectures
//     compiled, e.g. 800,900) names what the binary holds in the message.
#ifndef LLMC_DEVICE_CHECK_CUH
#define LLMC_DEVICE_CHECK_CUH

#include "cuda_common.cuh"  // defines: CUDA_CHECK

// NULL when this rank has a GPU of its own or does not need one, else why
// not (written to buf). local_ranks: the node's rank count, 0 when unknown;
// nccl: NCCL carries the device traffic.
static inline const char *device_ranks_problem(int rank, int local_rank, int local_ranks, int devices, int nccl,
                                               char *buf, size_t n) {
    if (!nccl || (local_rank < devices && local_ranks <= devices)) return NULL;
    char count[32];
    if (local_ranks > 0) snprintf(count, sizeof(count), "%d", local_ranks);
    else snprintf(count, sizeof(count), "at least %d", local_rank + 1);
    snprintf(buf, n,
             "rank %d: %s ranks on this node but %d GPU%s: NCCL needs a GPU for each rank (two ranks of a "
             "communicator on one GPU are not supported); start at most %d rank%s a node (mpirun --map-by "
             "ppr:%d:node, srun --ntasks-per-node=%d) or use --comm mpi",
             rank, count, devices, devices == 1 ? "" : "s", devices, devices == 1 ? "" : "s", devices, devices);
    return buf;
}

static inline void device_check_ranks(int rank, int local_rank, int local_ranks, int nccl) {
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    char why[384];
    if (device_ranks_problem(rank, local_rank, local_ranks, devices, nccl, why, sizeof(why))) die_usage("%s", why);
}

__global__ void device_probe_kernel(int *p) {
    if (p) *p = 0;
}

// The code that runs on the current device: a cubin's (binary == ptx) or the
// PTX's JIT-compiled for it (ptx < binary); both as major * 10 + minor.
typedef struct {
    int binary, ptx;
} DeviceCode;

// The current device's code in this binary; none ends the program with one
// line naming the device, its compute capability and what the binary holds.
static inline DeviceCode device_check_code(void) {
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, device_probe_kernel);
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
        (void)cudaGetLastError();  // (the runtime's sticky copy of it)
        static const int archs[] = {__CUDA_ARCH_LIST__};
        char held[128] = "";
        for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++)
            snprintf(held + strlen(held), sizeof(held) - strlen(held), "%ssm_%d", i ? " " : "", archs[i] / 10);
        int dev = 0;
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
        die_usage("GPU %d (%s) has compute capability %d.%d but this program holds device code for %s (and PTX for "
                  "the last) only: rebuild it for this GPU (make CUDA_ARCHS=\"sm_%d%d\")",
                  dev, prop.name, prop.major, prop.minor, held, prop.major, prop.minor);
    }
    CUDA_CHECK(e);
    DeviceCode c = {a.binaryVersion, a.ptxVersion};
    return c;
}

#endif  // LLMC_DEVICE_CHECK_CUH
