// dev/cuda/tensor_parallel.cu: the kernels tensor parallelism adds to the GPU
// trainer (llmc/tensor_parallel.cuh), for a tensor group of tp = 2 and 4
// ranks simulated on the one device: each rank's kernels run on its own
// buffers and its slice (tensor_parallel.h's tp_vocab_slice, padded columns
// and rows included), called as llmc/gpt_gpu.cuh calls them, and the group's
// collectives between the passes (the all-gather of the row maxima, the
// all-reduces of the sums and of the embedding's partials, sequence
// parallel's reduce-scatter) done here by device copies and fp32 sums over
// the ranks in rank order. Checked:
//   the vocabulary-parallel cross-entropy (tp_vocab_max_kernel,
//       tp_vocab_sums_kernel, tp_vocab_finish_kernel) against
//       llmc/cpu_layers.h's softmax_crossentropy of the whole row (fp32):
//       every rank's losses (the same bits on every rank), the logits'
//       gradient dloss * (softmax - onehot) written into each rank's slice,
//       its padded columns (garbage logits on input) zero, eval mode leaving
//       the logits alone, a second run's bits; targets at each slice's first
//       and last real column. V = 1000 (the last slice partly padding), 10
//       (every slice after the first all padding), 640 (no padding), 50257
//       (GPT-2: the last slice partly padding), at N = 5..8 rows;
//   gpu_tp_bias_floatX against fp32 in + bias rounded once (bits), rows x C
//       = 7 x 64, 5 x 30, 3 x 768 (partial blocks);
//   the vocabulary-parallel embedding: each rank's partial (gpu_tp_embed_rows:
//       the rows its slice holds, zeros for the others' tokens) and the
//       group's sum against the full lookup (bits), then gpu_tp_embed_finish
//       without and with sequence parallel (each rank its N/tp rows) against
//       encoder_forward rounded to bf16 (bits);
//   gpu_tp_wpe_backward (sequence parallel): each rank's accumulation into a
//       non-zero dwpe against a CPU sum over its rows, and the group's sum
//       against encoder_backward's dwpe of the whole batch; B x T = 3 x 8
//       (slices that cross a sequence boundary) and 2 x 8 (at tp 4 a slice
//       shorter than T), C = 64 and 30, V = 1000 and 10.
// Then (on a GPU) one rank's three cross-entropy passes on its slice of d12's
// (16384, 50304) logits at tp 2 and 4 (the collectives left out), and the
// bias add at d12's (16384, 768), timed against the copy bandwidth.
#include "dev/cuda/dev_common.cuh"
#include "llmc/cpu_layers.h"
#include "llmc/model.h"
#include "llmc/tensor_parallel.cuh"
#include "llmc/tensor_parallel.h"

// This rank's slice of the padded vocabulary Vp of V (tp_vocab_slice).
static void vocab_slice(int V, int tp, int rank, int *v0, int *vreal) {
    GPTConfig c;
    memset(&c, 0, sizeof(c));
    c.vocab_size = V, c.padded_vocab_size = pad_vocab(V);
    TPContext t = tp_none();
    t.size = tp, t.rank = rank;
    tp_vocab_slice(&c, &t, v0, vreal);
}

// ---------------------------------------------------------------------------
// vocabulary-parallel cross-entropy

typedef struct {
    int v0, vreal;
    floatX *logits;                           // (N, Vl): the rank's columns of the logits
    float *ce_max, *stats, *gmax, *losses;  // (tp, N), (2, N), (N), (N)
} TPRank;

