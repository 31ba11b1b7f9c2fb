// plan.c: the layout planner. Given a model (the trainers' --model and shape
// flags), a global batch and sequence length, and one or more clusters
// (plan_cluster.h: presets or files; `local` is this machine, measured), it
// enumerates every dp x cp x tp x pp x ZeRO x sequence-parallel x schedule x
// micro-batch (x recompute on GPUs) layout, says why the trainers refuse or
// memory rejects each invalid one, predicts the others' memory per rank and
// step time (plan_model.h), and prints the best few with the reasons, the
// rejected ones with theirs, and the cost of a whole run on each cluster.
// --csv writes every layout; scripts/plan_check.sh checks the predictions
// against measured runs. docs/planner.md has the model and its sources.
#include <unistd.h>

#include "llmc/args.h"           // defines: FlagSpec, FLAG_*, die_usage
#include "llmc/plan_model.h"     // defines: PlanProblem, PlanLayout, PlanResult, plan_check_layout, ...
#include "llmc/recompute.h"      // defines: RecomputePolicy, recompute_parse, recompute_name
#include "llmc/train_options.h"  // defines: TrainOptions, TRAIN_MODEL_FLAGS, TRAIN_BATCH_FLAGS, flags_parse
#include "llmc/model_source.h"   // defines: train_build_config
#include "llmc/train_setup.h"    // defines: host_memory_available

typedef struct {
    TrainOptions train;  // (the model and batch rows)
    char cluster[FLAG_STR_MAX];
    int nodes, devices_per_node;
    float price_per_hour;
    long long train_tokens;
    int top, max_micro_batch, rejected;
    char csv[FLAG_STR_MAX];
    char layout[FLAG_STR_MAX];
    char measure_local[FLAG_STR_MAX];
} PlanOptions;

#define PT(field) offsetof(PlanOptions, train.field)
#define PO(field) offsetof(PlanOptions, field)
static const FlagSpec PLAN_FLAGS[] = {
    TRAIN_MODEL_FLAGS(PT),
    TRAIN_BATCH_FLAGS(PT),
    {"cluster", FLAG_STRING, PO(cluster), "local", NULL, 0, 0,
     "clusters, comma-separated: dgx-a100, dgx-h100, dgx-h200, dgx-b200, local (this machine, the CPU trainer: "
     "measured) or a file (docs/planner.md)", "cluster"},
    {"layout", FLAG_STRING, PO(layout), "", NULL, 0, 0,
     "predict and explain one layout, e.g. dp=8,tp=1,pp=1,cp=1,zero=1,mb=16,schedule=1f1b,recompute=none "
     "(also sp=0|1, v=chunks; recompute none|selective|full); its world sets the nodes", "output"},
    {"nodes", FLAG_INT, PO(nodes), "0", NULL, 0, CLUSTER_MAX_NODES, "nodes (0: the cluster's)", "cluster"},
    {"devices-per-node", FLAG_INT, PO(devices_per_node), "0", NULL, 0, CLUSTER_MAX_DEVICES_PER_NODE,
     "devices per node (0: the cluster's; local: its cores), the ranks of one node", "cluster"},
    {"price-per-hour", FLAG_FLOAT, PO(price_per_hour), "0", NULL, 0, 1e6, "price per device-hour (0: the cluster's)", "cluster"},
    {"train-tokens", FLAG_INT64, PO(train_tokens), "0", NULL, 0, 1e18,
     "tokens of the whole run, for its time and cost (0: 20 per parameter, Chinchilla's ratio)", "data and batch"},
    {"top", FLAG_INT, PO(top), "5", NULL, 1, 1000, "best layouts to print per cluster", "output"},
    {"max-micro-batch", FLAG_INT, PO(max_micro_batch), "64", NULL, 1, 1 << 20,
     "largest micro-batch B tried (B: the powers of two and the divisors of a data rank's sequences up to it)",
     "output"},
    {"rejected", FLAG_INT, PO(rejected), "1", NULL, 0, 1 << 30,
     "rejected layouts to list for each reason (0: all)", "output"},
    {"csv", FLAG_STRING, PO(csv), "", NULL, 0, 0, "write every layout of every cluster, its verdict and prediction",
     "output"},
    {"measure-local", FLAG_STRING, PO(measure_local), "", NULL, 0, 0,
     "internal (--cluster local runs it under mpirun): measure this machine's figures for the shapes in this file", "internal"},
};
#undef PT
#undef PO

static const char *SUMMARY =
    "Plan a training run's layout: every dp x cp x tp x pp x ZeRO x schedule x micro-batch layout on each\n"
    "cluster, its memory per rank and predicted step time, the best few, the rejected ones and why, the run's cost.\n"
    "Example: ./plan --model d12 --seq-len 1024 --total-batch-tokens 524288 --cluster dgx-h100,dgx-h200\n"
    "One layout explained: ./plan --model d12 --seq-len 1024 --total-batch-tokens 524288 --cluster dgx-h100 \\\n"
    "    --layout dp=8,tp=1,pp=1,cp=1,zero=1,mb=16,schedule=1f1b,recompute=none";

#define PLAN_MAX_CLUSTERS 16  // in one --cluster list

typedef struct {
    PlanResult *r;
    int n, cap;
} PlanList;

// --- the local cluster: its figures measured by this program under mpirun over the ranks ---

static StageKernelTimes local_kernels(void *ctx, int B, int cp, int tp, int sp, RecomputeKind recompute) {
    (void)recompute;  // (measured without; plan_model.h adds the recompute)
    const LocalFigures *f = (const LocalFigures *)ctx;
    for (int i = 0; i < f->nshapes; i++) {
        const ShapeTimes *s = &f->shapes[i];
        if (s->B == B && s->cp == cp && s->tp == tp && s->sp == sp) return s->t;
    }
    die_at(__FILE__, __LINE__, "no measured kernels for B %d cp %d tp %d sp %d", B, cp, tp, sp);
}

