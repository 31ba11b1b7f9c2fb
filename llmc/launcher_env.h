// launcher_env.h: who am I in a multi-process job. Reads the rank, world size,
// local rank (the process's index on its node, which picks its GPU) and, where
// the launcher says it, the node's rank count from the environment of
// whichever launcher started the process:
//   mpirun (Open MPI)   OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE
//   MPICH, Intel MPI    PMI_RANK / PMI_SIZE / MPI_LOCALRANKID / MPI_LOCALNRANKS
//   srun (Slurm)        SLURM_PROCID / SLURM_STEP_NUM_TASKS / SLURM_LOCALID
//                       (the step's size: a batch script's own shell has none;
//                       no plain per-node count)
//   others (Kubernetes MPI jobs, Ray, torchrun style)  RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE
// The first launcher whose rank and size are both set wins; none means a
// single process. With MPI, comm.h checks these against MPI's own view.
#ifndef LLMC_LAUNCHER_ENV_H
#define LLMC_LAUNCHER_ENV_H

#include <stdlib.h>

#include "utils.h"  // defines: die_usage

typedef struct {
    const char *launcher;  // "mpirun", "mpich", "slurm", "env" or "single"
    int rank, world, local_rank;
    int local_world;       // ranks on this node, 0 when the launcher does not say
    const char *rank_var;  // the variable that gave the rank (for error messages)
} LaunchInfo;

// A non-negative integer from the environment, or -1 when unset; a value that
// is not one is a usage error naming the variable.
static inline int launch_env_int(const char *name) {
    const char *s = getenv(name);
    if (s == NULL || s[0] == '\0') return -1;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 0 || v > 1 << 24) die_usage("environment variable %s='%s' is not a rank or size", name, s);
    return (int)v;
}

static inline LaunchInfo launch_detect(void) {
    static const struct { const char *launcher, *rank, *size, *local, *local_size; } vars[] = {
        {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
         "OMPI_COMM_WORLD_LOCAL_SIZE"},
        {"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
        {"slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", NULL},
        {"env", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    };
    LaunchInfo li = {"single", 0, 1, 0, 1, NULL};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        int rank = launch_env_int(vars[i].rank), size = launch_env_int(vars[i].size);
        if (rank < 0 || size < 0) continue;
        if (size < 1 || rank >= size)
            die_usage("environment: %s=%d is not below %s=%d", vars[i].rank, rank, vars[i].size, size);
        int local = launch_env_int(vars[i].local);
        int local_size = vars[i].local_size ? launch_env_int(vars[i].local_size) : -1;
        li.launcher = vars[i].launcher;
        li.rank = rank;
        li.world = size;
        li.local_rank = local >= 0 ? local : 0;
        li.local_world = local_size > li.local_rank ? local_size : 0;
        li.rank_var = vars[i].rank;
        return li;
    }
    return li;
}

#endif  // LLMC_LAUNCHER_ENV_H