// The trainer's sequence (gpu_stage_forward, tp > 1) over the group: each
// rank's maxima, the all-gather, each rank's sums, the all-reduce, each
// rank's losses and (dloss != 0) logits' gradient.
static void vocab_ce_group(TPRank *rk, int tp, const int *d_y, int N, int Vl, float dloss) {
    for (int r = 0; r < tp; r++) {
        launch_kernel(tp_vocab_max_kernel, N, TP_ROW_THREADS, 0, 0, rk[r].ce_max + (size_t)r * N, rk[r].logits, Vl,
                      rk[r].vreal);
        CUDA_CHECK_LAUNCH();
    }
    // comm_all_gather_start in place: rank r's N maxima into every rank's (tp, N) at r * N
    for (int r = 0; r < tp; r++)
        for (int q = 0; q < tp; q++)
            if (q != r)
                CUDA_CHECK(cudaMemcpy(rk[q].ce_max + (size_t)r * N, rk[r].ce_max + (size_t)r * N, sizeof(float) * N,
                                      cudaMemcpyDeviceToDevice));
    for (int r = 0; r < tp; r++) {
        launch_kernel(tp_vocab_sums_kernel, N, TP_ROW_THREADS, 0, 0, rk[r].stats, rk[r].gmax, rk[r].ce_max, tp,
                      rk[r].logits, d_y, N, Vl, rk[r].vreal, rk[r].v0);
        CUDA_CHECK_LAUNCH();
    }
    // tp_all_reduce(stats, 2N, COMM_F32): their fp32 sum over the ranks, into every rank's
    std::vector<float> sum(2 * (size_t)N, 0.0f);
    for (int r = 0; r < tp; r++) {
        float *part = host_from_f32(rk[r].stats, 2 * (size_t)N);
        for (size_t i = 0; i < sum.size(); i++) sum[i] += part[i];
        free(part);
    }
    for (int r = 0; r < tp; r++)
        CUDA_CHECK(cudaMemcpy(rk[r].stats, sum.data(), sizeof(float) * sum.size(), cudaMemcpyHostToDevice));
    for (int r = 0; r < tp; r++) {
        launch_kernel(tp_vocab_finish_kernel, N, TP_ROW_THREADS, 0, 0, rk[r].logits, rk[r].losses, rk[r].stats,
                      rk[r].gmax, d_y, N, Vl, rk[r].vreal, rk[r].v0, dloss, dloss != 0.0f);
        CUDA_CHECK_LAUNCH();
    }
}

typedef struct {
    float *losses;  // (tp, N): each rank's
    float *logits;  // (N, Vp): the ranks' slices put together
} CEGot;

// One run of the group on fresh poisoned buffers holding lp's (N, Vp) columns, rank by rank.
static CEGot vocab_ce_run(const float *lp, const int *d_y, int N, int V, int tp, float dloss) {
    int Vp = pad_vocab(V), Vl = Vp / tp;
    std::vector<TPRank> rk(tp);
    float *slice = (float *)mallocCheck(sizeof(float) * (size_t)N * Vl);
    for (int r = 0; r < tp; r++) {
        TPRank *k = &rk[r];
        vocab_slice(V, tp, r, &k->v0, &k->vreal);
        for (int i = 0; i < N; i++) memcpy(slice + (size_t)i * Vl, lp + (size_t)i * Vp + k->v0, sizeof(float) * Vl);
        k->logits = upload_floatX(slice, (size_t)N * Vl, 0);
        k->ce_max = device_buffer<float>((size_t)tp * N, 0);
        k->stats = device_buffer<float>(2 * (size_t)N, 0);
        k->gmax = device_buffer<float>(N, 0);
        k->losses = device_buffer<float>(N, 0);
    }
    vocab_ce_group(rk.data(), tp, d_y, N, Vl, dloss);
    CEGot g;
    g.losses = (float *)mallocCheck(sizeof(float) * (size_t)tp * N);
    g.logits = (float *)mallocCheck(sizeof(float) * (size_t)N * Vp);
    for (int r = 0; r < tp; r++) {
        TPRank *k = &rk[r];
        float *l = host_from_f32(k->losses, N), *x = host_from_floatX(k->logits, (size_t)N * Vl);
        memcpy(g.losses + (size_t)r * N, l, sizeof(float) * N);
        for (int i = 0; i < N; i++) memcpy(g.logits + (size_t)i * Vp + k->v0, x + (size_t)i * Vl, sizeof(float) * Vl);
        free(l);
        free(x);
        device_buffer_free(k->logits, 0);
        device_buffer_free(k->ce_max, 0);
        device_buffer_free(k->stats, 0);
        device_buffer_free(k->gmax, 0);
        device_buffer_free(k->losses, 0);
    }
    free(slice);
    return g;
}