typedef struct { const Cluster *c; const GPTConfig *cfg; int T; } GpuKernels;
static StageKernelTimes gpu_kernels(void *ctx, int B, int cp, int tp, int sp, RecomputeKind recompute) {
    GpuKernels *g = (GpuKernels *)ctx;
    return plan_gpu_kernels(g->c, g->cfg, B, g->T, cp, tp, sp, recompute);
}

// The shell's single-quoted form of s into out.
static void shell_quote(char *out, size_t n, const char *s) {
    size_t k = 0;
    out[k++] = '\'';
    for (; *s && k + 5 < n; s++) {
        if (*s == '\'') { memcpy(out + k, "'\\''", 4); k += 4; }
        else out[k++] = *s;
    }
    out[k++] = '\'';
    out[k] = '\0';
}

// Runs plan --measure-local over the ranks (under mpirun when more than one)
// for the shapes of the layouts in pl, into f and the cluster's figures.
static void measure_local(Cluster *c, const PlanList *pl, int argc, char **argv, LocalFigures *f) {
    char shapes[] = "/tmp/llmc_plan_shapes_XXXXXX";
    int fd = mkstemp(shapes);
    if (fd < 0) die_usage("--cluster local: cannot create a file in /tmp: %s", strerror(errno));
    FILE *out = fdopen(fd, "w");
    for (int i = 0; i < pl->n; i++) {
        const PlanLayout *l = &pl->r[i].l;
        int seen = pl->r[i].why_not[0] != '\0';
        for (int j = 0; j < i && !seen; j++)
            seen = !pl->r[j].why_not[0] && pl->r[j].l.B == l->B && pl->r[j].l.cp == l->cp && pl->r[j].l.tp == l->tp &&
                   pl->r[j].l.sp == l->sp;
        if (!seen) fprintf(out, "%d %d %d %d\n", l->B, l->cp, l->tp, l->sp);
    }
    fclose(out);
    char exe[4096], cmd[16384], q[1100];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) die_usage("--cluster local: cannot find this program's path");
    exe[n] = '\0';
    int k = 0;
    if (c->devices_per_node > 1)
        k = snprintf(cmd, sizeof(cmd), "mpirun %s--oversubscribe -np %d -x OMP_NUM_THREADS ",
                     geteuid() == 0 ? "--allow-run-as-root " : "", c->devices_per_node);
    shell_quote(q, sizeof(q), exe);
    k += snprintf(cmd + k, sizeof(cmd) - (size_t)k, "%s", q);
    for (int i = 1; i < argc && k < (int)sizeof(cmd) - 1100; i++) {
        shell_quote(q, sizeof(q), argv[i]);
        k += snprintf(cmd + k, sizeof(cmd) - (size_t)k, " %s", q);
    }
    snprintf(cmd + k, sizeof(cmd) - (size_t)k, " --measure-local %s 2>&1", shapes);
    FILE *p = popen(cmd, "r");
    char line[512], last[512] = "";
    double ns = 0;
    memset(f, 0, sizeof(*f));
    while (p && fgets(line, sizeof(line), p)) {
        ShapeTimes st;
        StageKernelTimes *t = &st.t;
        snprintf(last, sizeof(last), "%s", line);
        int op;
        double gbs, us;
        if (sscanf(line, "comm %d = %lf %lf", &op, &gbs, &us) == 3 && op >= 0 && op < PLAN_OPS)
            c->op_gbs[op] = gbs, c->op_us[op] = us;
        int k;
        double chunk, pair, all;
        if (sscanf(line, "comm %d = %lf %lf", &op, &gbs, &us) == 3) continue;
        if (sscanf(line, "sync %d = %lf %lf %lf", &k, &chunk, &pair, &all) == 4 && k == c->sync_points && k < 8)
            c->sync_chunk_s[k] = chunk, c->sync_loss_s[0][k] = pair, c->sync_loss_s[1][k] = all, c->sync_points++;
        sscanf(line, "rank_baseline_mb = %lf", &c->rank_baseline_mb);
        sscanf(line, "adamw_ns = %lf", &ns);
        double z[4];
        if (sscanf(line, "zero = %lf %lf %lf %lf", &z[0], &z[1], &z[2], &z[3]) == 4)
            for (int i = 0; i < 4; i++) c->zero_s[i / 2][i % 2] = z[i] * 1e-9 / 1024;
        if (f->nshapes < PLAN_MAX_SHAPES &&
            sscanf(line, "kernels %d %d %d %d = %lf %lf %lf %lf %lf %lf %lf", &st.B, &st.cp, &st.tp, &st.sp,
                   &t->layer_f, &t->layer_b_input, &t->layer_b_weight, &t->embed_f, &t->embed_b, &t->head_f,
                   &t->head_b) == 11)
            f->shapes[f->nshapes++] = st;
    }
    int rc = p ? pclose(p) : -1;
    unlink(shapes);
    if (rc != 0 || !(ns > 0))
        die_usage("--cluster local: measuring this machine over %d rank%s failed (%s): %s", c->devices_per_node,
                  c->devices_per_node > 1 ? "s (mpirun)" : "", cmd, last);
    f->adamw_s = ns * 1e-9;
    // (the links: the all-reduce's figures; the pipeline's transfers, point to point, use them)
    c->intra_gbs = c->inter_gbs = c->op_gbs[PLAN_ALL_REDUCE], c->intra_us = c->inter_us = c->op_us[PLAN_ALL_REDUCE];
}

// --- enumeration ---

static void plan_add(PlanList *pl, const PlanProblem *pb, const PlanLayout *l) {
    if (pl->n == pl->cap) {
        pl->cap = pl->cap ? 2 * pl->cap : 256;
        pl->r = (PlanResult *)reallocCheck(pl->r, sizeof(PlanResult) * (size_t)pl->cap);
    }
    PlanResult *r = &pl->r[pl->n++];
    memset(r, 0, sizeof(*r));
    r->l = *l;
    PPLayout ppl;
    if (!plan_check_layout(pb, &r->l, &ppl, r->why_not, sizeof(r->why_not), &r->why_kind) && l->pp > 1)
        pp_layout_free(&ppl);
}

