// test_tp_layers.c: each tensor-parallel communication pattern of the CPU
// model (llmc/gpt_cpu.h over llmc/tensor_parallel.h) on its own, against the
// unsplit computation every rank also does: the column-parallel linear layer
// (forward on the rank's output columns; backward's input gradient completed
// over the group), the row-parallel one (forward's partial sums completed and
// the residual and bias added; backward on the rank's input columns), with
// and without sequence parallel (row slices gathered and reduce-scattered),
// the vocabulary-parallel embedding, and the vocabulary-parallel softmax
// cross-entropy (losses and the logits' gradient) and sampling; and the
// rank grid's arithmetic (llmc/comm.h). Run under
// mpirun with 2 or 4 ranks (tests/test_tensor_parallel.sh); alone it checks
// the one-rank case, where every pattern is the plain computation.
#include "llmc/comm.h"
#include "llmc/gpt_cpu.h"
#include "llmc/rand.h"
#include "tests/testing.h"

static void fill(Rng *rng, float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = (2.0f * rng_uniform(rng) - 1.0f) * scale;
}

// ||a - b|| / ||b|| over n values (testing.h's rel_error)
static double worst_rel(const float *a, const float *b, size_t n) { return rel_error(a, b, (long)n, 1e-12); }

// A model of the shape the patterns need (its weights are not used: each test passes its own).
static void tp_model(GPT *m, const GPTConfig *cfg, CommGroup *tg, int sp, int B, int T) {
    gpt_init_held(m, cfg, NULL, tg->size > 1 ? tp_context(tg, sp) : tp_none(), zero_sharding(0, 0, 1));
    gpt_alloc_activations(m, B, T);
}

static void test_linear(CommGroup *tg, int sp) {
    const int B = 2, T = 8, N = B * T, C = 16, K = 32, tp = tg->size, r = tg->rank;
    GPTConfig cfg = {T, 50, 64, 1, 4, C};
    GPT m;
    tp_model(&m, &cfg, tg, sp, B, T);
    Rng rng;
    rng_seed(&rng, 99);  // the same draws on every rank: the unsplit data
    float *x = (float *)mallocCheck(sizeof(float) * N * K), *w1 = (float *)mallocCheck(sizeof(float) * K * C);
    float *b1 = (float *)mallocCheck(sizeof(float) * C), *res = (float *)mallocCheck(sizeof(float) * N * C);
    float *dout = (float *)mallocCheck(sizeof(float) * N * K), *w2 = (float *)mallocCheck(sizeof(float) * C * K);
    fill(&rng, x, (size_t)N * K, 1), fill(&rng, w1, (size_t)K * C, 0.3f), fill(&rng, b1, C, 0.1f);
    fill(&rng, res, (size_t)N * C, 1), fill(&rng, dout, (size_t)N * K, 1), fill(&rng, w2, (size_t)C * K, 0.3f);
    int Kl = K / tp, Nl = tp_rows(&m.tp, N), r0 = tp_row0(&m.tp, N);

    // row-parallel: out (N,C) = res + b + x (N,K) @ w1 (C,K)^T; this rank has columns [r Kl, (r+1) Kl)
    float *want = (float *)mallocCheck(sizeof(float) * N * C), *out = (float *)mallocCheck(sizeof(float) * N * C);
    float *xl = (float *)mallocCheck(sizeof(float) * N * Kl), *w1l = (float *)mallocCheck(sizeof(float) * C * Kl);
    for (int c = 0; c < C; c++) memcpy(w1l + c * Kl, w1 + c * K + r * Kl, sizeof(float) * Kl);  // (C, K): its columns
    for (int i = 0; i < N; i++) memcpy(xl + i * Kl, x + i * K + r * Kl, sizeof(float) * Kl);
    linear_forward(want, x, w1, b1, res, N, K, C);
    gpt_row_parallel_forward(&m, &m.acts, out, xl, w1l, b1, res + (size_t)r0 * C, N, Kl, C);
    double e = worst_rel(out, want + (size_t)r0 * C, (size_t)Nl * C);
    test_result(e < 1e-5, "tp%d%s: row-parallel linear forward (its rows of the completed sum) matches the unsplit layer "
                "(worst %.1e)", tp, sp ? " sp" : "", e);

    // column-parallel: y (N,K) = x2 (N,C) @ w2 (K,C)^T, this rank's output columns [r Kl, ..) are w2's rows;
    // backward: dx2 (N,C) = dy @ w2, the rank's partial completed over the group
    float *dx_want = (float *)mallocCheck(sizeof(float) * N * C), *dx = (float *)mallocCheck(sizeof(float) * N * C);
    float *dyl = (float *)mallocCheck(sizeof(float) * N * Kl);
    for (int i = 0; i < N; i++) memcpy(dyl + i * Kl, dout + i * K + r * Kl, sizeof(float) * Kl);
    linear_backward_input(dx_want, dout, w2, N, C, K);
    linear_backward_input(dx, dyl, w2 + (size_t)r * Kl * C, N, C, Kl);
    gpt_column_parallel_complete(&m, &m.acts, dx, N, C);
    e = worst_rel(dx, dx_want + (size_t)r0 * C, (size_t)Nl * C);
    test_result(e < 1e-5, "tp%d%s: column-parallel linear input gradient, completed, matches the unsplit layer "
                "(worst %.1e)", tp, sp ? " sp" : "", e);

    // sequence parallel: the rank's rows gathered into the whole (the LayerNorm's output before a column-parallel layer)
    if (sp) {
        float *full = (float *)callocCheck((size_t)N * C, sizeof(float));
        memcpy(full + (size_t)r0 * C, res + (size_t)r0 * C, sizeof(float) * Nl * C);
        tp_gather_rows(&m.tp, full, N, C, COMM_F32);
        test_result(memcmp(full, res, sizeof(float) * N * C) == 0, "tp%d sp: the rows' all-gather rebuilds the whole", tp);
        free(full);
    }
    free(x), free(w1), free(b1), free(res), free(dout), free(w2), free(want), free(out), free(xl), free(w1l);
    free(dx_want), free(dx), free(dyl);
    tp_free(&m.tp);
    gpt_free(&m);
}