static void check_vocab_ce(Rng *rng, int N, int V, int tp) {
    int Vp = pad_vocab(V);
    char what[200];
    float *lp = host_random(rng, (size_t)N * Vp, 8.0f);  // padded columns hold garbage: must be left out
    // targets: row i in rank i % tp's slice (its first real column, then its last, then any), or anywhere
    // when that slice is all padding
    int *y = (int *)mallocCheck(sizeof(int) * N);
    for (int i = 0; i < N; i++) {
        int v0, vreal, k = i / tp;
        vocab_slice(V, tp, i % tp, &v0, &vreal);
        if (vreal == 0) y[i] = (int)rng_below(rng, (uint64_t)V);
        else y[i] = v0 + (k == 0 ? 0 : k == 1 ? vreal - 1 : (int)rng_below(rng, (uint64_t)vreal));
    }
    float *ref = (float *)mallocCheck(sizeof(float) * (size_t)N * V), *losses = (float *)mallocCheck(sizeof(float) * N);
    for (int i = 0; i < N; i++) memcpy(ref + (size_t)i * V, lp + (size_t)i * Vp, sizeof(float) * V);
    const float dloss = 1.0f;  // dlogits of order 1: the classifier's tolerances
    softmax_crossentropy(ref, losses, y, N, V, dloss);
    int *d_y = (int *)cudaMallocCheck(sizeof(int) * N);
    CUDA_CHECK(cudaMemcpy(d_y, y, sizeof(int) * N, cudaMemcpyHostToDevice));

    CEGot ev = vocab_ce_run(lp, d_y, N, V, tp, 0.0f), tr = vocab_ce_run(lp, d_y, N, V, tp, dloss),
          again = vocab_ce_run(lp, d_y, N, V, tp, dloss);
    float *got_d = (float *)mallocCheck(sizeof(float) * (size_t)N * V);
    float *got_pad = (float *)mallocCheck(sizeof(float) * ((size_t)N * (Vp - V) + 1));
    float *zeros = (float *)callocCheck((size_t)N * (Vp - V) + 1, sizeof(float));
    size_t npad = 0;
    for (int i = 0; i < N; i++) {
        memcpy(got_d + (size_t)i * V, tr.logits + (size_t)i * Vp, sizeof(float) * V);
        for (int c = V; c < Vp; c++) got_pad[npad++] = tr.logits[(size_t)i * Vp + c];
    }
    int same_losses = 1;
    for (int r = 0; r < tp; r++) {
        snprintf(what, sizeof(what), "tp %d rank %d vocab-parallel CE eval N=%d V=%d Vp=%d: losses", tp, r, N, V, Vp);
        check_close(what, ev.losses + (size_t)r * N, losses, N, 1e-4, 1e-4);
        snprintf(what, sizeof(what), "tp %d rank %d vocab-parallel CE train N=%d V=%d Vp=%d: losses", tp, r, N, V, Vp);
        check_close(what, tr.losses + (size_t)r * N, losses, N, 1e-4, 1e-4);
        same_losses = same_losses && bits_equal(tr.losses + (size_t)r * N, tr.losses, sizeof(float) * N) &&
                      bits_equal(ev.losses + (size_t)r * N, tr.losses, sizeof(float) * N);
    }
    test_result(same_losses, "tp %d vocab-parallel CE N=%d V=%d: every rank's losses the same bits, eval and train",
                tp, N, V);
    snprintf(what, sizeof(what), "tp %d vocab-parallel CE eval N=%d V=%d Vp=%d: logits unchanged", tp, N, V, Vp);
    check_close(what, ev.logits, lp, (size_t)N * Vp, 0, 0);
    snprintf(what, sizeof(what), "tp %d vocab-parallel CE train N=%d V=%d Vp=%d: dlogits over the slices", tp, N, V,
             Vp);
    check_close(what, got_d, ref, (size_t)N * V, 1e-4, 1e-2);
    snprintf(what, sizeof(what), "tp %d vocab-parallel CE train N=%d V=%d Vp=%d: padded columns zero", tp, N, V, Vp);
    check_close(what, got_pad, zeros, npad, 0, 0);
    test_result(bits_equal(tr.losses, again.losses, sizeof(float) * (size_t)tp * N) &&
                    bits_equal(tr.logits, again.logits, sizeof(float) * (size_t)N * Vp),
                "tp %d vocab-parallel CE N=%d V=%d: a second run gives the same bits (losses, dlogits)", tp, N, V);
    CEGot *all[] = {&ev, &tr, &again};
    for (CEGot *g : all) { free(g->losses); free(g->logits); }
    CUDA_CHECK(cudaFree(d_y));
    free(lp); free(y); free(ref); free(losses); free(got_d); free(got_pad); free(zeros);
}