// Bytes a rank may hold for the model: a device's memory, or on the local cluster the host's shared by
// the ranks less each one's measured baseline.
static double rank_memory_available(const Cluster *c, int world) {
    return c->memory_gb * 1e9 / (c->local ? world : 1) - c->rank_baseline_mb * 1e6;
}

// A layout the trainers take: its memory (every rank's; ranks of the same tensor and pipeline
// coordinates alike), whether it fits, and its predicted step (also when it does not fit, with
// predict_anyway: --layout says both).
static void plan_finish(PlanResult *r, const PlanProblem *pb, int predict_anyway) {
    if (r->why_not[0]) return;
    const PlanLayout *l = &r->l;
    PPLayout ppl;
    memset(&ppl, 0, sizeof(ppl));
    plan_check_layout(pb, l, &ppl, r->why_not, sizeof(r->why_not), &r->why_kind);
    int world = plan_world(l);
    PPRankSets *sets = NULL;
    if (l->pp > 1) {
        sets = (PPRankSets *)mallocCheck(sizeof(PPRankSets) * (size_t)l->pp);
        plan_pipeline_sets(pb, l, &ppl, sets);
    }
    for (int rank = 0; rank < l->cp * l->tp * l->pp; rank++) {
        RankMemory m = plan_rank_memory(pb, l, &ppl, sets, rank);
        if (rank == 0) r->mem0 = m;
        if (rank_memory_total(&m) > r->mem_max) r->mem_max = rank_memory_total(&m);
    }
    free(sets);
    double have = rank_memory_available(pb->cluster, world);
    if (r->mem_max > have) r->why_kind = PLAN_REJ_MEMORY;
    if (r->mem_max > have)
        snprintf(r->why_not, sizeof(r->why_not), "does not fit: %.2f GB a rank, %.2f GB %s", r->mem_max / 1e9,
                 have / 1e9, pb->cluster->local ? "available a rank (the host's, shared)" : "a device");
    if (r->mem_max <= have || predict_anyway) plan_predict(pb, r, &ppl);
    if (l->pp > 1) pp_layout_free(&ppl);
}

// Every layout of world ranks: dp x cp x tp x pp = world, ZeRO 0-3 (0 only with one replica, data x
// context: the stages are then the same), sequence parallel with tp > 1, each schedule with pp > 1
// (interleaved with 2 .. L/pp chunks), B up to max_b each power of two and each divisor of a data rank's
// sequences, --recompute none, selective and full (every layer).
static void plan_enumerate(PlanList *pl, const PlanProblem *pb, int world, int max_b) {
    const int recomputes = 3;
    for (int tp = 1; tp <= world; tp++) {
        if (world % tp) continue;
        for (int pp = 1; pp <= world / tp; pp++) {
            if ((world / tp) % pp) continue;
            for (int cp = 1; cp <= world / tp / pp; cp++) {
                if ((world / tp / pp) % cp) continue;
                int dp = world / tp / pp / cp;
                for (int sp = 0; sp <= (tp > 1); sp++)
                    for (int kind = 0; kind < (pp > 1 ? 4 : 1); kind++) {
                        int vmax = kind == PP_INTERLEAVED ? (pb->cfg->num_layers / pp > 2 ? pb->cfg->num_layers / pp : 2)
                                                          : 1;
                        for (int v = kind == PP_INTERLEAVED ? 2 : 1; v <= vmax; v++)
                            for (int zero = 0; zero <= (dp * cp > 1 ? 3 : 0); zero++)
                                for (int B = 1; B <= max_b; B++)
                                    for (int rc = 0; rc < recomputes; rc++) {
                                        long long seqs = pb->total_tokens / pb->T / dp;
                                        if ((B & (B - 1)) &&
                                            !(pb->total_tokens % ((long long)pb->T * dp) == 0 && seqs % B == 0))
                                            continue;  // (neither a power of two nor a divisor)
                                        long long micro = (long long)B * pb->T * dp;
                                        PlanLayout l = {dp, tp, pp, sp, zero, pp > 1 ? (PPKind)kind : PP_1F1B, v, B,
                                                        pb->total_tokens % micro ? 0 : (int)(pb->total_tokens / micro),
                                                        (RecomputeKind)rc, cp};
                                        plan_add(pl, pb, &l);
                                    }
                    }
            }
        }
    }
}

// --- printing ---

static const char *layout_text(const PlanLayout *l, char *buf, size_t n) {
    char sched[48] = "-";
    if (l->pp > 1) {
        if (l->v > 1) snprintf(sched, sizeof(sched), "%s:%d", pp_kind_names[l->schedule], l->v);
        else snprintf(sched, sizeof(sched), "%s", pp_kind_names[l->schedule]);
    }
    char cp[16] = "";
    if (l->cp > 1) snprintf(cp, sizeof(cp), " cp %d", l->cp);
    snprintf(buf, n, "dp %d%s tp %d%s pp %d %-13s ZeRO-%d B %d x %d%s", l->dp, cp, l->tp, l->sp ? "+sp" : "   ", l->pp,
             sched, l->zero, l->B, l->accum, l->recompute == RECOMPUTE_FULL ? " rcfull" : l->recompute ? " rcsel" : "");
    return buf;
}

// How much simpler a layout is to run and debug (fewer parallel dimensions, less recomputation, a lighter
// ZeRO stage): the order among ties.
static int layout_complexity(const PlanLayout *l) {
    return (l->tp > 1) + (l->pp > 1) + (l->cp > 1) + l->sp + (l->recompute > 0) + (l->zero >= 2) + (l->zero == 3);
}
static int by_simplicity(const void *a, const void *b) {
    const PlanResult *x = (const PlanResult *)a, *y = (const PlanResult *)b;
    int cx = layout_complexity(&x->l), cy = layout_complexity(&y->l);
    if (cx != cy) return cx - cy;
    if (x->mem_max != y->mem_max) return x->mem_max < y->mem_max ? -1 : 1;
    return x->t.total < y->t.total ? -1 : x->t.total > y->t.total;
}