static void test_vocab(CommGroup *tg, int sp) {
    const int B = 2, T = 8, N = B * T, C = 16, V = 50, Vp = 64, tp = tg->size;
    GPTConfig cfg = {T, V, Vp, 1, 4, C};
    GPT m;
    tp_model(&m, &cfg, tg, sp, B, T);
    Rng rng;
    rng_seed(&rng, 7);
    float *logits = (float *)mallocCheck(sizeof(float) * N * V), *losses = (float *)mallocCheck(sizeof(float) * N);
    int targets[N], inputs[N];
    fill(&rng, logits, (size_t)N * V, 3);
    for (int i = 0; i < N; i++) targets[i] = (int)rng_below(&rng, V), inputs[i] = (int)rng_below(&rng, V);
    int v0, vreal;
    tp_vocab_slice(&cfg, &m.tp, &v0, &vreal);
    float *mine = (float *)mallocCheck(sizeof(float) * N * (vreal > 0 ? vreal : 1));
    float *got = (float *)mallocCheck(sizeof(float) * N);
    for (int i = 0; i < N; i++) memcpy(mine + (size_t)i * vreal, logits + (size_t)i * V + v0, sizeof(float) * vreal);
    const float dloss = 1.0f / N;
    double want_total = softmax_crossentropy(logits, losses, targets, N, V, dloss);  // logits -> dlogits
    double total = tp > 1 ? gpt_vocab_parallel_crossentropy(&m, mine, got, targets, N, vreal, v0, dloss)
                          : softmax_crossentropy(mine, got, targets, N, V, dloss);
    double e = worst_rel(got, losses, N), de = 0;
    for (int i = 0; i < N; i++) {
        double x = worst_rel(mine + (size_t)i * vreal, logits + (size_t)i * V + v0, (size_t)vreal);
        if (x > de) de = x;
    }
    test_result(e < 1e-5 && fabs(total - want_total) < 1e-4 * fabs(want_total) && de < 1e-4,
                "tp%d: vocabulary-parallel cross-entropy: losses (worst %.1e) and the slice's logit gradients "
                "(worst %.1e) match the whole vocabulary's", tp, e, de);

    // the embedding: a rank adds the rows of its vocabulary slice, the group completes, the positions follow
    GPTActivations *a = &m.acts;
    float *wte = m.params + param_tensor(&m.layout, PK_WTE, -1)->offset;
    float *wpe = m.params + param_tensor(&m.layout, PK_WPE, -1)->offset;
    float *full_wte = (float *)mallocCheck(sizeof(float) * Vp * C), *full_wpe = (float *)mallocCheck(sizeof(float) * T * C);
    fill(&rng, full_wte, (size_t)Vp * C, 1), fill(&rng, full_wpe, (size_t)T * C, 1);
    memcpy(wte, full_wte + (size_t)m.tp.rank * (Vp / tp) * C, sizeof(float) * (Vp / tp) * C);
    memcpy(wpe, full_wpe, sizeof(float) * T * C);
    float *want = (float *)mallocCheck(sizeof(float) * N * C);
    encoder_forward(want, inputs, full_wte, full_wpe, B, T, C);
    gpt_embedding_forward(&m, a, inputs, wpe, B, T);
    int Nl = tp_rows(&m.tp, N), r0 = tp_row0(&m.tp, N);
    test_result(memcmp(a->encoded, want + (size_t)r0 * C, sizeof(float) * Nl * C) == 0,
                "tp%d%s: vocabulary-parallel embedding gives the whole table's rows bit for bit", tp, sp ? " sp" : "");

    // sampling over the slices draws the token the whole row's sampler draws (same generator on every rank)
    int agree = 1;
    for (int row = 0; row < N; row++) {
        Rng ra, rb;
        rng_seed(&ra, 1000 + row), rng_seed(&rb, 1000 + row);
        fill(&rng, logits, (size_t)V, 2);
        for (int v = 0; v < vreal; v++) mine[v] = logits[v0 + v];
        SampleParams sp = {0.8f, 0};
        int tw = sample_token(logits, V, &sp, &ra);
        int tg_ = tp_sample_token(&m.tp, &m.cfg, mine, &sp, &rb);
        agree &= tw == tg_;
    }
    test_result(agree, "tp%d: vocabulary-parallel sampling draws the whole row's tokens (%d rows)", tp, N);
    free(logits), free(losses), free(mine), free(got), free(full_wte), free(full_wpe), free(want);
    tp_free(&m.tp);
    gpt_free(&m);
}

