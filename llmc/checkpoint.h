// checkpoint.h: training checkpoints as the trainers use them, shared by both:
// the one place that reads the run's options for them (ckpt_run_of: the
// settings, batch and layout a checkpoint records and checks), the JSON log
// the writer's records go to (ckpt_log_to), the checkpoint directory's claim
// at start-up, and --resume (finding the checkpoint, every rank reading its
// part, all agreeing). The parts, lowest first: ckpt_dir.h (the directory is
// the run's own), ckpt_manifest.h (the manifest's rules), ckpt_format.h (what
// a checkpoint is on disk), ckpt_io.h (the writer's file operations and their
// fault injection), ckpt_signal.h (preemption), ckpt_stage.h (the CPU's
// staging copy), ckpt_writer.h (the asynchronous writer and commit),
// ckpt_reader.h (the strict reader and the resharding scatter).
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"           // defines: FlagSpec, FLAGS_COUNT, flag_value_json
#include "ckpt_dir.h"       // defines: CKPT_PATH_MAX, ckpt_lock_take, ckpt_lock_share, ckpt_dir_tidy, ckpt_list_steps, ...
#include "ckpt_format.h"    // defines: CkptRun, CkptSettings, CkptPoint, CKPT_KEPT_FLAGS, CKPT_NUM_KEPT_FLAGS, ...
#include "ckpt_reader.h"    // defines: CkptReader, CkptTargets, ckpt_read, ckpt_check_latest, ckpt_reader_close, ...
#include "ckpt_writer.h"    // defines: CkptWriter, CkptLog, ckpt_writer_init, ckpt_step_boundary, ...
#include "comm.h"           // defines: Comm, CommGroup, comm_size, comm_all_reduce, comm_barrier, GRID_DP, ...
#include "dataloader.h"     // defines: DataLoader, DataSetId, dataloader_identity
#include "file_io.h"        // defines: make_dirs
#include "logger.h"         // defines: Logger, logger_ckpt, logger_ckpt_cost
#include "model.h"          // defines: GPTConfig, ParamLayout
#include "train_options.h"  // defines: TrainOptions, TRAIN_FLAGS
#include "train_setup.h"    // defines: BatchPlan
#include "utils.h"          // defines: die_usage, EXIT_USAGE, DIE

// What a checkpoint records of the run and checks on resume: the settings
// from the options (the kept flags' values as the manifest writes them), the
// batch plan and the rank grid; lr_decay_steps is the loop's.
static inline CkptRun ckpt_run_of(const TrainOptions *o, const GPTConfig *cfg, const ParamLayout *pl,
                                  const BatchPlan *plan, const Comm *comm, const char *trainer) {
    CkptRun run;
    memset(&run, 0, sizeof(run));
    CkptSettings *s = &run.set;
    snprintf(s->dir, sizeof(s->dir), "%s", o->ckpt_dir);
    snprintf(s->resume, sizeof(s->resume), "%s", o->resume);
    s->every = o->ckpt_every, s->keep = o->ckpt_keep, s->compress = o->ckpt_compress;
    s->writer_cores = strcmp(o->ckpt_writer_cores, "auto") == 0 ? -1 : atoi(o->ckpt_writer_cores);
    s->resume_data_changed = o->resume_data_changed, s->steps = o->steps, s->zero = o->zero;
    for (int i = 0; i < CKPT_NUM_KEPT_FLAGS; i++) {
        const FlagSpec *f = NULL;
        for (int k = 0; k < FLAGS_COUNT(TRAIN_FLAGS) && !f; k++)
            if (strcmp(TRAIN_FLAGS[k].name, CKPT_KEPT_FLAGS[i]) == 0) f = &TRAIN_FLAGS[k];
        if (!f) DIE("checkpoint flag '%s' is not in TRAIN_FLAGS", CKPT_KEPT_FLAGS[i]);
        flag_value_json(f, o, s->kept[i], sizeof(s->kept[i]));
    }
    run.cfg = cfg, run.pl = pl, run.trainer = trainer;
    run.total_tokens = plan->total_tokens, run.B = plan->B, run.T = plan->T, run.accum = plan->accum;
    run.ranks = comm->world;
    run.dp = comm_size(comm, GRID_DP), run.tp = comm_size(comm, GRID_TP), run.pp = comm_size(comm, GRID_PP);
    return run;
}

static void ckpt_logger_event(void *lg, int64_t step, const char *event, double stall_ms, double bytes, double secs) {
    logger_ckpt((Logger *)lg, step, event, stall_ms, bytes, secs);
}
static void ckpt_logger_cost(void *lg, int64_t step, double stall_ms, int first, int steps, double step_ms,
                             double baseline_ms) {
    logger_ckpt_cost((Logger *)lg, step, stall_ms, first, steps, step_ms, baseline_ms);
}