// The model's own error between two layouts: closer than this they are a tie. Local: the CPU check's
// step-time MAPE (scripts/plan_check.sh); GPU clusters: the spread of the predicted/published ratio over
// the runs of one implementation (llm.c's four in scripts/plan_validate.sh: 0.81-0.87, +-3.5%), rounded
// up. (The ratio's offset from 1 is the same for every layout of one trainer: it moves no ranking.)
#define PLAN_TIE_LOCAL 0.115
#define PLAN_TIE_GPU 0.05
static double plan_model_error(const Cluster *c) { return c->local ? PLAN_TIE_LOCAL : PLAN_TIE_GPU; }

// The valid layouts (sorted by speed) within the model's error of the fastest, ordered simplest and
// smallest first; returns how many.
static int order_ties(PlanResult *r, int valid, double error) {
    int n = 0;
    while (n < valid && r[n].t.total <= r[0].t.total * (1 + error)) n++;
    qsort(r, (size_t)n, sizeof(PlanResult), by_simplicity);
    return n;
}

// The command that runs layout l with the trainer (printed for the user to copy).
static void print_command(const PlanOptions *o, const GPTConfig *cfg, const Cluster *c, const PlanLayout *l) {
    int world = plan_world(l);
    printf("  run it: ");
    if (world > 1) printf("mpirun -np %d ", world);
    if (c->nodes > 1) printf("-npernode %d --hostfile HOSTS ", c->devices_per_node);
    printf("./%s --data-train 'DATA/*_train_*.bin'", c->cpu_trainer ? "train_gpt" : "train_gptcu");
    if (o->train.n_layer || o->train.n_embd || o->train.n_head || o->train.vocab_size || o->train.max_seq_len)
        printf(" --n-layer %d --n-embd %d --n-head %d --vocab-size %d --max-seq-len %d", cfg->num_layers,
               cfg->channels, cfg->num_heads, cfg->vocab_size, cfg->max_seq_len);
    else
        printf(" --model %s", o->train.model);
    printf(" --seq-len %d --total-batch-tokens %lld --batch-size %d --zero %d", o->train.seq_len,
           o->train.total_batch_tokens, l->B, l->zero);
    if (l->cp > 1) printf(" --cp %d", l->cp);
    if (l->tp > 1) printf(" --tp %d%s", l->tp, l->sp ? " --sequence-parallel 1" : "");
    if (l->pp > 1) printf(" --pp %d --pp-schedule %s --virtual-stages %d", l->pp, pp_kind_names[l->schedule], l->v);
    RecomputePolicy rp = {l->recompute, 1};
    char rc[32];
    if (l->recompute) printf(" --recompute %s", recompute_name(&rp, rc, sizeof(rc)));
    printf("\n");
}

static void print_legend(const Cluster *c) {
    printf("  legend: dp/cp/tp/pp: data, context (shown when over 1), tensor, pipeline ranks; +sp: sequence parallel; the schedule ('-': none, one "
           "stage; interleaved:v: v chunks a rank); ZeRO-n: the stage; B 64 x 4: micro-batches of 64 sequences, 4 "
           "of them a step on each data rank; %s; prices in %s a device-hour\n",
           c->cpu_trainer ? "rcsel: --recompute selective (attention's probabilities and GELU recomputed in the "
                            "backward), rcfull: --recompute full (each layer's forward again), none shown: none"
                          : "rcsel: --recompute selective (GELU recomputed in the backward), rcfull: --recompute full "
                            "(each layer's forward again), none shown: none",
           c->currency);
}

// The least memory a rank of any layout the trainers take needs (fitting or not), without context parallel
// and with it: below the first, only context parallel fits the model at this sequence length.
static void print_context_need(const PlanResult *r, int n) {
    double least[2] = {0, 0};
    for (int i = 0; i < n; i++) {
        int k = r[i].l.cp > 1;
        if ((!r[i].why_not[0] || r[i].why_kind == PLAN_REJ_MEMORY) && (least[k] == 0 || r[i].mem_max < least[k]))
            least[k] = r[i].mem_max;
    }
    if (least[0] > 0 && least[1] > 0)
        printf("  memory a rank, the least of any layout: %.2f GB without context parallel, %.2f GB with it%s\n",
               least[0] / 1e9, least[1] / 1e9, least[1] < least[0] ? " (below the first only context parallel fits)" : "");
}

// The rejected layouts grouped by reason: a count each and up to `list` of them (0: all).
static void print_rejected(const PlanResult *r, int n, int list) {
    int count[PLAN_REJECTS] = {0};
    for (int i = 0; i < n; i++) count[r[i].why_kind]++;
    printf("  rejected, by reason:\n");
    char buf[160];
    for (int k = 1; k < PLAN_REJECTS; k++) {
        if (!count[k]) continue;
        printf("    %5d  %s%s\n", count[k], plan_reject_names[k], list && count[k] > list ? ", e.g." : ":");
        for (int i = 0, shown = 0; i < n && (list == 0 || shown < list); i++)
            if (r[i].why_kind == k) {
                printf("             %s: %s\n", layout_text(&r[i].l, buf, sizeof(buf)), r[i].why_not);
                shown++;
            }
    }
}