// ---------------------------------------------------------------------------
// a row-parallel layer's bias

static void check_bias(Rng *rng, int rows, int C) {
    size_t n = (size_t)rows * C;
    float *in = (float *)mallocCheck(sizeof(float) * n), *ref = (float *)mallocCheck(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) in[i] = (2.0f * rng_uniform(rng) - 1.0f) * 4.0f;  // fp32: not bf16 values
    float *bias = host_random(rng, C, 1.0f);
    for (size_t i = 0; i < n; i++) ref[i] = floatX_round(in[i] + bias[i % C]);
    float *d_in = device_f32_from(in, n);
    floatX *d_bias = device_floatX_from(bias, C), *d_out = device_buffer<floatX>(n, 0);
    gpu_tp_bias_floatX(d_out, d_in, d_bias, rows, C, 0);
    float *got = host_from_floatX(d_out, n);
    char what[120];
    snprintf(what, sizeof(what), "gpu_tp_bias_floatX rows=%d C=%d: in + bias rounded once", rows, C);
    check_close(what, got, ref, n, 0, 0);
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_bias));
    device_buffer_free(d_out, 0);
    free(in); free(ref); free(bias); free(got);
}

// ---------------------------------------------------------------------------
// the vocabulary-parallel embedding and its position gradient

static void check_embedding(Rng *rng, int B, int T, int C, int V, int tp) {
    int N = B * T, Vp = pad_vocab(V), Vl = Vp / tp;
    size_t n = (size_t)N * C;
    char what[160];
    float *wte = host_random(rng, (size_t)Vp * C, 1.0f), *wpe = host_random(rng, (size_t)T * C, 1.0f);
    // tokens: each slice's first and last real id, V - 1, then any
    int *inp = (int *)mallocCheck(sizeof(int) * N);
    for (int i = 0; i < N; i++) inp[i] = (int)rng_below(rng, (uint64_t)V);
    for (int r = 0, i = 0; r < tp && i + 1 < N; r++) {
        int v0, vreal;
        vocab_slice(V, tp, r, &v0, &vreal);
        if (vreal > 0) inp[i++] = v0, inp[i++] = v0 + vreal - 1;
    }
    inp[N - 1] = V - 1;
    float *lookup = (float *)mallocCheck(sizeof(float) * n), *ref = (float *)mallocCheck(sizeof(float) * n);
    for (int i = 0; i < N; i++) memcpy(lookup + (size_t)i * C, wte + (size_t)inp[i] * C, sizeof(float) * C);
    encoder_forward(ref, inp, wte, wpe, B, T, C);
    for (size_t i = 0; i < n; i++) ref[i] = floatX_round(ref[i]);
    int *d_inp = (int *)cudaMallocCheck(sizeof(int) * N);
    CUDA_CHECK(cudaMemcpy(d_inp, inp, sizeof(int) * N, cudaMemcpyHostToDevice));
    floatX *d_wpe = device_floatX_from(wpe, (size_t)T * C);

    // each rank's partial, and their sum (the all-reduce / reduce-scatter's)
    float *sum = (float *)callocCheck(n, sizeof(float)), *want = (float *)mallocCheck(sizeof(float) * n);
    for (int r = 0; r < tp; r++) {
        int v0, vreal;
        vocab_slice(V, tp, r, &v0, &vreal);
        floatX *d_wte = device_floatX_from(wte + (size_t)v0 * C, (size_t)Vl * C);  // the rank's rows, padding included
        float *d_part = device_buffer<float>(n, 0);
        gpu_tp_embed_rows(d_part, d_inp, d_wte, v0, vreal, N, C, 0);
        float *got = host_from_f32(d_part, n);
        for (int i = 0; i < N; i++) {
            int t = inp[i] - v0;
            for (int c = 0; c < C; c++)
                want[(size_t)i * C + c] = t >= 0 && t < vreal ? wte[(size_t)inp[i] * C + c] : 0.0f;
        }
        snprintf(what, sizeof(what), "tp %d rank %d gpu_tp_embed_rows B=%d T=%d C=%d V=%d: its slice's rows, else 0",
                 tp, r, B, T, C, V);
        check_close(what, got, want, n, 0, 0);
        for (size_t i = 0; i < n; i++) sum[i] += got[i];
        free(got);
        CUDA_CHECK(cudaFree(d_wte));
        device_buffer_free(d_part, 0);
    }
    snprintf(what, sizeof(what), "tp %d gpu_tp_embed_rows B=%d T=%d C=%d V=%d: the group's sum is the lookup", tp, B, T,
             C, V);
    check_close(what, sum, lookup, n, 0, 0);

    // the positions added: every row on every rank, or (sequence parallel) rank r's rows [r N/tp, (r+1) N/tp)
    for (int sp = 0; sp < 2; sp++) {
        int Nl = sp ? N / tp : N;
        for (int r = 0; r < tp; r++) {
            int r0 = sp ? r * Nl : 0;
            float *d_sum = device_f32_from(sum + (size_t)r0 * C, (size_t)Nl * C);
            floatX *d_enc = device_buffer<floatX>((size_t)Nl * C, 0);
            gpu_tp_embed_finish(d_enc, d_sum, d_wpe, r0, T, Nl, C, 0);
            float *got = host_from_floatX(d_enc, (size_t)Nl * C);
            snprintf(what, sizeof(what), "tp %d%s rank %d gpu_tp_embed_finish B=%d T=%d C=%d: rows %d..%d", tp,
                     sp ? " sp" : "", r, B, T, C, r0, r0 + Nl - 1);
            check_close(what, got, ref + (size_t)r0 * C, (size_t)Nl * C, 0, 0);
            free(got);
            CUDA_CHECK(cudaFree(d_sum));
            device_buffer_free(d_enc, 0);
        }
    }
    CUDA_CHECK(cudaFree(d_inp));
    CUDA_CHECK(cudaFree(d_wpe));
    free(wte); free(wpe); free(inp); free(lookup); free(ref); free(sum); free(want);
}

