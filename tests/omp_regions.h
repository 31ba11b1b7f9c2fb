// omp_regions.h: counts the OpenMP parallel regions a program enters, its own
// and its libraries' (OpenBLAS's): with GCC every region starts at libgomp's
// GOMP_parallel, which this header defines, counting, and forwards to
// libgomp's (the executable's definition comes first for the shared libraries
// too). For test_gpt_cpu and the step profiler: include it in the one file of a
// program that reads omp_regions_entered(); the trainers do not.
#ifndef TESTS_OMP_REGIONS_H
#define TESTS_OMP_REGIONS_H

#include <dlfcn.h>

static long g_omp_regions;

// Parallel regions entered so far (0 without OpenMP).
static inline long omp_regions_entered(void) { return __atomic_load_n(&g_omp_regions, __ATOMIC_RELAXED); }

#ifdef _OPENMP
void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags);
void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags) {
    static void (*real)(void (*)(void *), void *, unsigned, unsigned);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "GOMP_parallel");
    __atomic_add_fetch(&g_omp_regions, 1, __ATOMIC_RELAXED);
    real(fn, data, num_threads, flags);
}
#endif

#endif  // TESTS_OMP_REGIONS_H
