// ckpt_writer.h: the asynchronous checkpoint writer, shared by both trainers:
// a background thread per rank writes its data file, rank 0's commits.
//
// Atomic: every file is written into step_N.tmp/ and fsynced, the manifest last;
// then the directory is renamed into place and CKPT_DIR fsynced; then `latest`
// (naming the step directory) is replaced by rename. A crash at any moment
// leaves the previous complete checkpoint loadable; what it leaves half
// written is removed when the next run starts.
//
// The directory is the run's own (ckpt_dir.h): a run takes its lock at start
// (checkpoint.h's ckpt_dir_claim; a second run on it is refused), and nothing
// in it is ever removed through a symbolic link or unless the writer wrote it.
//
// Asynchronous: at a checkpoint step every rank copies what it writes into a
// host staging buffer (the trainer's, allocated page-aligned and pre-faulted
// once: ckpt_staging_alloc on the CPU) and training goes on. On the CPU,
// where the writer has a core of its own (--ckpt-writer-cores, counted by
// default), the thread makes the copy there beside the next forward and
// backward, and the next update, which rewrites what it copies, waits for it
// (ckpt_before_update); where it has none, the AdamW update that makes the
// checkpoint's state writes its results into staging as well
// (stage_in_update), and a checkpoint not known before the update (a
// preemption's) is copied by the training threads at the step boundary
// (they are idle there anyway). Each takes each chunk's CRC32C while it is
// in cache (ckpt_stage.h). On the GPU a device-to-host copy into pinned memory
// is queued on a side stream, the next update waits for it on the device,
// and the loop hands the buffer to the thread at the next step boundary. The
// thread then (compresses,) writes, with O_DIRECT where the file system takes
// it, and fsyncs (ckpt_io.h); where the node has no core beside the training
// threads it runs at the lowest priority (nice 19), on the time they leave
// idle. What each checkpoint cost the run (the steps it overlapped, against
// the steps before it) goes to the JSON log (ckpt_step_cost). At each later
// step boundary the ranks sum three flags (writes finished, writes failed,
// preemption signal, ckpt_signal.h): once every rank's file is durable, the
// files' records are gathered to rank 0, whose thread commits (manifest,
// renames, `latest`, deleting checkpoints beyond --ckpt-keep). A checkpoint
// due while the previous one is still being written waits for it, and says so.
#ifndef LLMC_CKPT_WRITER_H
#define LLMC_CKPT_WRITER_H

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ckpt_dir.h"       // defines: CKPT_PATH_MAX, CKPT_NAME_MAX, ckpt_step_dir, ckpt_make_tmp_dir, ...
#include "ckpt_format.h"    // defines: CkptRun, CkptRanges, CkptPoint, CkptFileRecord, ckpt_manifest_json, ...
#include "ckpt_io.h"        // defines: CkptIO, CKPT_ERR_MAX, ckpt_write_file, ckpt_write_latest, ckpt_fault_sleep, ...
#include "ckpt_signal.h"    // defines: ckpt_signal_received
#include "ckpt_stage.h"     // defines: ckpt_stage_chunks, ckpt_stage_crc
#include "comm.h"           // defines: CommGroup, comm_all_reduce, comm_all_gather_start, comm_wait, ...
#include "dataloader.h"     // defines: DataLoader, DataSetId, dataloader_identity, dataloader_state
#include "launcher_env.h"   // defines: LaunchInfo, launch_detect
#include "step_time.h"      // defines: quantile
#include "utils.h"          // defines: wall_seconds, thread_cpu_seconds, CHECK, mallocCheck, ...

typedef enum { CKPT_JOB_NONE, CKPT_JOB_WRITE, CKPT_JOB_COMMIT, CKPT_JOB_EXIT } CkptJob;
// STAGING: the trainer's copy into the staging buffer is in flight (GPU), the write not yet handed to the thread.
typedef enum { CKPT_IDLE, CKPT_STAGING, CKPT_WRITING, CKPT_COMMITTING } CkptPhase;

// Where the writer's records go (the JSON log's: checkpoint.h connects them to
// logger.h's): event: "staged" (stall_ms) or "committed" (bytes, seconds);
// cost: what a checkpoint cost the run (ckpt_step_cost). NULL functions: none.
typedef struct {
    void *ctx;
    void (*event)(void *ctx, int64_t step, const char *event, double stall_ms, double bytes, double seconds);
    void (*cost)(void *ctx, int64_t step, double stall_ms, int first, int steps, double step_ms, double baseline_ms);
} CkptLog;