// --layout: the spec's layout (die_usage on a bad one; the world it needs into *world).
static PlanLayout parse_layout(const char *spec, const PlanProblem *pb) {
    PlanLayout l = {1, 1, 1, 0, 0, PP_1F1B, 1, 1, 0, 0, 1};
    char buf[FLAG_STR_MAX];
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) die_usage("--layout: '%s' is not key=value (keys dp, tp, pp, cp, zero, mb, schedule, v, sp, recompute)", kv);
        *eq = '\0';
        const char *k = kv, *v = eq + 1;
        char *end = NULL;
        long x = strtol(v, &end, 10);
        int num = *v && *end == '\0' && x >= 0 && x <= (1 << 20);
        if (strcmp(k, "schedule") == 0) {
            char kind[32];
            int chunks = 1;
            if (sscanf(v, "%31[^:]:%d", kind, &chunks) < 1) die_usage("--layout: schedule=%s", v);
            int found = -1;
            for (int i = 0; i < 4; i++)
                if (strcmp(kind, pp_kind_names[i]) == 0) found = i;
            if (found < 0) die_usage("--layout: schedule=%s: want gpipe, 1f1b, zb1p or interleaved[:chunks]", v);
            l.schedule = (PPKind)found, l.v = found == PP_INTERLEAVED ? (chunks > 1 ? chunks : 2) : 1;
        } else if (strcmp(k, "recompute") == 0) {
            RecomputePolicy rp;
            if (!recompute_parse(v, &rp) || rp.every != 1)
                die_usage("--layout: recompute=%s: want none, selective or full", v);
            l.recompute = rp.kind;
        } else if (!num) {
            die_usage("--layout: %s=%s: want a whole number", k, v);
        } else if (strcmp(k, "dp") == 0) l.dp = (int)x;
        else if (strcmp(k, "tp") == 0) l.tp = (int)x;
        else if (strcmp(k, "pp") == 0) l.pp = (int)x;
        else if (strcmp(k, "cp") == 0) l.cp = (int)x;
        else if (strcmp(k, "zero") == 0) l.zero = (int)x;
        else if (strcmp(k, "mb") == 0) l.B = (int)x;
        else if (strcmp(k, "v") == 0) l.v = (int)x;
        else if (strcmp(k, "sp") == 0) l.sp = (int)x;
        else die_usage("--layout: unknown key '%s' (dp, tp, pp, cp, zero, mb, schedule, v, sp, recompute)", k);
    }
    if (l.dp < 1 || l.cp < 1 || l.tp < 1 || l.pp < 1 || l.B < 1 || l.zero > 3 || l.sp > 1 || l.v < 1)
        die_usage("--layout: want dp, cp, tp, pp, mb >= 1, zero 0-3, sp 0|1, v >= 1");
    long long ranks = (long long)l.dp * l.cp * l.tp * l.pp;
    if (ranks > CLUSTER_MAX_RANKS) die_usage("--layout: dp x cp x tp x pp = %lld ranks, more than %d", ranks, CLUSTER_MAX_RANKS);
    if (l.pp == 1) l.v = 1;
    long long micro = (long long)l.B * pb->T * l.dp;
    l.accum = pb->total_tokens % micro ? 0 : (int)(pb->total_tokens / micro);
    return l;
}

// --layout: where the step of one valid layout goes, kernel family by family and collective by collective.
static void print_explain(const PlanOptions *o, const PlanProblem *pb, const PlanResult *r, int world) {
    const Cluster *c = pb->cluster;
    const PlanLayout *l = &r->l;
    const PlanTime *t = &r->t;
    const PlanComm *pc = &r->comm;
    double flops_step = gpt_flops_per_token(pb->cfg, pb->T) * (double)pb->total_tokens;
    printf("  predicted step %.1f ms = fwd %.1f + bwd %.1f + comm %.1f + bubble %.1f + opt %.1f | %.0f tokens/s | "
           "MFU %.1f%% | %.2f GB a rank (the largest)\n", t->total * 1e3, t->fwd * 1e3, t->bwd * 1e3, t->comm * 1e3,
           t->bubble * 1e3, t->opt * 1e3, r->tokens_per_s, 100 * flops_step / t->total / (c->peak_tflops * 1e12 * world),
           r->mem_max / 1e9);
    double layers = (double)pb->cfg->num_layers / l->pp, passes = (double)l->accum;
    if (!c->local) {
        PlanKernelBook bk;
        plan_gpu_kernels_book(c, pb->cfg, l->B, pb->T, l->cp, l->tp, l->sp, l->recompute, &bk);
        // rank 0: its layers, the embedding, and the classifier when it is the only stage
        double count[PLAN_KPARTS] = {layers, layers, layers, 1, 1, l->pp == 1, l->pp == 1};
        double fam[PLAN_FAMILIES] = {0}, sum = 0, launches = 0;
        for (int p = 0; p < PLAN_KPARTS; p++) {
            for (int f = 0; f < PLAN_FAMILIES; f++) fam[f] += bk.s[p][f] * count[p] * passes, sum += bk.s[p][f] * count[p] * passes;
            launches += bk.launches[p] * count[p] * passes;
        }
        printf("  compute of rank 0 a step (%d micro-batch%s x %.4g layer%s%s), by kernel family:\n", l->accum,
               l->accum == 1 ? "" : "es", layers, layers == 1 ? "" : "s",
               l->pp == 1 ? " + the embedding and classifier" : " + the embedding");
        for (int f = 0; f < PLAN_FAMILIES; f++)
            if (fam[f] > 0) printf("    %-22s %9.2f ms  %5.1f%%\n", plan_family_names[f], fam[f] * 1e3, 100 * fam[f] / sum);
        printf("    (%.0f kernels, each with a %.1f us launch gap: %.2f ms of the above)\n", launches, c->launch_us,
               launches * c->launch_us * 1e-3);
    }
    printf("  communication a step:\n");
    if (l->tp > 1)
        printf("    tensor parallel: %s over %d ranks inside F and B (not overlapped): %.2f ms\n",
               l->sp ? "all-gathers and reduce-scatters" : "all-reduces of the partial sums (fp32)", l->tp, pc->tp_s * 1e3);
    if (l->cp > 1)
        printf("    context parallel over %d ranks on %d node%s: all-gather of K and V (%.1f MB a layer) forward, "
               "reduce-scatter of their gradients backward (NCCL %s), inside F and B (not overlapped): %.2f ms\n",
               l->cp, pc->cp_group.nodes, pc->cp_group.nodes > 1 ? "s" : "", pc->cp_bytes / 1e6,
               plan_algo_names[pc->cp_algo], pc->cp_s * 1e3);
    if (l->pp > 1)
        printf("    pipeline: a transfer of a micro-batch's activations %.3f ms; the bubble %.2f ms\n", pc->xfer_s * 1e3,
               t->bubble * 1e3);
    if (pc->dp_group.p > 1) {
        const char *rname = l->zero == 0 ? "all-reduce" : "reduce-scatter";
        printf("    data parallel over %d ranks%s on %d node%s: ZeRO-%d %s of %.1f MB of fp32 gradients %s (%d calls, "
               "NCCL %s): %.2f ms, %.2f ms not hidden behind the backward\n", pc->dp_group.p,
               l->cp > 1 ? " (data x context)" : "", pc->dp_group.nodes,
               pc->dp_group.nodes > 1 ? "s" : "", l->zero, rname, pc->reduce_bytes / 1e6,
               l->zero >= 2 ? "every micro-batch" : "once a step", pc->reduce_calls, plan_algo_names[pc->reduce_algo],
               pc->reduce_s * 1e3, pc->reduce_exposed_s * 1e3);
        if (l->zero >= 1)
            printf("    data parallel: all-gather of %.1f MB of %s weights %s (%d calls, NCCL %s): %.2f ms, %.2f ms not "
                   "hidden\n", pc->gather_bytes / 1e6, c->cpu_trainer ? "fp32" : "bf16",
                   l->zero == 3 ? "before each forward and backward" : "after the update", pc->gather_calls,
                   plan_algo_names[pc->gather_algo], pc->gather_s * 1e3, pc->gather_exposed_s * 1e3);
    }
    if (plan_world(l) == 1) printf("    none (one rank)\n");
    printf("  optimizer (AdamW, the gradient norm) over %.1fM elements: %.2f ms\n", r->mem0.optimizer / 8 / 1e6,
           t->opt * 1e3);
    printf("  memory of rank 0: weights %.2f GB, gradients %.2f GB, AdamW %.2f GB, activations %.2f GB\n",
           r->mem0.params / 1e9, r->mem0.grads / 1e9, r->mem0.optimizer / 1e9, r->mem0.activations / 1e9);
    print_command(o, pb->cfg, c, l);
}

