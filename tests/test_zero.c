// test_zero.c: ZeRO shards and data parallelism without a launcher: shard
// ranges cover the flat buffer in rank order for any size and rank count,
// reduce-scatter counts match each rank's piece, the per-rank memory formula,
// launchers' rank variables (launcher_env.h),
// released buffers read as zero and hand their pages back, and every ZeRO
// stage on one process trains like the plain AdamW loop (self backend).
// With arguments it is the comparison tool of tests/test_distributed.sh:
//   test_zero --compare-logs REF.json OTHER.json TOL NAME   (loss, grad_norm)
//   test_zero --compare-models REF.bin OTHER.bin TOL NAME   (every weight)
#include <sys/mman.h>

#include "llmc/comm.h"
#include "llmc/gpt_cpu.h"
#include "llmc/optimizer.h"
#include "llmc/rand.h"
#include "llmc/zero_shard.h"
#include "llmc/zero_cpu.h"
#include "tests/testing.h"

static void test_shard_cover(void) {
    const int64_t sizes[] = {64, 128, 128768, 64 * 1001, 64 * 7};
    const int worlds[] = {1, 2, 3, 4, 7, 16};
    int ok = 1, counts_ok = 1;
    size_t counts[16];
    for (size_t a = 0; a < sizeof(sizes) / sizeof(sizes[0]); a++) {
        for (size_t b = 0; b < sizeof(worlds) / sizeof(worlds[0]); b++) {
            int64_t n = sizes[a], next = 0;
            int w = worlds[b];
            for (int r = 0; r < w; r++) {
                ShardMap sm;
                shard_map_init(&sm, n, r, w);
                ok &= sm.begin == next && sm.end >= sm.begin && sm.shard % PARAM_ALIGN == 0 &&
                      sm.shard * w >= n && sm.end - sm.begin <= sm.shard;
                next = sm.end;
                // pieces of a few ranges: counts sum to the range, this rank's count is its piece
                int64_t ranges[][2] = {{0, n}, {n / 3, n / 3 + 65}, {n - 1, n}, {n / 2, n / 2}};
                for (int k = 0; k < 4; k++) {
                    int64_t lo = ranges[k][0], hi = ranges[k][1] < n ? ranges[k][1] : n, plo, phi;
                    shard_counts(&sm, lo, hi, counts);
                    shard_piece(&sm, lo, hi, &plo, &phi);
                    counts_ok &= comm_sum_counts(counts, w) == (size_t)(hi - lo) && counts[r] == (size_t)(phi - plo);
                }
            }
            ok &= next == n;
        }
    }
    test_result(ok, "shard_ranges_cover_buffer_in_rank_order");
    test_result(counts_ok, "shard_counts_match_pieces");
}

static void test_memory_formula(void) {
    ShardMap sm;
    shard_map_init(&sm, 64 * 1001, 1, 4);  // 64064 elements: S = 16064 (padded up from 16016)
    int ok = sm.shard == 16064;
    const double n = 64064, s = 16064;
    const double want[4][3] = {{4 * n, 4 * n, 8 * n}, {4 * n, 4 * n, 8 * s}, {4 * n, 4 * s, 8 * s}, {4 * s, 4 * s, 8 * s}};
    for (int stage = 0; stage < 4; stage++) {
        ZeroMemory zm = shard_memory(stage, &sm, 4, 4, 8);
        ok &= zm.params == want[stage][0] && zm.grads == want[stage][1] && zm.optimizer == want[stage][2];
    }
    ZeroMemory mixed = shard_memory(1, &sm, 2, 2, 12);
    ok &= mixed.params == 2 * n && mixed.grads == 2 * n && mixed.optimizer == 12 * s;
    test_result(ok, "zero_memory_formula");
}