// What a checkpoint cost the run: the steps from the one that staged it to
// the one at whose end it was committed (on rank 0), against the median
// (nearest rank: the lower middle of an even count) of the last
// CKPT_BASELINE_STEPS steps before it that overlapped no checkpoint (the
// loop's first step, the warm-up, left out).
#define CKPT_BASELINE_STEPS 5
typedef struct {
    int open;          // its steps are still being counted
    int ends;          // it was committed in the step now running: that step is its last
    int64_t step;      // the checkpoint (steps done when staged)
    int first, steps;  // its steps: first (0-based), how many so far
    double step_ms;    // their wall time
    double stall_ms;   // the loop's stall in the staging (and the wait for the copy)
    double baseline_ms;  // the median step before it (-1: no step overlapped no checkpoint)
} CkptCost;

typedef struct {
    CkptRun run;
    const char *dir;
    int every, keep, compress;
    CommGroup *dp;
    int rank, world;
    CkptRanges ranges;
    float *staging;             // (3 x write's elements, the file's order): what this rank writes, from the trainer
    void (*wait_staged)(void *ctx);  // the trainer's: waits for its queued staging copy (NULL: stage copies at once)
    // the trainer's: its next update also writes [lo, hi) into staging (NULL: it cannot; stage copies after it)
    void (*stage_in_update)(void *ctx, float *staging, int64_t lo, int64_t hi, uint32_t *crcs);
    int64_t staged_in_update;   // the checkpoint (steps done) whose copy the update makes (-1: none)
    double update_wait_ms;      // its stall before that update (the wait for the checkpoint before it)
    uint32_t *chunk_crcs;       // the copy's chunks' CRC32Cs (ckpt_stage.h), when the copy takes them (CPU, raw data)
    double stall_ms;            // what the checkpoint in flight has cost the loop so far
    int stall_open;             // its copy is not known done yet: its JSON record is still to come
    int low_priority;           // no core spare beside the training threads: the thread runs at nice 19
    int thread_copies;          // a core is spare (CPU): the thread makes each copy, beside the next step
    void (*stage)(void *ctx, float *staging, int64_t lo, int64_t hi, uint32_t *crcs);  // the copy it makes then
    int copy_pending;           // the thread's copy of the checkpoint in flight is not known done (the update waits)
    CkptCost cost;              // the checkpoint in flight's cost
    CkptCost ended[2];          // those committed in the step now running (the one before and one staged in it)
    double clean_ms[CKPT_BASELINE_STEPS];  // the last steps that overlapped no checkpoint (a ring)
    int clean_n;                // steps put in the ring
    int warm;                   // a step has run (the first, the warm-up, is no baseline)
    CkptLog log;
    void *ctx;
    const char *kill_spec;      // LLMC_TEST_CKPT_FAULT
    // the checkpoint in flight (phase changes only on the training thread)
    CkptPhase phase;
    CkptPoint point;
    double staged_at, write_s;  // wall clock when staged; seconds its data took to write (this rank)
    double write_cpu_s;         // the thread's CPU seconds for it (its copy, CRC, writes)
    int direct;                 // some of its data file went with O_DIRECT (this rank)
    int64_t last_staged;        // step of the last checkpoint staged (-1: none)
    CkptFileRecord mine;        // this rank's file (set by the thread)
    CkptFileRecord *files;      // (world) every rank's, gathered (rank 0)
    DataSetId data_set;         // the training data's identity (rank 0, for the manifest)
    // the thread, and what it hands back (under mu)
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    CkptJob job;
    int job_done, job_failed;
    int copied;                 // the thread's copy of the checkpoint in flight is done
    char err[CKPT_ERR_MAX];
} CkptWriter;

static inline const char *ckpt_kill_point_for(const CkptWriter *w, int64_t step) {
    static char point[64];
    if (!w->kill_spec) return NULL;
    const char *colon = strchr(w->kill_spec, ':');
    if (!colon || (size_t)(colon - w->kill_spec) >= sizeof(point) || atoll(colon + 1) > step) return NULL;
    snprintf(point, sizeof(point), "%.*s", (int)(colon - w->kill_spec), w->kill_spec);
    return point;
}

// A CPU trainer's staging buffer for what this rank writes (the ranges'
// write), aligned for O_DIRECT and touched now, once, so that no checkpoint
// pays the first-touch page faults (1.5 GB: 360k of them). free() frees it.
static inline float *ckpt_staging_alloc(const CkptRanges *ranges) {
    size_t bytes = sizeof(float) * CKPT_STATES * (size_t)(ckpt_pieces_elems(&ranges->write) + 1);
    bytes = (bytes + CKPT_DIRECT_ALIGN - 1) / CKPT_DIRECT_ALIGN * CKPT_DIRECT_ALIGN;
    void *p = NULL;
    CHECK(posix_memalign(&p, CKPT_DIRECT_ALIGN, bytes) == 0, "out of memory allocating %zu bytes of checkpoint staging",
          bytes);
    memset(p, 0, bytes);
    return (float *)p;
}

