// test_gpt_cpu.c: the CPU model against the PyTorch reference fixtures
// (dev/reference/gpt_reference.py: logits, loss, every gradient, 10 AdamW
// steps), a finite-difference check of every tensor's gradient, the matmul
// backends against a naive triple loop, and a step's threading: the same bits
// on 1 and 2 threads, a few OpenMP parallel regions per layer.
#include "llmc/gpt_cpu.h"
#include "llmc/modelfile.h"
#include "llmc/optimizer.h"
#include "llmc/schedule.h"
#include "tests/omp_regions.h"
#include "tests/testing.h"

#define MODEL_FIXTURE "tests/fixtures/tiny_model.bin"
#define STATE_FIXTURE "tests/fixtures/tiny_state.bin"

typedef struct {
    int B, T, nsteps, V;
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    int *x, *y;
    float *logits, loss, *grads, *losses;  // grads in model-file order
} Fixture;

static float header_float(const int *h, int slot) {
    float f;
    memcpy(&f, &h[slot], sizeof(f));
    return f;
}

static void fixture_load(Fixture *fx, int64_t num_params) {
    FILE *f = fopenCheck(STATE_FIXTURE, "rb");
    int h[256];
    freadExact(h, sizeof(int), 256, f, STATE_FIXTURE);
    CHECK(h[0] == 20261202 && h[1] == 1, "bad fixture header in %s", STATE_FIXTURE);
    fx->B = h[2]; fx->T = h[3]; fx->nsteps = h[4]; fx->V = h[5];
    fx->lr = header_float(h, 8); fx->beta1 = header_float(h, 9); fx->beta2 = header_float(h, 10);
    fx->eps = header_float(h, 11); fx->weight_decay = header_float(h, 12); fx->grad_clip = header_float(h, 13);
    size_t n = (size_t)fx->B * fx->T;
    fx->x = (int *)mallocCheck(sizeof(int) * n);
    fx->y = (int *)mallocCheck(sizeof(int) * n);
    fx->logits = (float *)mallocCheck(sizeof(float) * n * fx->V);
    fx->grads = (float *)mallocCheck(sizeof(float) * (size_t)num_params);
    fx->losses = (float *)mallocCheck(sizeof(float) * (size_t)fx->nsteps);
    freadExact(fx->x, sizeof(int), n, f, STATE_FIXTURE);
    freadExact(fx->y, sizeof(int), n, f, STATE_FIXTURE);
    freadExact(fx->logits, sizeof(float), n * fx->V, f, STATE_FIXTURE);
    freadExact(&fx->loss, sizeof(float), 1, f, STATE_FIXTURE);
    freadExact(fx->grads, sizeof(float), (size_t)num_params, f, STATE_FIXTURE);
    freadExact(fx->losses, sizeof(float), (size_t)fx->nsteps, f, STATE_FIXTURE);
    fclose(f);
}

// One training step's forward + backward on a zeroed gradient; returns the loss.
static float forward_backward(GPT *m, const int *x, const int *y, int B, int T) {
    gpt_zero_grad(m);
    float loss = gpt_forward(m, x, y, B, T, 1.0f / (float)(B * T));
    gpt_backward(m);
    return loss;
}

static void test_parity(GPT *m, const Fixture *fx) {
    int B = fx->B, T = fx->T, V = fx->V;
    gpt_forward(m, fx->x, NULL, B, T, 0.0f);
    double e = rel_error(m->acts.logits, fx->logits, (long)B * T * V, 1e-6);
    test_result(e < 1e-4, "parity logits vs PyTorch, matmul %s (rel err %.2e)", matmul_backend_name(), e);

    float loss = forward_backward(m, fx->x, fx->y, B, T);
    double le = fabs(loss - fx->loss) / fabs(fx->loss);
    test_result(le < 1e-5, "parity loss vs PyTorch, matmul %s (%.7f vs %.7f, rel %.2e)", matmul_backend_name(), loss,
                fx->loss, le);

    // gradients: the fixture is in model-file order
    int64_t cursor = 0;
    double worst = 0;
    const char *worst_name = "";
    int bad = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        ParamKind kind = MODELFILE_ORDER[k];
        int layers = kind < PER_LAYER_KINDS ? m->cfg.num_layers : 1;
        for (int l = 0; l < layers; l++) {
            const ParamTensor *t = param_tensor(&m->layout, kind, kind < PER_LAYER_KINDS ? l : -1);
            double ge = rel_error(m->grads + t->offset, fx->grads + cursor, (long)t->numel, 1e-8);
            if (ge > worst) { worst = ge; worst_name = t->name; }
            if (!(ge < 1e-4)) { bad++; printf("  gradient %s rel err %.2e\n", t->name, ge); }
            cursor += t->numel;
        }
    }
    test_result(bad == 0, "parity gradients of all %d tensors vs PyTorch, matmul %s (worst %.2e at %s)",
                m->layout.num_tensors, matmul_backend_name(), worst, worst_name);
}