static void test_release(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 16 * page / sizeof(float);
    float *buf = map_zeroed(n * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
    int64_t lo = 100, hi = (int64_t)n - 333;
    release_range(buf, lo, hi);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= buf[i] == (((int64_t)i >= lo && (int64_t)i < hi) ? 0.0f : 1.0f);
    test_result(ok, "release_range_zeroes_only_its_range");
    // the whole pages inside the range are no longer resident (before being read again)
    for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
    release_range(buf, lo, hi);
    unsigned char vec[16];
    CHECK(mincore(buf, 16 * page, vec) == 0, "mincore failed");
    int released = 1;
    for (int p = 1; p < 15; p++) released &= (vec[p] & 1) == 0;
    test_result(released && (vec[0] & 1) && (vec[15] & 1), "release_range_hands_pages_back");
    munmap(buf, n * sizeof(float));
}

// Three steps of two accumulated micro-batches, plain or through a ZeRO stage
// (one process). Returns the final weights (caller frees) and the norms.
static float *train_tiny(int stage, float norms[3]) {
    GPTConfig cfg = {16, 37, 64, 2, 2, 16};
    GPT m;
    gpt_init_held(&m, &cfg, NULL, tp_none(), zero_sharding(stage > 0 ? stage : 0, 0, 1));
    gpt2_init_params(&m.layout, m.params, 7);
    gpt_shard_params(&m);
    int B = 2, T = 8, accum = 2, N = B * T;
    int x[16], y[16];
    Rng rng;
    rng_seed(&rng, 11);
    Comm comm;
    Zero z;
    int64_t n = m.layout.num_elements;
    float *am = NULL, *av = NULL;
    if (stage >= 0) {
        comm_init(&comm, NULL, NULL, grid_model_parallel(GRID_TP, 1), 60);
        zero_init(&z, &m, comm_group(&comm, COMM_REPLICA), stage, 0.001);  // 250-element buckets: many per segment
    } else {
        am = (float *)callocCheck((size_t)n, sizeof(float));
        av = (float *)callocCheck((size_t)n, sizeof(float));
    }
    for (int step = 0; step < 3; step++) {
        if (stage >= 0) zero_begin_step(&z);
        else gpt_zero_grad(&m);
        for (int micro = 0; micro < accum; micro++) {
            for (int i = 0; i < N; i++) {
                x[i] = (int)rng_below(&rng, 37);
                y[i] = (int)rng_below(&rng, 37);
            }
            if (stage >= 0) zero_begin_pass(&z, micro == accum - 1);
            gpt_forward(&m, x, y, B, T, 1.0f / (float)(N * accum));
            gpt_backward(&m);
        }
        AdamWConfig ac = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step + 1};
        if (stage >= 0) {
            zero_wait_grads(&z);
            norms[step] = (float)sqrt(zero_grad_sumsq_owned(&z));
            gpt_update(&m, &ac, grad_clip_scale(norms[step], 1.0f));
            zero_gather_params(&z);
        } else {
            norms[step] = (float)sqrt(sum_of_squares(m.grads, n));
            adamw_update_range(&m.layout, m.params, m.grads, 0, am, av, 0, n, &ac, grad_clip_scale(norms[step], 1.0f));
        }
    }
    float *views[3];  // (one process: the shard is the whole buffer)
    gpt_state_views(&m, views);
    float *out = (float *)mallocCheck(sizeof(float) * (size_t)n);
    memcpy(out, views[0], sizeof(float) * (size_t)n);
    if (stage >= 0) {
        zero_free(&z);
        comm_finalize(&comm);
    }
    free(am);
    free(av);
    gpt_free(&m);
    return out;
}

static void test_stages_single_process(void) {
    GPTConfig cfg = {16, 37, 64, 2, 2, 16};
    ParamLayout pl;
    param_layout_init(&pl, &cfg);
    float ref_norms[3], norms[3];
    float *ref = train_tiny(-1, ref_norms);
    for (int stage = 0; stage <= 3; stage++) {
        float *w = train_tiny(stage, norms);
        double werr = rel_error(w, ref, (long)pl.num_elements, 1e-6), nerr = 0;
        for (int s = 0; s < 3; s++) nerr = fmax(nerr, fabs(norms[s] - ref_norms[s]) / ref_norms[s]);
        test_result(werr < 1e-5 && nerr < 1e-5, "zero%d_one_process_matches_plain_adamw (weights %.2e, norms %.2e)",
                    stage, werr, nerr);
        free(w);
    }
    free(ref);
    param_layout_free(&pl);
}