// The grid (llmc/comm.h): over dp x pp x cp x tp layouts, each rank one
// place, ((d * pp + p) * cp + c) * tp + t (with cp = 1: (d * pp + p) * tp + t);
// a tensor group is consecutive ranks, a model replica a block of pp x cp x tp
// consecutive ranks; the replica group (dp x cp) has the ranks of one pipeline
// and tensor place; a grid that does not split the world is one line.
static void test_grid(void) {
    const int shapes[][4] = {{2, 2, 1, 2}, {1, 2, 1, 4}, {3, 2, 1, 1}, {2, 1, 1, 4},
                             {2, 1, 2, 1}, {1, 2, 2, 2}, {2, 1, 4, 1}};  // dp, pp, cp, tp
    int ok = 1;
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
        CommGrid g = {{shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3]}};
        int dp = g.size[GRID_DP], pp = g.size[GRID_PP], cp = g.size[GRID_CP], tp = g.size[GRID_TP];
        int world = dp * pp * cp * tp, seen[64] = {0};
        for (int r = 0; r < world; r++) {
            int x[GRID_DIMS], rr, rs, color, tr, ts, tcolor;
            grid_coords(&g, r, x);
            for (int d = 0; d < GRID_DIMS; d++) ok &= x[d] >= 0 && x[d] < g.size[d];
            ok &= r == ((x[GRID_DP] * pp + x[GRID_PP]) * cp + x[GRID_CP]) * tp + x[GRID_TP];
            grid_group_of(&g, r, GRID_BIT(GRID_TP), &tr, &ts, &tcolor);
            ok &= ts == tp && tr == x[GRID_TP] && r - tr == (r / tp) * tp;  // tensor group: consecutive ranks
            ok &= x[GRID_DP] == r / (pp * cp * tp);                         // replica: a block of ranks
            grid_group_of(&g, r, GRID_BIT(GRID_DP) | GRID_BIT(GRID_CP), &rr, &rs, &color);
            ok &= rs == dp * cp && rr == x[GRID_DP] * cp + x[GRID_CP] && color == x[GRID_PP] * tp + x[GRID_TP];
            seen[r]++;
        }
        for (int r = 0; r < world; r++) ok &= seen[r] == 1;
        CommGrid split = g;
        char err[200];
        ok &= grid_split(&split, world, err, sizeof(err)) == NULL && split.size[GRID_DP] == dp;
    }
    CommGrid bad = grid_model_parallel(GRID_CP, 3);
    char err[200];
    const char *why = grid_split(&bad, 4, err, sizeof(err));
    ok &= why && strstr(why, "4 ranks do not split") && strstr(why, "context-parallel 3");
    test_result(ok, "grid: tensor ranks innermost, data outermost, each place once; groups over any dimensions");
}

int main(int argc, char **argv) {
    test_grid();
    Comm comm;
    LaunchInfo li = launch_detect();
    comm_init(&comm, &argc, &argv, grid_model_parallel(GRID_TP, li.world), 60);  // the whole world is the tensor group
    CommGroup *tg = comm_group(&comm, COMM_TENSOR);
    for (int sp = 0; sp <= (tg->size > 1); sp++) test_linear(tg, sp);
    for (int sp = 0; sp <= (tg->size > 1); sp++) test_vocab(tg, sp);
    comm_finalize(&comm);
    return test_exit_code();
}