static int by_speed(const void *a, const void *b) {
    const PlanResult *x = (const PlanResult *)a, *y = (const PlanResult *)b;
    int xv = !x->why_not[0], yv = !y->why_not[0];
    if (xv != yv) return yv - xv;
    if (!xv) return 0;
    return x->t.total < y->t.total ? -1 : x->t.total > y->t.total;
}

// Why a layout ranks where it does: its time's largest parts and its memory headroom.
static void print_reasons(const PlanResult *r, const PlanResult *next, const Cluster *c, int world, double tie_with) {
    const PlanTime *t = &r->t;
    double compute = t->fwd + t->bwd;
    printf("        compute %.0f%%, communication %.0f%%, pipeline bubble %.0f%%, optimizer %.0f%% of the step",
           100 * compute / t->total, 100 * t->comm / t->total, 100 * t->bubble / t->total, 100 * t->opt / t->total);
    double have = rank_memory_available(c, world);
    printf("; %.2f of %.2f GB a rank", r->mem_max / 1e9, have / 1e9);
    if (tie_with > 0) printf("; a tie: %.1f%% from the fastest", 100 * (t->total / tie_with - 1));
    else if (next) printf("; %.1f%% faster than the next", 100 * (next->t.total / t->total - 1));
    printf("\n");
}

static void print_cluster(const Cluster *c, int world) {
    printf("cluster %s: %d node%s x %d %s = %d ranks | peak %.2f TFLOP/s a device%s | memory %.1f GB%s | "
           "links %.2f GB/s %.1f us inside a node",
           c->name, c->nodes, c->nodes > 1 ? "s" : "", c->devices_per_node, c->cpu_trainer ? "CPU ranks" : "devices", world,
           c->peak_tflops, c->local ? " (sgemm, measured)" : "", c->memory_gb,
           c->local ? " (available, shared)" : " a device", c->intra_gbs, c->intra_us);
    if (c->nodes > 1) printf(", %.2f GB/s %.1f us between", c->inter_gbs, c->inter_us);
    if (c->local)
        printf(" (measured) | %d cores%s", c->cores, c->devices_per_node > c->cores ? ", shared" : "");
    if (c->local) printf(" | %.1f MB a rank besides the model", c->rank_baseline_mb);
    if (c->local && c->sync_points)
        printf(" | a synchronisation loses %.0f .. %.0f us (2 ranks), %.0f .. %.0f us (all) for %.2f .. %.2f ms of "
               "compute between", c->sync_loss_s[0][0] * 1e6, c->sync_loss_s[0][c->sync_points - 1] * 1e6,
               c->sync_loss_s[1][0] * 1e6, c->sync_loss_s[1][c->sync_points - 1] * 1e6, c->sync_chunk_s[0] * 1e3,
               c->sync_chunk_s[c->sync_points - 1] * 1e3);
    printf(" | %.2f %s a device-hour\n", c->price_per_hour, c->currency);
    if (!c->local)
        printf("  GPU model: GEMMs at %.0f TFLOP/s (%.2f of the peak) in %dx%d tiles over %d SMs, attention at %.2f of "
               "the peak, memory-bound kernels at %.0f GB/s, %.1f us between kernels; NCCL ring %.0f GB/s%s%s a node, "
               "network %.0f GB/s %.1f us a device, tree at %.2f of the ring\n", c->peak_tflops * c->matmul_eff,
               c->matmul_eff, c->tile_m, c->tile_n, c->sms, c->attention_eff, c->hbm_gbs * c->hbm_eff, c->launch_us,
               c->intra_gbs, c->nvls_gbs > 0 ? ", NVLS " : "", c->nvls_gbs > 0 ? "(all-reduce)" : "", c->inter_gbs,
               c->inter_us, c->tree_eff);
}