// launch_detect under each launcher's variables (set, checked, unset again)
static void test_launch_env(void) {
    static const char *all[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                                "MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "RANK",
                                "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
    const int nvars = (int)(sizeof(all) / sizeof(all[0]));
    for (int i = 0; i < nvars; i++) unsetenv(all[i]);
    LaunchInfo li = launch_detect();
    int ok = strcmp(li.launcher, "single") == 0 && li.rank == 0 && li.world == 1 && li.rank_var == NULL &&
             li.local_world == 1;
    setenv("RANK", "5", 1);
    setenv("WORLD_SIZE", "6", 1);
    li = launch_detect();  // no LOCAL_RANK: 0; no LOCAL_WORLD_SIZE: not known
    ok &= strcmp(li.launcher, "env") == 0 && li.rank == 5 && li.world == 6 && li.local_rank == 0 && li.local_world == 0;
    setenv("LOCAL_WORLD_SIZE", "3", 1);
    li = launch_detect();
    ok &= li.local_world == 3;
    setenv("SLURM_PROCID", "3", 1);
    setenv("SLURM_STEP_NUM_TASKS", "8", 1);
    setenv("SLURM_LOCALID", "1", 1);
    li = launch_detect();  // srun's variables win over the generic ones (srun gives no plain local count)
    ok &= strcmp(li.launcher, "slurm") == 0 && li.rank == 3 && li.world == 8 && li.local_rank == 1 &&
          li.local_world == 0;
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
    li = launch_detect();  // mpirun inside a Slurm allocation: mpirun's
    ok &= strcmp(li.launcher, "mpirun") == 0 && li.rank == 2 && li.world == 4 && li.local_rank == 2 &&
          li.local_world == 4 && strcmp(li.rank_var, "OMPI_COMM_WORLD_RANK") == 0;
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    li = launch_detect();  // a local count that does not cover the local rank is not believed
    ok &= li.local_world == 0;
    for (int i = 0; i < nvars; i++) unsetenv(all[i]);
    test_result(ok, "launch_detect_reads_each_launchers_variables");
}

// ---------------------------------------------------------------------------
// comparison tool

// The loss and grad_norm of each step line of a --log-json file.
static int read_log(const char *path, double *loss, double *norm, int cap) {
    FILE *f = fopenCheck(path, "r");
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f) && n < cap) {
        const char *l = strstr(line, "\"loss\":"), *g = strstr(line, "\"grad_norm\":");
        if (!l || !g) continue;
        loss[n] = atof(l + 7);
        norm[n] = atof(g + 12);
        n++;
    }
    fclose(f);
    return n;
}

static int compare_logs(const char *ref, const char *other, double tol, const char *name) {
    double la[1000], na[1000], lb[1000], nb[1000], worst = 0;
    int n = read_log(ref, la, na, 1000), m = read_log(other, lb, nb, 1000);
    for (int i = 0; i < n && i < m; i++) {
        worst = fmax(worst, fabs(la[i] - lb[i]) / fmax(fabs(la[i]), 1e-12));
        worst = fmax(worst, fabs(na[i] - nb[i]) / fmax(fabs(na[i]), 1e-12));
    }
    test_result(n > 0 && n == m && worst <= tol, "%s (%d vs %d steps, max relative difference %.2e, tolerance %.0e)",
                name, n, m, worst, tol);
    return test_exit_code();
}

static float *read_model(const char *path, long *n, int header[256]) {
    FILE *f = fopenCheck(path, "rb");
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    CHECK(bytes >= 1024, "'%s' is too short", path);
    freadExact(header, sizeof(int), 256, f, path);
    *n = (bytes - 1024) / (long)sizeof(float);
    float *w = (float *)mallocCheck(sizeof(float) * (size_t)*n);
    freadExact(w, sizeof(float), (size_t)*n, f, path);
    fclose(f);
    return w;
}

static int compare_models(const char *ref, const char *other, double tol, const char *name) {
    int ha[256], hb[256];
    long na, nb;
    float *a = read_model(ref, &na, ha), *b = read_model(other, &nb, hb);
    int same_shape = na == nb && memcmp(ha, hb, sizeof(ha)) == 0;
    double err = same_shape ? rel_error(b, a, na, 1e-6) : INFINITY;
    test_result(same_shape && err <= tol, "%s (%ld weights, relative difference %.2e, tolerance %.0e)", name, na, err,
                tol);
    free(a);
    free(b);
    return test_exit_code();
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "--compare-logs") == 0) return compare_logs(argv[2], argv[3], atof(argv[4]), argv[5]);
    if (argc == 6 && strcmp(argv[1], "--compare-models") == 0)
        return compare_models(argv[2], argv[3], atof(argv[4]), argv[5]);
    if (argc != 1) die_usage("usage: %s [--compare-logs|--compare-models REF OTHER TOL NAME]", argv[0]);
    test_shard_cover();
    test_memory_formula();
    test_release();
    test_launch_env();  // leaves no launcher variable set: the next test runs without MPI
    test_stages_single_process();
    return test_exit_code();
}