static void test_training_steps(GPT *m, const Fixture *fx) {
    int64_t n = m->layout.num_elements;
    float *mom = (float *)callocCheck((size_t)n, sizeof(float));
    float *var = (float *)callocCheck((size_t)n, sizeof(float));
    double worst = 0;
    for (int s = 0; s < fx->nsteps; s++) {
        float loss = forward_backward(m, fx->x, fx->y, fx->B, fx->T);
        double e = fabs(loss - fx->losses[s]) / fabs(fx->losses[s]);
        if (e > worst) worst = e;
        printf("  step %d loss %.7f reference %.7f\n", s, loss, fx->losses[s]);
        float norm = (float)sqrt(sum_of_squares(m->grads, n));
        AdamWConfig ac = {fx->lr, fx->beta1, fx->beta2, fx->eps, fx->weight_decay, s + 1};
        adamw_update_range(&m->layout, m->params, m->grads, 0, mom, var, 0, n, &ac, grad_clip_scale(norm, fx->grad_clip));
    }
    test_result(worst < 1e-5, "parity %d AdamW steps' losses vs PyTorch (worst rel err %.2e)", fx->nsteps, worst);
    test_result(fx->losses[fx->nsteps - 1] < fx->losses[0] - 0.1f, "reference losses fall over the steps");
    free(mom);
    free(var);
}

// Central differences on the coordinates with the largest analytic gradient of
// each tensor; the loss is evaluated in fp32, so the tolerance is loose but
// any wrong backward formula is off by O(1).
static void test_finite_differences(GPT *m, const Fixture *fx) {
    int B = fx->B, T = fx->T;
    forward_backward(m, fx->x, fx->y, B, T);
    float *analytic = (float *)mallocCheck(sizeof(float) * (size_t)m->layout.num_elements);
    memcpy(analytic, m->grads, sizeof(float) * (size_t)m->layout.num_elements);
    int bad = 0, checked = 0;
    const float h = 1e-2f;
    for (int ti = 0; ti < m->layout.num_tensors; ti++) {
        const ParamTensor *t = &m->layout.tensors[ti];
        // the 2 largest |grad| coordinates of this tensor
        int64_t best[2] = {-1, -1};
        for (int64_t i = 0; i < t->numel; i++) {
            float g = fabsf(analytic[t->offset + i]);
            if (best[0] < 0 || g > fabsf(analytic[t->offset + best[0]])) { best[1] = best[0]; best[0] = i; }
            else if (best[1] < 0 || g > fabsf(analytic[t->offset + best[1]])) best[1] = i;
        }
        for (int j = 0; j < 2; j++) {
            if (best[j] < 0) continue;
            float *p = m->params + t->offset + best[j];
            float saved = *p;
            *p = saved + h;
            double lp = gpt_forward(m, fx->x, fx->y, B, T, 0.0f);
            *p = saved - h;
            double lm = gpt_forward(m, fx->x, fx->y, B, T, 0.0f);
            *p = saved;
            double fd = (lp - lm) / (2.0 * h);
            double an = analytic[t->offset + best[j]];
            double err = fabs(fd - an) / fmax(fabs(an), 1e-3);
            checked++;
            if (err > 5e-2) { bad++; printf("  %s[%lld]: fd %.6e analytic %.6e\n", t->name, (long long)best[j], fd, an); }
        }
    }
    test_result(bad == 0, "finite differences agree on %d coordinates across all %d tensors", checked,
                m->layout.num_tensors);
    free(analytic);
}