// The trainer's copy of each piece this rank writes into its place in staging
// (and its chunks' CRC32Cs, wanted), made by stage now or by the update.
static inline void ckpt_stage_pieces(CkptWriter *w, void (*stage)(void *, float *, int64_t, int64_t, uint32_t *)) {
    int64_t at = 0, chunks = 0;
    for (int k = 0; k < w->ranges.write.n; k++) {
        const CkptRange *q = &w->ranges.write.r[k];
        stage(w->ctx, w->staging + CKPT_STATES * at, q->lo, q->hi, w->chunk_crcs ? w->chunk_crcs + chunks : NULL);
        at += q->hi - q->lo;
        chunks += ckpt_stage_chunks(q->hi - q->lo);
    }
}

// The CRC32C of the staged data, from its chunks'.
static inline uint32_t ckpt_staged_crc(const CkptWriter *w) {
    uint32_t crc = 0;
    int64_t chunks = 0;
    for (int k = 0; k < w->ranges.write.n; k++) {
        int64_t n = w->ranges.write.r[k].hi - w->ranges.write.r[k].lo;
        crc = ckpt_stage_crc(crc, w->chunk_crcs + chunks, n);
        chunks += ckpt_stage_chunks(n);
    }
    return crc;
}

// The thread's WRITE job: (thread_copies: the copy into staging first, the
// update waiting for it) this rank's data file into step_N.tmp/.
static inline int ckpt_do_write(CkptWriter *w, CkptIO *io) {
    char tmp_dir[CKPT_PATH_MAX], path[CKPT_FILE_MAX];
    double cpu0 = thread_cpu_seconds();
    if (w->thread_copies) {
        ckpt_fault_sleep(io, "copy-");  // (a writer that lost its core: the update must wait for its copy)
        ckpt_stage_pieces(w, w->stage);
        pthread_mutex_lock(&w->mu);
        w->copied = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    ckpt_step_dir(tmp_dir, sizeof(tmp_dir), w->dir, w->point.step, ".tmp");
    double t0 = wall_seconds();
    int err = ckpt_make_tmp_dir(tmp_dir);
    if (err) return ckpt_io_fail(io, "creating", tmp_dir, err);
    w->mine.pieces = w->ranges.write;  // (the record borrows the writer's ranges)
    w->mine.layout = w->ranges.layout;
    w->mine.bytes = 0;
    w->mine.crc32c = 0;
    int64_t total = ckpt_pieces_elems(&w->ranges.write);
    if (total > 0) {
        snprintf(path, sizeof(path), "%s/rank_%05d.bin", tmp_dir, w->rank);
        size_t n = sizeof(float) * (size_t)total * CKPT_STATES;
        if (io->kill_point && strcmp(io->kill_point, "write-error") == 0) return ckpt_io_fail(io, "writing", path, ENOSPC);
        io->progress = w->rank == 0 ? path : NULL;
        if (w->chunk_crcs) w->mine.crc32c = ckpt_staged_crc(w);
        int ok = ckpt_write_file(io, path, w->staging, n, w->compress, &w->direct, &w->mine.bytes, &w->mine.crc32c,
                                 w->chunk_crcs != NULL);
        io->progress = NULL;
        if (!ok) return 0;
    }
    ckpt_fault_sleep(io, "slow-");  // (a slow disk: the loop must not wait for it)
    w->write_s = wall_seconds() - t0;
    w->write_cpu_s = thread_cpu_seconds() - cpu0;
    ckpt_kill_point(io, "after-data");
    return 1;
}

// The thread's COMMIT job (rank 0): manifest, rename, `latest`, older checkpoints beyond --ckpt-keep.
static inline int ckpt_do_commit(CkptWriter *w, CkptIO *io) {
    char tmp_dir[CKPT_PATH_MAX], final_dir[CKPT_PATH_MAX], path[CKPT_FILE_MAX];
    ckpt_step_dir(tmp_dir, sizeof(tmp_dir), w->dir, w->point.step, ".tmp");
    ckpt_step_dir(final_dir, sizeof(final_dir), w->dir, w->point.step, "");
    int64_t nranges;
    char *manifest = ckpt_manifest_json(&w->run, &w->point, &w->data_set, w->files, w->world, w->compress, &nranges);
    ckpt_kill_point(io, "before-manifest");
    snprintf(path, sizeof(path), "%s/manifest.json", tmp_dir);
    if (strlen(manifest) > CKPT_MANIFEST_MAX_BYTES || nranges > CKPT_MAX_RANGES) {  // (what a reader would refuse)
        snprintf(io->err, CKPT_ERR_MAX, "checkpoint: '%.1000s' would be %zu bytes with %lld ranges, more than a reader "
                 "takes (%zu bytes, %d ranges)", path, strlen(manifest), (long long)nranges, CKPT_MANIFEST_MAX_BYTES,
                 CKPT_MAX_RANGES);
        free(manifest);
        return 0;
    }
    int64_t bytes;
    uint32_t crc;
    int ok = ckpt_write_file(io, path, manifest, strlen(manifest), 0, NULL, &bytes, &crc, 0);
    free(manifest);
    if (!ok) return 0;
    int err = fsync_dir_err(tmp_dir);
    if (err) return ckpt_io_fail(io, "syncing", tmp_dir, err);
    ckpt_kill_point(io, "after-manifest");
    const char *doing = "", *final_name = strrchr(final_dir, '/') + 1;
    if ((err = ckpt_dir_commit(w->dir, strrchr(tmp_dir, '/') + 1, final_name, &doing)) != 0)
        return ckpt_io_fail(io, doing, final_dir, err);
    if ((err = fsync_dir_err(w->dir)) != 0) return ckpt_io_fail(io, "syncing", w->dir, err);
    ckpt_kill_point(io, "after-rename");
    if (!ckpt_write_latest(io, w->dir, final_name)) return 0;
    if (w->keep > 0) ckpt_prune(w->dir, w->point.step, w->keep);
    return 1;
}

static inline void *ckpt_thread_main(void *arg) {
    CkptWriter *w = (CkptWriter *)arg;
    // (no spare core: the training threads' idle time only; lowering its own priority never needs a privilege)
    if (w->low_priority) setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
#ifdef _OPENMP
    if (w->thread_copies) omp_set_num_threads(1);  // (its copy on its own core, not a team beside the training threads)
#endif
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->job == CKPT_JOB_NONE || w->job_done) pthread_cond_wait(&w->cv, &w->mu);
        CkptJob job = w->job;
        if (job == CKPT_JOB_EXIT) break;
        pthread_mutex_unlock(&w->mu);
        char err[CKPT_ERR_MAX] = "";
        CkptIO io = {err, ckpt_kill_point_for(w, w->point.step), NULL};
        int ok = job == CKPT_JOB_WRITE ? ckpt_do_write(w, &io) : ckpt_do_commit(w, &io);
        pthread_mutex_lock(&w->mu);
        w->job_done = 1;
        w->job_failed = !ok;
        if (!ok) snprintf(w->err, sizeof(w->err), "%s", err);
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static inline void ckpt_submit(CkptWriter *w, CkptJob job) {
    pthread_mutex_lock(&w->mu);
    w->job = job;
    w->job_done = 0;
    w->job_failed = 0;
    w->copied = 0;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

// Whether the thread's job is done (block: wait for it); *failed: whether it
// failed. Not blocking, it does not wait for the lock either: a thread at
// nice 19 that holds it may not run again for a while (it is then not done).
static inline int ckpt_job_done(CkptWriter *w, int block, int *failed) {
    *failed = 0;
    if (block)
        pthread_mutex_lock(&w->mu);
    else if (pthread_mutex_trylock(&w->mu) != 0)
        return 0;
    while (block && !w->job_done) pthread_cond_wait(&w->cv, &w->mu);
    int done = w->job_done;
    *failed = w->job_failed;
    pthread_mutex_unlock(&w->mu);
    return done;
}

// The cores this process may run on less the training threads on them:
// train_threads per rank, times the node's ranks when every rank may run on
// every core (a rank bound to its own cores counts its own threads).
static inline int ckpt_spare_cores(int train_threads, int *cores) {
    cpu_set_t set;
    int online = (int)sysconf(_SC_NPROCESSORS_ONLN), ranks = 1;
    *cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : online;
    LaunchInfo li = launch_detect();
    if (*cores >= online && li.local_world > 1) ranks = li.local_world;
    return *cores - train_threads * ranks;
}

// Starts the writer (--ckpt-dir given, claimed by ckpt_dir_claim): takes the
// identity of the training data (rank 0, whose thread writes the manifest),
// starts the thread, and says what it has: a core beside the train_threads a
// step keeps busy (--ckpt-writer-cores, or counted: ckpt_spare_cores), where
// the CPU trainer's thread makes each copy, or none, where it runs at the
// lowest priority and the CPU trainer's update makes the copy. (The trainer caught
// SIGTERM, SIGUSR1 and SIGINT at its start: ckpt_catch_preemption.)
static inline void ckpt_writer_init(CkptWriter *w, const CkptRun *run, CommGroup *dp, const DataLoader *train,
                                    const CkptRanges *ranges, float *staging, void (*wait_staged)(void *),
                                    void (*stage_in_update)(void *, float *, int64_t, int64_t, uint32_t *), void *ctx,
                                    int train_threads, CkptLog log) {
    CHECK(ckpt_lock_fd >= 0, "ckpt_writer_init: the checkpoint directory was not claimed (ckpt_dir_claim)");
    memset(w, 0, sizeof(*w));
    w->run = *run;
    w->dir = w->run.set.dir;
    w->every = run->set.every;
    w->keep = run->set.keep;
    w->compress = run->set.compress;
    w->log = log;
    w->dp = dp;
    w->rank = dp->rank;
    w->world = dp->size;
    w->ranges = *ranges;
    w->staging = staging;
    w->wait_staged = wait_staged;
    w->stage_in_update = stage_in_update;
    w->staged_in_update = -1;
    w->ctx = ctx;
    w->kill_spec = getenv("LLMC_TEST_CKPT_FAULT");
    w->last_staged = -1;
    w->files = (CkptFileRecord *)callocCheck((size_t)w->world, sizeof(CkptFileRecord));
    if (w->rank == 0) w->data_set = dataloader_identity(train, train->num_shards);
    int cores, spare = ckpt_spare_cores(train_threads, &cores);
    if (run->set.writer_cores >= 0) spare = run->set.writer_cores;
    w->low_priority = spare < 1;
    w->thread_copies = spare >= 1 && !wait_staged;
    if (!wait_staged && w->compress <= 0) {  // (the CPU's copy takes each chunk's CRC32C while it is in cache)
        int64_t chunks = 0;
        for (int k = 0; k < w->ranges.write.n; k++) chunks += ckpt_stage_chunks(w->ranges.write.r[k].hi - w->ranges.write.r[k].lo);
        w->chunk_crcs = (uint32_t *)mallocCheck(sizeof(uint32_t) * (size_t)(chunks > 0 ? chunks : 1));
    }
    if (w->rank == 0) {
        char how[64];  // (the count's source where the flag gave it)
        if (run->set.writer_cores >= 0) snprintf(how, sizeof(how), "--ckpt-writer-cores %d; %d cores", spare, cores);
        else snprintf(how, sizeof(how), "%d cores", cores);
        if (spare >= 1)
            printf("checkpoint: the writer has %d core%s beside %d training thread%s a rank (%s)%s\n", spare,
                   spare > 1 ? "s" : "", train_threads, train_threads > 1 ? "s" : "", how,
                   w->thread_copies ? ": it copies each checkpoint beside the next step" : "");
        else
            printf("checkpoint: no core spare beside %d training thread%s a rank (%s): the writer runs at nice 19, "
                   "on their idle time%s\n", train_threads, train_threads > 1 ? "s" : "", how,
                   stage_in_update ? "; the AdamW update makes each checkpoint's copy" : "");
        fflush(stdout);
    }
    CHECK(pthread_mutex_init(&w->mu, NULL) == 0 && pthread_cond_init(&w->cv, NULL) == 0, "pthread init failed");
    CHECK(pthread_create(&w->thread, NULL, ckpt_thread_main, w) == 0, "starting the checkpoint thread failed");
}

// A failed write or commit: the rank that failed says why, rank 0 removes the
// .tmp directory (every rank's thread is done with it), and the run stops.
static inline void ckpt_fail(CkptWriter *w, int failed_here) {
    if (failed_here) {
        fprintf(stderr, "error: %s\n", w->err);
        fflush(stderr);
    }
    comm_barrier(w->dp);
    if (w->rank == 0) {
        char tmp_name[CKPT_NAME_MAX];
        int dfd = ckpt_open_dir(w->dir);
        snprintf(tmp_name, sizeof(tmp_name), "step_%08lld.tmp", (long long)w->point.step);
        if (dfd >= 0) {
            ckpt_remove_step(dfd, tmp_name);
            close(dfd);
        }
    }
    exit(EXIT_FAILURE);
}

// Every rank's data file is durable: the records go to rank 0, whose thread
// commits. A record travels as doubles: pieces, bytes, CRC32C, the layout's
// tp, tp_rank, embeddings, ln_f and layer ranges, then the pieces and the
// layer ranges.
static inline void ckpt_start_commit(CkptWriter *w) {
    const CkptFileRecord *me = &w->mine;
    int n = 8 + 2 * me->pieces.n + 2 * me->layout.layers.n;
    double *mine = (double *)mallocCheck(sizeof(double) * (size_t)n);
    double head[8] = {(double)me->pieces.n, (double)me->bytes, (double)me->crc32c, (double)me->layout.tp,
                      (double)me->layout.tp_rank, (double)me->layout.embeddings, (double)me->layout.lnf,
                      (double)me->layout.layers.n};
    memcpy(mine, head, sizeof(head));
    for (int k = 0; k < me->pieces.n; k++) mine[8 + 2 * k] = (double)me->pieces.r[k].lo, mine[9 + 2 * k] = (double)me->pieces.r[k].hi;
    for (int k = 0, at = 8 + 2 * me->pieces.n; k < me->layout.layers.n; k++)
        mine[at + 2 * k] = (double)me->layout.layers.r[k].lo, mine[at + 2 * k + 1] = (double)me->layout.layers.r[k].hi;
    size_t *counts = (size_t *)mallocCheck(sizeof(size_t) * (size_t)w->world);
    double *lens = (double *)mallocCheck(sizeof(double) * (size_t)w->world), len = (double)n;
    for (int r = 0; r < w->world; r++) counts[r] = 1;
    CommRequest req = comm_all_gather_start(w->dp, &len, lens, counts, COMM_F64);
    comm_wait(&req);
    size_t total = 0;
    for (int r = 0; r < w->world; r++) total += counts[r] = (size_t)lens[r];
    double *all = (double *)mallocCheck(sizeof(double) * total);
    req = comm_all_gather_start(w->dp, mine, all, counts, COMM_F64);
    comm_wait(&req);
    const double *a = all;
    for (int r = 0; r < w->world; a += counts[r], r++) {
        CkptFileRecord *f = &w->files[r];
        ckpt_record_free(f);
        f->bytes = (int64_t)a[1];
        f->crc32c = (uint32_t)a[2];
        f->layout.tp = (int)a[3], f->layout.tp_rank = (int)a[4], f->layout.embeddings = (int)a[5], f->layout.lnf = (int)a[6];
        int np = (int)a[0], nl = (int)a[7];
        for (int k = 0; k < np; k++) ckpt_pieces_add(&f->pieces, (int64_t)a[8 + 2 * k], (int64_t)a[9 + 2 * k]);
        for (int k = 0; k < nl; k++)
            ckpt_pieces_add(&f->layout.layers, (int64_t)a[8 + 2 * np + 2 * k], (int64_t)a[9 + 2 * np + 2 * k]);
    }
    free(all);
    free(lens);
    free(counts);
    free(mine);
    if (w->rank == 0) {
        w->phase = CKPT_COMMITTING;
        ckpt_submit(w, CKPT_JOB_COMMIT);
    } else {
        w->phase = CKPT_IDLE;
    }
}

// Rank 0: logs the commit it found done.
static inline void ckpt_log_commit(CkptWriter *w, int64_t at_step) {
    double total = 0;
    for (int r = 0; r < w->world; r++) total += (double)w->files[r].bytes;
    double raw = (double)w->run.pl->num_elements * CKPT_STATES * 4, secs = wall_seconds() - w->staged_at;
    char dir[CKPT_PATH_MAX];
    ckpt_step_dir(dir, sizeof(dir), w->dir, w->point.step, "");
    printf("checkpoint %s committed at step %lld: %.1f MB on disk (%.2fx compression), rank 0 wrote at %.0f MB/s "
           "(%s; its writer's CPU time %.2f s), %.2f s after staging\n", dir, (long long)at_step, total / 1e6,
           raw / (total > 0 ? total : 1), (double)w->mine.bytes / 1e6 / (w->write_s > 0 ? w->write_s : 1e-9),
           w->direct ? "O_DIRECT" : "through the page cache", w->write_cpu_s, secs);
    fflush(stdout);
    if (w->log.event) w->log.event(w->log.ctx, w->point.step, "committed", 0.0, total, secs);
    w->phase = CKPT_IDLE;
    CkptCost *slot = w->ended[0].open ? &w->ended[1] : &w->ended[0];
    *slot = w->cost;  // (its record follows the step's line: ckpt_step_cost)
    slot->ends = 1;
    w->cost.open = 0;
}

// The copy of the checkpoint in flight is done: its stall (staging, plus
// the waits for the copy, extra_ms the last) goes to the JSON log.
static inline void ckpt_stall_close(CkptWriter *w, double extra_ms) {
    if (!w->stall_open) return;
    w->stall_ms += extra_ms;
    w->stall_open = 0;
    w->cost.stall_ms = w->stall_ms;
    if (w->log.event) w->log.event(w->log.ctx, w->point.step, "staged", w->stall_ms, 0.0, 0.0);
}

// A staged checkpoint whose copy was in flight (GPU): the copy is done by
// now (it ran beside a whole step; the wait makes sure), the thread writes it.
static inline void ckpt_hand_to_thread(CkptWriter *w) {
    if (w->phase != CKPT_STAGING) return;
    if (w->wait_staged) {
        double t0 = wall_seconds();
        w->wait_staged(w->ctx);
        ckpt_stall_close(w, (wall_seconds() - t0) * 1e3);
    }
    w->phase = CKPT_WRITING;
    ckpt_submit(w, CKPT_JOB_WRITE);
}

// Drives the checkpoint in flight to the end (a new one is due, or the run
// ends): waits for this rank's file, then (collectively) for every rank's,
// then rank 0 waits for its commit.
static inline void ckpt_drain(CkptWriter *w, int64_t at_step) {
    int failed;
    ckpt_hand_to_thread(w);
    if (w->phase == CKPT_WRITING) {
        ckpt_job_done(w, 1, &failed);
        w->copy_pending = 0;
        ckpt_stall_close(w, 0.0);  // (the run's end, or the next checkpoint, waited for all of it)
        double f[2] = {1.0, (double)failed};
        comm_all_reduce(w->dp, f, 2, COMM_F64);
        if (f[1] > 0) ckpt_fail(w, failed);
        ckpt_start_commit(w);
    }
    if (w->phase == CKPT_COMMITTING) {
        ckpt_job_done(w, 1, &failed);
        if (failed) ckpt_fail(w, 1);
        ckpt_log_commit(w, at_step);
    }
}

// Before the first step (at step `start`, 0 or the resumed checkpoint's): 1
// when a rank caught a signal during start-up. Nothing has been trained since
// `start`, so no checkpoint is written: rank 0 says so, and the run stops.
// Collective over the ranks.
static inline int ckpt_stop_before_first_step(CkptWriter *w, int64_t start) {
    double caught = (double)(ckpt_signal_received != 0);
    comm_all_reduce(w->dp, &caught, 1, COMM_F64);
    if (caught == 0) return 0;
    if (w->rank == 0) {
        if (start > 0)
            printf("checkpoint: signal received before the first step: no checkpoint written (nothing trained since "
                   "step_%08lld, which stays the newest); exiting\n", (long long)start);
        else
            printf("checkpoint: signal received before the first step: no checkpoint written (none exists yet: "
                   "--resume auto starts afresh); exiting\n");
        fflush(stdout);
    }
    return 1;
}

// A checkpoint is due at `steps_done`: the one before it, still in flight,
// is written and committed first (collective over the data ranks), saying so.
static inline void ckpt_wait_previous(CkptWriter *w, int64_t steps_done) {
    if (w->phase == CKPT_IDLE) return;
    if (w->rank == 0) {
        printf("checkpoint: step %lld waits for step_%08lld to be written\n", (long long)steps_done,
               (long long)w->point.step);
        fflush(stdout);
    }
    ckpt_drain(w, steps_done);
}

// At the boundary after `steps_done` optimizer steps: progresses the
// checkpoint in flight, stages a new one when one is due (every --ckpt-every
// steps, at the end of the run, or after a preemption signal) through
// stage(ctx, staging, lo, hi, crcs), and, at the end or on a signal, waits for its
// commit. Collective over the data ranks. Returns 1 when the run must stop
// (preempted: the checkpoint is committed). The JSON log gets the stall.
static inline int ckpt_step_boundary(CkptWriter *w, int64_t steps_done, int final, const DataLoader *train,
                                     const Rng *sample_rng, void (*stage)(void *, float *, int64_t, int64_t, uint32_t *)) {
    double t0 = wall_seconds();
    ckpt_hand_to_thread(w);
    CkptPhase phase = w->phase;  // (its job's done and failed flags below)
    int failed = 0, done = phase != CKPT_IDLE && ckpt_job_done(w, 0, &failed);
    // flags summed over the ranks: writes finished, writes failed, commit failed (rank 0), signal received
    double f[4] = {(double)(phase == CKPT_WRITING && done), (double)(phase == CKPT_WRITING && failed),
                   (double)(phase == CKPT_COMMITTING && failed), (double)(ckpt_signal_received != 0)};
    comm_all_reduce(w->dp, f, 4, COMM_F64);
    if (f[2] > 0) ckpt_fail(w, w->rank == 0);
    if (f[1] > 0) {
        ckpt_job_done(w, 1, &failed);  // every thread finishes before the directory goes
        ckpt_fail(w, failed);
    }
    if (phase == CKPT_WRITING && f[0] == w->world) ckpt_start_commit(w);
    if (phase == CKPT_COMMITTING && done && !failed) ckpt_log_commit(w, steps_done);
    int preempt = f[3] > 0;
    int due = (w->every > 0 && steps_done % w->every == 0) || final || preempt;
    if (!due || steps_done == w->last_staged) return 0;
    if (preempt && w->rank == 0) {
        printf("checkpoint: preemption signal received: checkpointing at step %lld, then exiting%s\n",
               (long long)steps_done, ckpt_signal_received == SIGINT ? " (Ctrl-C again exits at once)" : "");
        fflush(stdout);
    }
    ckpt_wait_previous(w, steps_done);  // (nothing where the update made the copy: it waited before it)
    CkptPoint p = {steps_done, dataloader_state(train), *sample_rng, w->run.lr_decay_steps};
    w->point = p;
    w->last_staged = steps_done;
    w->phase = CKPT_STAGING;
    double before_ms = 0.0;  // the stall before the update that made the copy
    if (w->staged_in_update == steps_done) {
        before_ms = w->update_wait_ms;
        ckpt_hand_to_thread(w);
    } else if (w->thread_copies) {  // (the thread copies, then writes; the next update waits for the copy)
        w->stage = stage;
        w->copy_pending = 1;
        w->phase = CKPT_WRITING;
        ckpt_submit(w, CKPT_JOB_WRITE);
    } else {
        ckpt_stage_pieces(w, stage);  // (GPU: queued; CPU: a checkpoint not known before the update, a preemption's)
        if (!w->wait_staged) ckpt_hand_to_thread(w);
    }
    w->staged_at = wall_seconds();
    double stall_ms = (w->staged_at - t0) * 1e3 + before_ms;
    w->staged_in_update = -1;
    if (w->rank == 0) {
        printf("checkpoint step_%08lld staged (training stalled %.2f ms); %s in the background\n",
               (long long)steps_done, stall_ms, w->wait_staged ? "copying to host memory, then writing"
               : w->thread_copies ? "copying, then writing" : "writing");
        fflush(stdout);
    }
    w->stall_ms = stall_ms;
    w->stall_open = 1;
    CkptCost c = {1, 0, steps_done, (int)(steps_done - 1), 0, 0.0, stall_ms, -1.0};
    if (w->clean_n > 0) {
        int n = w->clean_n < CKPT_BASELINE_STEPS ? w->clean_n : CKPT_BASELINE_STEPS;
        double v[CKPT_BASELINE_STEPS];
        memcpy(v, w->clean_ms, sizeof(double) * (size_t)n);
        c.baseline_ms = quantile(v, n, 0.5);
    }
    w->cost = c;
    if (!w->wait_staged && !w->copy_pending) ckpt_stall_close(w, 0.0);  // (the copy is done)
    if (final || preempt) ckpt_drain(w, steps_done);
    return preempt;
}

// Before the update after which `steps_after` steps are done (final: the
// run's last), which rewrites the states a checkpoint copies:
// - thread_copies: waits for the thread's copy of the checkpoint staged at
//   the boundary before (done long before, as a rule: it ran beside the
//   step's forward and backward); the wait is that checkpoint's stall;
// - else, when a checkpoint is due after it (every --ckpt-every steps and at
//   the end; a preemption's is not known yet) and the trainer's update can
//   stage (stage_in_update, the CPU's), the update is asked to write its
//   results into staging too, once the checkpoint before it no longer needs
//   staging (collective then, like the boundary; that wait is the new one's
//   stall).
// w: NULL, none.
static inline void ckpt_before_update(CkptWriter *w, int64_t steps_after, int final) {
    if (w && w->copy_pending) {
        double t0 = wall_seconds();
        pthread_mutex_lock(&w->mu);
        while (!w->copied && !w->job_done) pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
        w->copy_pending = 0;
        ckpt_stall_close(w, (wall_seconds() - t0) * 1e3);
    }
    if (!w || w->thread_copies || !w->stage_in_update || !((w->every > 0 && steps_after % w->every == 0) || final))
        return;
    double t0 = wall_seconds();
    ckpt_wait_previous(w, steps_after);
    ckpt_stage_pieces(w, w->stage_in_update);
    w->staged_in_update = steps_after;
    w->update_wait_ms = (wall_seconds() - t0) * 1e3;
}

// After step `step` (0-based) took ms (this rank's wall time, its line
// logged): counts it to the checkpoints it overlapped (the one committed in
// it, the one in flight), else to the baseline; logs a checkpoint's cost once
// its last step is done:
//   {"step":N,"ckpt":"cost","stall_ms":x,"first_step":F,"steps":n,"step_ms":x,"baseline_ms":x,"lost_ms":x}
// step_ms: the wall time of steps F..F+n-1 (the step records' "ms", whose
// "step" counts steps done, as F does; F is the step that staged it, the last
// the one it was committed in); lost_ms:
// step_ms - n x baseline_ms, what it took from the run (null, with
// baseline_ms, when no step but the first before it overlapped no checkpoint).
static inline void ckpt_step_cost(CkptWriter *w, int step, double ms) {
    int counted = 0;
    CkptCost *all[3] = {&w->ended[0], &w->ended[1], &w->cost};
    for (int k = 0; k < 3; k++) {
        CkptCost *c = all[k];
        if (!c->open || step < c->first) continue;
        c->steps++;
        c->step_ms += ms;
        counted = 1;
        if (!c->ends) continue;
        if (w->log.cost) w->log.cost(w->log.ctx, c->step, c->stall_ms, c->first + 1, c->steps, c->step_ms, c->baseline_ms);
        c->open = 0;
    }
    if (!counted && w->warm) w->clean_ms[w->clean_n++ % CKPT_BASELINE_STEPS] = ms;
    w->warm = 1;
}

static inline void ckpt_writer_free(CkptWriter *w) {
    ckpt_submit(w, CKPT_JOB_EXIT);
    CHECK(pthread_join(w->thread, NULL) == 0, "joining the checkpoint thread failed");
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    for (int r = 0; r < w->world; r++) ckpt_record_free(&w->files[r]);
    free(w->files);
    free(w->chunk_crcs);
    memset(w, 0, sizeof(*w));
}

#endif  // LLMC_CKPT_WRITER_H