// Said after every GPU cluster: no run has confirmed these figures.
static void gpu_caveat(void) {
    printf("  NOTE: GPU figures are predictions that no run of this trainer has confirmed (it has not run on a GPU): "
           "the kernels at the rates published microbenchmarks reach. Against 17 published runs "
           "(scripts/plan_validate.sh) they are optimistic: the runs took 1.15-1.8x the predicted step, llm.c's "
           "1.15-1.24x.\n");
}

static void csv_rows(AtomicOut *f, const Cluster *c, const PlanList *pl) {
    for (int i = 0; i < pl->n; i++) {
        const PlanResult *r = &pl->r[i];
        const PlanLayout *l = &r->l;
        RecomputePolicy rp = {l->recompute, 1};
        char rc[32];
        atomic_out_printf(f, "%s,%d,%d,%d,%d,%d,%d,%s,%d,%d,%d,%s,%d,\"%s\",%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.1f,%.4f,%.4f,"
                          "%.4f,%.4f,%.4f,%.4f,%.1f\n", c->name, l->dp, l->cp, l->tp, l->pp, l->sp, l->zero,
                          l->pp > 1 ? pp_kind_names[l->schedule] : "-", l->v, l->B, l->accum,
                          recompute_name(&rp, rc, sizeof(rc)),
                          !r->why_not[0], r->why_not, r->t.total * 1e3, r->t.fwd * 1e3, r->t.bwd * 1e3,
                          r->t.comm * 1e3, r->t.bubble * 1e3, r->t.opt * 1e3, r->tokens_per_s, r->mem0.params / 1e6,
                          r->mem0.grads / 1e6, r->mem0.optimizer / 1e6, r->mem0.activations / 1e6,
                          r->mem0.tied / 1e6, r->mem_max / 1e6, c->rank_baseline_mb);
    }
}