static void check_wpe_backward(Rng *rng, int B, int T, int C, int tp) {
    int N = B * T, Nl = N / tp;
    size_t tc = (size_t)T * C;
    char what[160];
    float *dout = host_random(rng, (size_t)N * C, 1.0f);
    // the group's sum from zeros: encoder_backward's dwpe of the whole batch (its dwte: one row, token 0)
    int *zero_inp = (int *)callocCheck(N, sizeof(int));
    float *dwte1 = (float *)callocCheck(C, sizeof(float)), *want_group = (float *)callocCheck(tc, sizeof(float));
    encoder_backward(dwte1, want_group, dout, zero_inp, B, T, C);
    float *group = (float *)callocCheck(tc, sizeof(float)), *ref = (float *)mallocCheck(sizeof(float) * tc);
    for (int r = 0; r < tp; r++) {
        int r0 = r * Nl;
        float *d_dout = device_f32_from(dout + (size_t)r0 * C, (size_t)Nl * C);
        // accumulating into a non-zero gradient, against a CPU sum over the rank's rows
        float *dwpe0 = host_random(rng, tc, 1.0f);
        std::vector<double> acc(tc, 0.0);
        for (int i = 0; i < Nl; i++)
            for (int c = 0; c < C; c++) acc[(size_t)((r0 + i) % T) * C + c] += dout[(size_t)(r0 + i) * C + c];
        for (size_t q = 0; q < tc; q++) ref[q] = (float)(dwpe0[q] + acc[q]);
        float *d_dwpe = device_f32_from(dwpe0, tc);
        gpu_tp_wpe_backward(d_dwpe, d_dout, r0, T, Nl, C, 0);
        float *got = host_from_f32(d_dwpe, tc);
        snprintf(what, sizeof(what), "tp %d sp rank %d gpu_tp_wpe_backward B=%d T=%d C=%d: rows %d..%d accumulated", tp,
                 r, B, T, C, r0, r0 + Nl - 1);
        check_close(what, got, ref, tc, 1e-5, 1e-5);
        // from zeros, summed over the group (the replicated gradient's reduction)
        CUDA_CHECK(cudaMemset(d_dwpe, 0, sizeof(float) * tc));
        gpu_tp_wpe_backward(d_dwpe, d_dout, r0, T, Nl, C, 0);
        float *mine = host_from_f32(d_dwpe, tc);
        for (size_t q = 0; q < tc; q++) group[q] += mine[q];
        free(mine); free(got); free(dwpe0);
        CUDA_CHECK(cudaFree(d_dout));
        CUDA_CHECK(cudaFree(d_dwpe));
    }
    snprintf(what, sizeof(what), "tp %d sp gpu_tp_wpe_backward B=%d T=%d C=%d: the group's sum is encoder_backward's",
             tp, B, T, C);
    check_close(what, group, want_group, tc, 1e-5, 1e-5);
    free(dout); free(zero_inp); free(dwte1); free(want_group); free(group); free(ref);
}