static void test_matmul_backends(void) {
    const int shapes[][3] = {{1, 1, 1}, {7, 33, 5}, {64, 64, 64}, {37, 300, 259}, {130, 65, 520}};
    Rng rng;
    rng_seed(&rng, 7);
    for (int backend = 0; backend < 2; backend++) {
#ifndef LLMC_BLAS
        if (backend == MATMUL_BLAS) { test_skip("matmul openblas (not built with BLAS)"); continue; }
#endif
        matmul_set_backend(backend == MATMUL_BLAS ? "blas" : "native");
        int bad = 0;
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            for (int tr = 0; tr < 4; tr++) {
                int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ta = tr & 1, tb = tr >> 1;
                float *A = (float *)mallocCheck(sizeof(float) * M * K), *Bm = (float *)mallocCheck(sizeof(float) * K * N);
                float *Cm = (float *)mallocCheck(sizeof(float) * M * N), *R = (float *)mallocCheck(sizeof(float) * M * N);
                rng_normal_fill(&rng, A, (int64_t)M * K, 1.0f);
                rng_normal_fill(&rng, Bm, (int64_t)K * N, 1.0f);
                rng_normal_fill(&rng, Cm, (int64_t)M * N, 1.0f);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double acc = 0;
                        for (int k = 0; k < K; k++)
                            acc += (double)(ta ? A[k * M + i] : A[i * K + k]) * (tb ? Bm[j * K + k] : Bm[k * N + j]);
                        R[i * N + j] = (float)(0.5 * acc + 0.25 * Cm[i * N + j]);
                    }
                matmul(ta, tb, M, N, K, 0.5f, A, ta ? M : K, Bm, tb ? K : N, 0.25f, Cm, N);
                double e = rel_error(Cm, R, (long)M * N, 1e-6);
                if (e > 1e-5) { bad++; printf("  %dx%dx%d ta=%d tb=%d rel err %.2e\n", M, N, K, ta, tb, e); }
                free(A); free(Bm); free(Cm); free(R);
            }
        }
        test_result(bad == 0, "matmul %s matches a double-precision reference on 20 shapes/transposes",
                    matmul_backend_name());
    }
    matmul_set_backend("auto");
}

static void test_schedules(void) {
    LrSchedule s = {LR_COSINE, 1.0f, 0.1f, 0.2f, 10, 110};
    int ok = fabsf(lr_at_step(&s, 0) - 0.1f) < 1e-6f && fabsf(lr_at_step(&s, 9) - 1.0f) < 1e-6f &&
             fabsf(lr_at_step(&s, 10) - 1.0f) < 1e-6f && fabsf(lr_at_step(&s, 109) - 0.1f) < 1e-6f &&
             fabsf(lr_at_step(&s, 59) - 0.55f) < 2e-2f;
    s.kind = LR_LINEAR;
    ok = ok && fabsf(lr_at_step(&s, 109) - 0.1f) < 1e-6f && lr_at_step(&s, 50) < lr_at_step(&s, 40);
    s.kind = LR_WSD;
    ok = ok && fabsf(lr_at_step(&s, 80) - 1.0f) < 1e-6f && fabsf(lr_at_step(&s, 109) - 0.1f) < 1e-5f &&
         lr_at_step(&s, 100) < 1.0f;
    s.kind = LR_CONSTANT;
    ok = ok && fabsf(lr_at_step(&s, 100) - 1.0f) < 1e-6f;
    test_result(ok, "learning-rate schedules (warmup, cosine, linear, wsd, constant)");
}

static void test_modelfile_roundtrip(const GPT *m) {
    char path[] = "/tmp/llmc_test_model_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp failed");
    close(fd);
    modelfile_save(path, &m->layout, m->params);
    float *back = (float *)mallocCheck(sizeof(float) * (size_t)m->layout.num_elements);
    modelfile_load(path, &m->layout, back);
    test_result(memcmp(back, m->params, sizeof(float) * (size_t)m->layout.num_elements) == 0,
                "model file save/load round trip is bit-exact");
    free(back);
    unlink(path);
}