int main(int argc, char **argv) {
    PlanOptions o;
    memset(&o, 0, sizeof(o));
    flags_parse(argc, argv, PLAN_FLAGS, FLAGS_COUNT(PLAN_FLAGS), &o, SUMMARY);
    snprintf(o.train.pp_schedule, FLAG_STR_MAX, "1f1b");
    int from_file;
    GPTConfig cfg = train_build_config(&o.train, &from_file);
    int T = o.train.seq_len;
    if (o.measure_local[0]) {
        plan_measure_local(&cfg, T, o.measure_local, &argc, &argv);
        return 0;
    }
    if (T > cfg.max_seq_len) die_usage("--seq-len %d exceeds the model's max-seq-len %d", T, cfg.max_seq_len);
    if (o.train.total_batch_tokens <= 0) die_usage("--total-batch-tokens is required (tokens per optimizer step)");
    ParamLayout whole;
    param_layout_init(&whole, &cfg);
    double params = (double)whole.num_params;
    param_layout_free(&whole);
    double run_tokens = o.train_tokens > 0 ? (double)o.train_tokens : 20.0 * params;
    printf("model: %d layers, %d channels, %d heads, vocabulary %d (%.2fM parameters) | seq-len %d | %lld tokens a "
           "step | a run of %.3g tokens\n", cfg.num_layers, cfg.channels, cfg.num_heads, cfg.vocab_size, params / 1e6, T,
           o.train.total_batch_tokens, run_tokens);
    // every cluster loaded before any is planned (a bad file stops the planner at once); --csv names no input
    Cluster clusters[PLAN_MAX_CLUSTERS];
    int nclusters = 0;
    char list[FLAG_STR_MAX];
    snprintf(list, sizeof(list), "%s", o.cluster);
    for (char *save = NULL, *spec = strtok_r(list, ",", &save); spec; spec = strtok_r(NULL, ",", &save)) {
        if (nclusters == PLAN_MAX_CLUSTERS) die_usage("--cluster: at most %d clusters", PLAN_MAX_CLUSTERS);
        char err[512];
        if (cluster_load(spec, &clusters[nclusters], err, sizeof(err))) die_usage("%s", err);
        if (clusters[nclusters++].from_file) output_refuse_input(o.csv, "--csv", spec, "--cluster");
    }
    if (from_file) output_refuse_input(o.csv, "--csv", o.train.model, "--model");
    AtomicOut csv;  // (written whole, then renamed over any old one)
    if (o.csv[0]) {
        atomic_out_open(&csv, o.csv);
        atomic_out_printf(&csv, "cluster,dp,cp,tp,pp,sp,zero,schedule,v,B,accum,recompute,valid,why_not,step_ms,fwd_ms,"
                          "bwd_ms,comm_ms,bubble_ms,opt_ms,tokens_per_s,mem0_params_mb,mem0_grads_mb,"
                          "mem0_optimizer_mb,mem0_activations_mb,mem0_tied_mb,mem_max_mb,baseline_mb\n");
    }
    struct { char name[64]; int devices; double tok_s, price; int found; char layout[160]; char currency[8]; }
    best[PLAN_MAX_CLUSTERS];
    for (int ci = 0; ci < nclusters; ci++) {
        Cluster c = clusters[ci];
        if (o.nodes > 0) c.nodes = o.nodes;
        if (c.local) {
            if (c.nodes > 1) die_usage("--nodes %d: the local cluster is this one machine", c.nodes);
            c.cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
            c.devices_per_node = o.devices_per_node > 0 ? o.devices_per_node : c.cores;
            c.memory_gb = host_memory_available() / 1e9;
            matmul_set_backend("auto");  // the kernels the trainer's default --matmul takes
            c.peak_tflops = matmul_measure_peak_gflops(512, 5) / 1e3;
            c.matmul_eff = 1.0, c.hbm_gbs = 1.0;  // (the kernels are measured instead)
        } else if (o.devices_per_node > 0) {
            c.devices_per_node = o.devices_per_node;
        }
        if (o.price_per_hour > 0) c.price_per_hour = o.price_per_hour;
        static LocalFigures lf;
        GpuKernels gk = {&c, &cfg, T};
        PlanProblem pb = {&cfg, T, o.train.total_batch_tokens, &c, c.local ? local_kernels : gpu_kernels,
                          c.local ? (void *)&lf : (void *)&gk, 32.0 / (c.hbm_gbs * 1e9)};
        PlanLayout pinned;
        if (o.layout[0]) {  // the layout's world sets the nodes (unless --nodes did)
            pinned = parse_layout(o.layout, &pb);
            int want = plan_world(&pinned);
            if (want <= c.devices_per_node && o.nodes == 0) c.devices_per_node = want, c.nodes = 1;
            else if (o.nodes == 0 && want % c.devices_per_node == 0) c.nodes = want / c.devices_per_node;
            if ((long long)c.nodes * c.devices_per_node != want)
                die_usage("--layout: dp x cp x tp x pp = %d ranks, but cluster %s has %d nodes x %d devices", want, c.name,
                          c.nodes, c.devices_per_node);
        }
        int world = cluster_ranks(&c);
        PlanList pl = {NULL, 0, 0};
        if (o.layout[0]) plan_add(&pl, &pb, &pinned);
        else plan_enumerate(&pl, &pb, world, o.max_micro_batch);
        if (c.local) {
            measure_local(&c, &pl, argc, argv, &lf);
            pb.adamw_s_per_elem = lf.adamw_s;
        }
        print_cluster(&c, world);
        for (int i = 0; i < pl.n; i++) plan_finish(&pl.r[i], &pb, o.layout[0] != '\0');
        if (o.csv[0]) csv_rows(&csv, &c, &pl);
        char buf[160];
        if (o.layout[0]) {
            printf("  layout %s\n", layout_text(&pl.r[0].l, buf, sizeof(buf)));
            const PlanResult *r = &pl.r[0];
            if (r->why_not[0]) printf("  rejected: %s%s\n", r->why_not,
                                      r->why_kind == PLAN_REJ_MEMORY ? " (predicted all the same below)" : "");
            if (!r->why_not[0] || r->why_kind == PLAN_REJ_MEMORY) print_explain(&o, &pb, r, world);
            print_legend(&c);
            if (!c.local) gpu_caveat();
            best[ci].found = 0;
            snprintf(best[ci].name, sizeof(best[0].name), "%s", c.name);
            best[ci].devices = world, best[ci].price = c.price_per_hour;
            if (!r->why_not[0]) {
                best[ci].found = 1, best[ci].tok_s = r->tokens_per_s;
                layout_text(&pl.r[0].l, best[ci].layout, sizeof(best[0].layout));
            }
            snprintf(best[ci].currency, sizeof(best[0].currency), "%s", c.currency);
            free(pl.r);
            continue;
        }
        qsort(pl.r, (size_t)pl.n, sizeof(PlanResult), by_speed);
        int valid = 0;
        while (valid < pl.n && !pl.r[valid].why_not[0]) valid++;
        printf("  %d layouts: %d valid, %d rejected\n", pl.n, valid, pl.n - valid);
        double flops_step = gpt_flops_per_token(&cfg, T) * (double)o.train.total_batch_tokens;
        double fastest = valid ? pl.r[0].t.total : 0, error = plan_model_error(&c);
        int ties = valid ? order_ties(pl.r, valid, error) : 0;
        if (valid) printf("  best (predicted): step ms = fwd + bwd + comm + bubble + opt | tokens/s | MFU | memory "
                          "a rank (the largest)\n");
        if (ties > 1)
            printf("  (%d layouts lie within the model's error, %.0f%%, of the fastest: a tie, listed simplest and "
                   "smallest in memory first)\n", ties, 100 * error);
        for (int i = 0; i < valid && i < o.top; i++) {
            const PlanResult *r = &pl.r[i];
            double mfu = flops_step / r->t.total / (c.peak_tflops * 1e12 * world);
            printf("  %2d. %s | %.1f = %.1f + %.1f + %.1f + %.1f + %.1f | %.0f | %.1f%% | %.2f GB\n", i + 1,
                   layout_text(&r->l, buf, sizeof(buf)), r->t.total * 1e3, r->t.fwd * 1e3, r->t.bwd * 1e3,
                   r->t.comm * 1e3, r->t.bubble * 1e3, r->t.opt * 1e3, r->tokens_per_s, 100 * mfu, r->mem_max / 1e9);
            print_reasons(r, i + 1 < valid ? &pl.r[i + 1] : NULL, &c, world, i < ties ? fastest : 0);
        }
        if (valid) print_command(&o, &cfg, &c, &pl.r[0].l);
        print_legend(&c);
        print_context_need(pl.r, pl.n);
        if (pl.n > valid) print_rejected(pl.r + valid, pl.n - valid, o.rejected);
        if (!c.local) gpu_caveat();
        snprintf(best[ci].name, sizeof(best[0].name), "%s", c.name);
        snprintf(best[ci].currency, sizeof(best[0].currency), "%s", c.currency);
        best[ci].devices = world, best[ci].price = c.price_per_hour, best[ci].found = valid > 0;
        best[ci].tok_s = valid ? pl.r[0].tokens_per_s : 0;
        if (valid) layout_text(&pl.r[0].l, best[ci].layout, sizeof(best[0].layout));
        free(pl.r);
    }
    printf("a run of %.3g tokens, the best layout on each cluster:\n", run_tokens);
    printf("  %-16s %8s %14s %12s %12s  layout\n", "cluster", "devices", "tokens/s", "hours", "cost");
    // (the cost in each cluster's currency: the presets' USD, a file's `currency`)
    for (int i = 0; i < nclusters; i++) {
        if (!best[i].found) {
            printf("  %-16s %8d   no layout fits\n", best[i].name, best[i].devices);
            continue;
        }
        double hours = run_tokens / best[i].tok_s / 3600.0;
        printf("  %-16s %8d %14.0f %12.2f %8.2f %-3s  %s\n", best[i].name, best[i].devices, best[i].tok_s, hours,
               hours * best[i].devices * best[i].price, best[i].currency, best[i].layout);
    }
    if (o.csv[0]) atomic_out_commit(&csv);
    return 0;
}