int main(void) {
    dev_require_gpu("dev_tensor_parallel");
    Rng rng;
    rng_seed(&rng, 9);
    const int E = DEV_EMULATED;  // the emulator: fewer rows
    const int ce_shapes[][2] = {
        {8, 1000},             // Vp 1024: the last slice partly padding
        {6, 10},               // Vp 128: every slice after the first all padding
        {5, 640},              // Vp = V: no padding
        {E ? 8 : 64, 50257},   // GPT-2: Vp 50304, the last slice partly padding
    };
    for (int tp = 2; tp <= 4; tp *= 2) {
        for (const auto &s : ce_shapes) check_vocab_ce(&rng, s[0], s[1], tp);
        check_embedding(&rng, 3, 8, 64, 1000, tp);  // sequence parallel: slices across a sequence boundary
        check_embedding(&rng, 2, 8, 30, 10, tp);    // tp 4: slices of 4 rows; ranks 1..3 hold no real token
        check_wpe_backward(&rng, 3, 8, 64, tp);
        check_wpe_backward(&rng, 2, 8, 30, tp);
    }
    const int bias_shapes[][2] = {{7, 64}, {5, 30}, {3, 768}};
    for (const auto &s : bias_shapes) check_bias(&rng, s[0], s[1]);
    if (!dev_benchmarks("dev_tensor_parallel")) return test_exit_code();

    Bench b;
    bench_init(&b);
    const int N = 16 * 1024, V = 50257, Vp = pad_vocab(V), C = 768;
    int *y = (int *)cudaMallocCheck(sizeof(int) * N);
    CUDA_CHECK(cudaMemset(y, 0, sizeof(int) * N));
    char name[96];
    for (int tp = 2; tp <= 4; tp *= 2) {
        int Vl = Vp / tp, r = tp - 1, v0, vreal;  // the last rank: its slice partly padding
        vocab_slice(V, tp, r, &v0, &vreal);
        size_t n = (size_t)N * Vl;
        floatX *l = (floatX *)cudaMallocCheck(n * sizeof(floatX));
        float *mx = (float *)cudaMallocCheck(sizeof(float) * (size_t)tp * N);
        float *stats = (float *)cudaMallocCheck(sizeof(float) * 2 * N);
        float *gmax = (float *)cudaMallocCheck(sizeof(float) * N);
        float *loss = (float *)cudaMallocCheck(sizeof(float) * N);
        CUDA_CHECK(cudaMemset(mx, 0, sizeof(float) * (size_t)tp * N));  // (the other ranks' maxima)
        // the logits are rewritten with dlogits each run: the input changes, the work does not
        launch_kernel(fill_hash_floatX_kernel, ceil_div_int((int64_t)n, 256), 256, 0, 0, l, (int64_t)n, 17);
        CUDA_CHECK_LAUNCH();
        double ms = bench_ms(&b, 10, [&] {
            launch_kernel(tp_vocab_max_kernel, N, TP_ROW_THREADS, 0, 0, mx + (size_t)r * N, l, Vl, vreal);
            launch_kernel(tp_vocab_sums_kernel, N, TP_ROW_THREADS, 0, 0, stats, gmax, mx, tp, l, y, N, Vl, vreal, v0);
            launch_kernel(tp_vocab_finish_kernel, N, TP_ROW_THREADS, 0, 0, l, loss, stats, gmax, y, N, Vl, vreal, v0,
                          1.0f / N, 1);
        });
        snprintf(name, sizeof(name), "tp %d vocab-parallel CE 16384x%d", tp, Vl);
        bench_report(&b, name, ms, 4.0 * n * sizeof(floatX), 0);  // the slice read 3 times, written once
        CUDA_CHECK(cudaFree(l)); CUDA_CHECK(cudaFree(mx)); CUDA_CHECK(cudaFree(stats));
        CUDA_CHECK(cudaFree(gmax)); CUDA_CHECK(cudaFree(loss));
    }
    size_t n = (size_t)N * C;
    float *in = (float *)cudaMallocCheck(sizeof(float) * n);
    floatX *bias = (floatX *)cudaMallocCheck(sizeof(floatX) * C), *out = (floatX *)cudaMallocCheck(sizeof(floatX) * n);
    // random fp32 in: pairs of random bf16 read as fp32 (finite)
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int((int64_t)n * 2, 256), 256, 0, 0, (floatX *)in, (int64_t)n * 2, 18);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(C, 256), 256, 0, 0, bias, (int64_t)C, 19);
    CUDA_CHECK_LAUNCH();
    double ms = bench_ms(&b, 20, [&] { gpu_tp_bias_floatX(out, in, bias, N, C, 0); });
    bench_report(&b, "gpu_tp_bias_floatX 16384x768", ms, (double)n * (sizeof(float) + sizeof(floatX)), 0);
    CUDA_CHECK(cudaFree(in)); CUDA_CHECK(cudaFree(bias)); CUDA_CHECK(cudaFree(out)); CUDA_CHECK(cudaFree(y));
    bench_free(&b);
    return test_exit_code();
}