// An llm.c bf16 model file (version 5) written here by truncating the weights
// to their top 16 bits loads to exactly those truncated values.
static void write_bf16_tensor(const ParamTensor *t, void *ctx) {
    void **io = (void **)ctx;
    FILE *f = (FILE *)io[0];
    const float *params = (const float *)io[1];
    for (int64_t i = 0; i < t->numel; i++) {
        uint32_t bits;
        memcpy(&bits, &params[t->offset + i], 4);
        uint16_t top = (uint16_t)(bits >> 16);
        fwriteExact(&top, 2, 1, f, "bf16 model");
    }
}

static void test_modelfile_bf16(const GPT *m) {
    char path[] = "/tmp/llmc_test_bf16_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp failed");
    FILE *f = fdopen(fd, "wb");
    int header[256] = {0};
    const GPTConfig *c = &m->cfg;
    header[0] = MODELFILE_MAGIC; header[1] = MODELFILE_BF16; header[2] = c->max_seq_len; header[3] = c->vocab_size;
    header[4] = c->num_layers; header[5] = c->num_heads; header[6] = c->channels; header[7] = c->padded_vocab_size;
    fwriteExact(header, sizeof(int), 256, f, path);
    void *io[2] = {f, m->params};
    modelfile_for_each(&m->layout, write_bf16_tensor, io);
    fcloseCheck(f, path);
    float *back = (float *)mallocCheck(sizeof(float) * (size_t)m->layout.num_elements);
    modelfile_load(path, &m->layout, back);
    long bad = 0;
    for (int ti = 0; ti < m->layout.num_tensors; ti++) {
        const ParamTensor *t = &m->layout.tensors[ti];
        for (int64_t i = 0; i < t->numel; i++) {
            uint32_t bits;
            memcpy(&bits, &m->params[t->offset + i], 4);
            bits &= 0xffff0000u;
            float want;
            memcpy(&want, &bits, 4);
            if (back[t->offset + i] != want) bad++;
        }
    }
    test_result(bad == 0, "bf16 (version 5) model file loads to the truncated weights (%ld mismatches)", bad);
    free(back);
    unlink(path);
}

// The backward split into input gradients (B) and weight gradients (W), and
// the model cut into two stages (the first's output handed to the second, its
// input gradient handed back): the same gradients as the whole backward, bit
// for bit, but wte's (its two halves add in another order).
static void test_split_backward_and_stages(GPT *m, const Fixture *fx) {
    int B = fx->B, T = fx->T, L = m->cfg.num_layers, C = m->cfg.channels;
    size_t n = (size_t)m->layout.num_elements, NC = (size_t)B * T * C;
    float dloss = 1.0f / (float)(B * T);
    float *whole = (float *)mallocCheck(sizeof(float) * n);
    forward_backward(m, fx->x, fx->y, B, T);
    memcpy(whole, m->grads, sizeof(float) * n);
    GPTActivations a, s0, s1;
    memset(&a, 0, sizeof(a)), memset(&s0, 0, sizeof(s0)), memset(&s1, 0, sizeof(s1));
    gpt_zero_grad(m);
    gpt_activations_alloc(&a, m, B, T, 0, L, 1);
    gpt_stage_forward(m, &a, fx->x, fx->y, B, T, dloss);
    gpt_stage_backward(m, &a);
    int64_t fcw = param_tensor(&m->layout, PK_FCW, L - 1)->offset;
    int untouched = m->grads[fcw] == 0.0f && m->grads[fcw + 1] == 0.0f;
    gpt_stage_backward_weights(m, &a);
    test_result(untouched && memcmp(whole, m->grads, sizeof(float) * n) == 0,
                "split backward: B leaves the weight gradients to W, and B then W equals the whole backward bit for bit");
    int k = L / 2 > 0 ? L / 2 : 1;
    gpt_zero_grad(m);
    gpt_activations_alloc(&s0, m, B, T, 0, k, 0);
    gpt_activations_alloc(&s1, m, B, T, k, L, 1);
    gpt_stage_forward(m, &s0, fx->x, fx->y, B, T, dloss);
    memcpy(s1.encoded, s0.residual3[k - 1], sizeof(float) * NC);
    float loss = gpt_stage_forward(m, &s1, fx->x, fx->y, B, T, dloss);
    gpt_stage_backward(m, &s1);
    gpt_stage_backward_weights(m, &s1);
    memcpy(s0.dresidual, s1.dresidual, sizeof(float) * NC);
    gpt_stage_backward(m, &s0);
    const ParamTensor *wte = param_tensor(&m->layout, PK_WTE, -1);
    int same = memcmp(whole + wte->offset + wte->numel, m->grads + wte->offset + wte->numel,
                      sizeof(float) * (n - (size_t)(wte->offset + wte->numel))) == 0;
    double e = rel_error(m->grads + wte->offset, whole + wte->offset, (long)wte->numel, 1e-8);
    test_result(same && e < 1e-6 && fabsf(loss - fx->loss) < 1e-5f,
                "two stages (layers 0-%d, %d-%d): every gradient equals the whole model's, wte to %.1e (loss %.6f)",
                k - 1, k, L - 1, e, loss);
    gpt_activations_free(&a), gpt_activations_free(&s0), gpt_activations_free(&s1);
    free(whole);
}