// The writer's records into the run's JSON log.
static inline CkptLog ckpt_log_to(Logger *lg) {
    CkptLog l = {lg, ckpt_logger_event, ckpt_logger_cost};
    return l;
}

// A start-up step that may refuse the run: every rank learns whether any
// failed; those that did say why (one line each), and every rank exits 2.
static inline void ckpt_claim_agree(CommGroup *g, int ok, const char *err) {
    double failed = !ok;
    comm_all_reduce(g, &failed, 1, COMM_F64);
    if (failed == 0) return;
    if (!ok) fprintf(stderr, "error: %s\n", err);
    fflush(stderr);
    comm_barrier(g);
    exit(EXIT_USAGE);
}

// At start-up, before anything is written or read (--ckpt-dir given;
// collective over g, every rank): rank 0 creates the directory, takes its
// lock and tidies it (ckpt_dir.h); then every other rank shares the lock. A
// directory another run holds, or one that is not writable, ends the run
// here: one line, exit 2.
static inline void ckpt_dir_claim(const char *dir, CommGroup *g) {
    if (strlen(dir) > CKPT_PATH_MAX - 32) die_usage("--ckpt-dir '%s' is too long", dir);
    char err[CKPT_ERR_MAX] = "";
    int ok = 1;
    if (g->rank == 0) {
        make_dirs(dir, "--ckpt-dir");
        if (access(dir, W_OK) != 0) {
            snprintf(err, sizeof(err), "--ckpt-dir: directory '%s' is not writable", dir);
            ok = 0;
        } else if ((ok = ckpt_lock_take(dir, err, sizeof(err))) != 0) {
            ckpt_dir_tidy(dir);
        }
    }
    ckpt_claim_agree(g, ok, err);
    if (g->rank != 0) ok = ckpt_lock_share(dir, err, sizeof(err));
    ckpt_claim_agree(g, ok, err);
}

// --resume: finds the checkpoint (auto: the newest complete one in
// --ckpt-dir, skipping damaged ones, saying so; else the directory given)
// and reads this rank's part of it into t (its hold ranges), and *point.
// Returns 1, or 0 for a fresh start (auto, and none there). Bad input (a
// damaged checkpoint given by name, one of another run): one line from the
// rank that found it, every rank exits 2.
// Collective over the data ranks.
static inline int ckpt_resume(const CkptRun *run, CommGroup *dp, const DataLoader *train, CkptTargets *t,
                              CkptPoint *point) {
    const CkptSettings *o = &run->set;
    int auto_mode = strcmp(o->resume, "auto") == 0, n = 1;
    int64_t *steps = NULL;
    char dir[CKPT_PATH_MAX], err[CKPT_ERR_MAX];
    if (auto_mode) {
        if (dp->rank == 0) ckpt_check_latest(o->dir);
        steps = ckpt_list_steps(o->dir, &n);
        if (n == 0) {
            if (dp->rank == 0) printf("resume: no checkpoint in %s: starting fresh\n", o->dir);
            free(steps);
            return 0;
        }
    }
    DataSetId have;  // the training data's identity (rank 0 checks it)
    if (dp->rank == 0) have = dataloader_identity(train, train->num_shards);
    for (int i = 0; i < n; i++) {
        if (auto_mode) ckpt_step_dir(dir, sizeof(dir), o->dir, steps[i], "");
        else snprintf(dir, sizeof(dir), "%s", o->resume);
        CkptReader r;
        int ok = ckpt_read(&r, dir, run, train, dp->rank == 0 ? &have : NULL, t, err);
        if (ok) *point = r.point;
        ckpt_reader_close(&r);
        double f[2] = {(double)!ok, (double)(!ok && !r.damaged)};  // ranks that failed; of those, on a conflict (not damage)
        comm_all_reduce(dp, f, 2, COMM_F64);
        if (f[0] == 0) {
            if (dp->rank == 0 && r.version < 3)
                printf("resume: %s is a format version %d checkpoint: no manifest checksum or data set identity to "
                       "check\n", dir, r.version);
            if (dp->rank == 0 && r.data_change[0])
                fprintf(stderr, "warning: %s/manifest.json: %s; continuing on it (--resume-data-changed 1) at global "
                        "sample %lld of epoch %lld\n", dir, r.data_change, (long long)point->data.sample,
                        (long long)point->data.epoch);
            free(steps);
            return 1;
        }
        if (!auto_mode || f[1] > 0) {
            if (!ok) fprintf(stderr, "error: %s\n", err);
            fflush(stderr);
            comm_barrier(dp);
            exit(EXIT_USAGE);
        }
        if (dp->rank == 0)
            printf("resume: skipping %s: %s\n", dir, ok ? "damaged (another rank's files)" : err);
    }
    if (dp->rank == 0) printf("resume: no complete checkpoint in %s: starting fresh\n", o->dir);
    free(steps);
    return 0;
}

#endif  // LLMC_CHECKPOINT_H