// A step on 2 threads enters a handful of parallel regions per layer with
// each backend (the kernels of a layer share a team, not one fork and join
// each, nor OpenBLAS's own), and with the native kernel its gradients are the
// same bits as on 1 thread (no sum depends on the thread count; OpenBLAS picks
// its kernel by shape, so a thread's slice of a product may round otherwise).
static void test_threads(GPT *m, const Fixture *fx) {
#ifdef _OPENMP
    int64_t n = m->layout.num_elements;
    float *one = (float *)mallocCheck(sizeof(float) * (size_t)n);
    int saved = omp_threads(), L = m->cfg.num_layers;
#ifdef LLMC_BLAS
    const int first = 0;
#else
    const int first = 1;  // (no BLAS in this build)
#endif
    for (int backend = first; backend < 2; backend++) {
        matmul_set_backend(backend ? "native" : "blas");
        long regions = 0;
        for (int threads = 1; threads <= 2; threads++) {
            omp_set_num_threads(threads);
            gpt_activations_free(&m->acts);  // (its attention scratch is per thread)
            long r0 = omp_regions_entered();
            forward_backward(m, fx->x, fx->y, fx->B, fx->T);
            regions = omp_regions_entered() - r0;
            if (threads == 1) memcpy(one, m->grads, sizeof(float) * (size_t)n);
        }
        if (backend == 1)
            test_result(memcmp(one, m->grads, sizeof(float) * (size_t)n) == 0,
                        "a step's gradients are the same bits on 1 and 2 threads, matmul %s", matmul_backend_name());
        test_result(regions <= 2 * L + 8, "a step on 2 threads enters %ld OpenMP parallel regions (at most %d: 2 a layer"
                    " + 8), matmul %s", regions, 2 * L + 8, matmul_backend_name());
    }
    omp_set_num_threads(saved);
    gpt_activations_free(&m->acts);
    matmul_set_backend("auto");
    free(one);
#else
    (void)m, (void)fx;
    test_skip("threads: built without OpenMP");
#endif
}

int main(void) {
    GPTConfig cfg;
    modelfile_read_config(MODEL_FIXTURE, &cfg);
    GPT m;
    gpt_init(&m, &cfg);
    modelfile_load(MODEL_FIXTURE, &m.layout, m.params);
    Fixture fx;
    fixture_load(&fx, m.layout.num_params);
    test_result(fx.V == cfg.vocab_size && cfg.padded_vocab_size % 128 == 0 && cfg.padded_vocab_size > cfg.vocab_size,
                "fixture config V=%d Vp=%d L=%d C=%d", cfg.vocab_size, cfg.padded_vocab_size, cfg.num_layers,
                cfg.channels);
    test_matmul_backends();
    test_schedules();
    test_parity(&m, &fx);
#ifdef LLMC_BLAS
    matmul_set_backend("native");  // the same parity with our own kernel
    printf("  with the native matmul:\n");
    test_parity(&m, &fx);
    matmul_set_backend("auto");
#endif
    test_finite_differences(&m, &fx);
    test_split_backward_and_stages(&m, &fx);
    test_threads(&m, &fx);
    test_modelfile_roundtrip(&m);
    test_modelfile_bf16(&m);
    test_training_steps(&m, &fx);  // last: it changes the weights
    gpt_free(&m);
    free(fx.x); free(fx.y); free(fx.logits); free(fx.grads); free(fx.losses);
    return test_exit_code();
}
