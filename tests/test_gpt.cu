// test_gpt.cu: the GPU model (llmc/gpt_gpu.cuh) against the CPU model
// (llmc/gpt_cpu.h) on the same weights and batches: logits, loss and every
// gradient tensor of one step within bf16 tolerances; 10 AdamW steps of
// losses; recomputation (--recompute selective: the default's gradients tensor
// by tensor; full and full:2: bit for bit) and gradient accumulation over two
// micro-batches giving the gradients of the default (tensor by tensor);
// bit-exact determinism of two identical runs; models holding shards of the
// master weights (ZeRO-1) updating their ranges exactly as the full model; and
// last, cuDNN attention giving flash's gradients (last: a cuDNN that accepts
// no engine for the graphs ends the program, and the checks above still ran).
// The batches are learnable (target = input + 1 mod V), so the 10 steps lower
// the loss by more than a nat and an optimizer that does nothing fails.
// Without a GPU only the first check runs (the cuDNN attention graphs, which
// the installed cuDNN validates with no device); the rest print SKIP. In the
// emulated build (tests/cuda_emulator.h) everything runs, cuDNN attention
// included (tests/emu_include/cudnn.h runs its graphs node by node).
#include "llmc/gpt_cpu.h"
#include "llmc/gpt_gpu.cuh"
#include "llmc/optimizer.h"
#include "tests/testing.h"

#define B_TEST 4
#define T_TEST 64
#define STEPS 10

// bf16 weights and activations: about 3 significant digits per operation.
// (A CPU emulation of this model rounding to bf16 where the GPU stores bf16
// gives logits 4e-3, loss 1.3e-4, per-tensor gradients <= 7.6e-3, 10-step
// losses <= 7e-4 apart from the fp32 model: each tolerance leaves 5x or more.)
#define TOL_LOGITS 3e-2
#define TOL_GRAD 6e-2
#define TOL_LOSS 2e-2
// GPU against GPU, the same arithmetic but for where a value is rounded (the
// recomputed GELU comes from the bf16 pre-activation, the forward's from fp32:
// 3e-3 on mlp.c_proj.weight in the emulation; accumulation: sums in another
// order). Per tensor: a tensor whose gradients are small next to the largest
// (ln_1.weight: 0.6% of it) still counts.
#define TOL_SAME 2e-2

// Random inputs, learnable targets (the next token id): on random targets the
// 10 steps leave the loss within 0.03 nats of an untrained model's, so a GPU
// that never updated its weights would follow the CPU's losses as well.
static void random_batch(Rng *rng, int *x, int *y, int n, int V) {
    for (int i = 0; i < n; i++) {
        x[i] = (int)rng_below(rng, (uint64_t)V);
        y[i] = (x[i] + 1) % V;
    }
}

// The largest relative error (rel_error) of any one tensor of the flat
// gradient buffers a against b; *worst names that tensor.
static double worst_tensor_error(const ParamLayout *pl, const float *a, const float *b, const char **worst) {
    double e = 0.0;
    *worst = "";
    for (int t = 0; t < pl->num_tensors; t++) {
        const ParamTensor *pt = &pl->tensors[t];
        double et = rel_error(a + pt->offset, b + pt->offset, (long)pt->numel, 1e-6);
        if (et > e || et != et) {
            e = et != et ? INFINITY : et;
            *worst = pt->name;
        }
    }
    return e;
}

static AdamWConfig adamw_at(int step) {
    AdamWConfig ac = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step + 1};
    return ac;
}

// steps of training on batches[s] (x then y, each B*T); losses[s] out.
static void train_gpu(GPTGPU *m, int *const *xs, int *const *ys, int steps, float *losses, uint64_t seed) {
    for (int s = 0; s < steps; s++) {
        gpu_gpt_zero_grad(m);
        losses[s] = gpu_gpt_forward(m, xs[s], ys[s], B_TEST, T_TEST, 1.0f / (B_TEST * T_TEST));
        gpu_gpt_backward(m);
        float norm = gpu_gpt_grad_norm(m);
        AdamWConfig ac = adamw_at(s);
        gpu_gpt_update(m, &ac, grad_clip_scale(norm, 1.0f), seed + (uint64_t)s);
    }
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

static void train_cpu(GPT *m, float *adam_m, float *adam_v, int *const *xs, int *const *ys, int steps,
                      float *losses) {
    int64_t n = m->layout.num_elements;
    for (int s = 0; s < steps; s++) {
        gpt_zero_grad(m);
        losses[s] = gpt_forward(m, xs[s], ys[s], B_TEST, T_TEST, 1.0f / (B_TEST * T_TEST));
        gpt_backward(m);
        float norm = (float)sqrt(sum_of_squares(m->grads, n));
        AdamWConfig ac = adamw_at(s);
        adamw_update_range(&m->layout, m->params, m->grads, 0, adam_m, adam_v, 0, n, &ac, grad_clip_scale(norm, 1.0f));
    }
}

// One forward, backward and AdamW step (step 1, gradients scaled by grad_scale) of a
// fresh model with master weights of shard shard_rank of shard_world; its
// master weights into out[its shard].
static void gpu_shard_step(const GPTConfig *cfg, const float *params, int shard_rank, int shard_world, const int *x,
                           const int *y, float grad_scale, float *out) {
    GPTGPU g;
    gpu_gpt_init(&g, cfg, NULL, tp_none(), B_TEST, T_TEST, 1, RecomputePolicy{}, ATTENTION_FLASH, zero_sharding(1, shard_rank, shard_world), NULL, 0, 0);
    gpu_gpt_set_params(&g, params);
    gpu_gpt_zero_grad(&g);
    gpu_gpt_forward(&g, x, y, B_TEST, T_TEST, 1.0f / (B_TEST * T_TEST));
    gpu_gpt_backward(&g);
    AdamWConfig ac = adamw_at(0);
    gpu_gpt_update(&g, &ac, grad_scale, 1234);
    gpu_gpt_get_params(&g, out);
    gpu_gpt_free(&g);
}

// One training step's gradients of a fresh GPU model into out.
// split: the backward's input and weight gradients apart (B, then W).
// recompute: a --recompute policy.
static float gpu_step_grads(const GPTConfig *cfg, const float *params, const char *recompute, AttentionKind attention,
                            int split, const int *x, const int *y, float *out) {
    GPTGPU g;
    RecomputePolicy rp;
    CHECK(recompute_parse(recompute, &rp), "bad policy %s", recompute);
    gpu_gpt_init(&g, cfg, NULL, tp_none(), B_TEST, T_TEST, 1, rp, attention, zero_sharding(0, 0, 1), NULL, split, 0);
    gpu_gpt_set_params(&g, params);
    gpu_gpt_zero_grad(&g);
    float loss = gpu_gpt_forward(&g, x, y, B_TEST, T_TEST, 1.0f / (B_TEST * T_TEST));
    gpu_gpt_backward(&g);
    gpu_gpt_get_grads(&g, out);
    gpu_gpt_free(&g);
    return loss;
}

// Every descriptor, attribute and operation of both cuDNN attention graphs is
// accepted by the installed cuDNN (no device needed; engines are not chosen),
// or in the emulated build by tests/emu_include/cudnn.h.
static void check_cudnn_graphs(void) {
#ifdef LLMC_CUDNN
#ifdef LLMC_CUDA_EMULATION
    const char *which = "emulated cuDNN";
#else
    const char *which = "cuDNN";
#endif
    const int shapes[][4] = {{768, 12, 4, 1024}, {128, 2, B_TEST, T_TEST}, {1600, 25, 1, 7}};  // C NH B T
    for (int i = 0; i < 3; i++) {
        const int *d = shapes[i];
        const char *bad = cudnn_attention_check_graphs(d[0], d[1], d[2], d[3]);
        test_result(bad == NULL, "%s %d accepts the attention graphs at C=%d NH=%d B=%d T=%d%s%s", which,
                    CUDNN_VERSION, d[0], d[1], d[2], d[3], bad ? ": rejects the " : "", bad ? bad : "");
    }
#else
    test_skip("cuDNN attention graphs (no cuDNN in this build)");
#endif
}

int main(void) {
    check_cudnn_graphs();
    if (!cuda_device_present()) {
        test_skip("test_gpt_cu (no CUDA device)");
        return 0;
    }
    GPTConfig cfg = {T_TEST, 250, pad_vocab(250), 2, 2, 128};  // maxT V Vp L NH C: head size 64
    int N = B_TEST * T_TEST, V = cfg.vocab_size;
    GPT cpu;
    gpt_init(&cpu, &cfg);
    gpt2_init_params(&cpu.layout, cpu.params, 42);
    int64_t P = cpu.layout.num_elements;
    float *init = (float *)mallocCheck(sizeof(float) * (size_t)P);
    memcpy(init, cpu.params, sizeof(float) * (size_t)P);

    Rng rng;
    rng_seed(&rng, 7);
    int *xs[STEPS], *ys[STEPS];
    for (int s = 0; s < STEPS; s++) {
        xs[s] = (int *)mallocCheck(sizeof(int) * (size_t)N);
        ys[s] = (int *)mallocCheck(sizeof(int) * (size_t)N);
        random_batch(&rng, xs[s], ys[s], N, V);
    }

    // logits
    GPTGPU g;
    gpu_gpt_init(&g, &cfg, NULL, tp_none(), B_TEST, T_TEST, 1, RecomputePolicy{}, ATTENTION_FLASH, zero_sharding(0, 0, 1), NULL, 0, 0);
    gpu_gpt_set_params(&g, init);
    float *logits = (float *)mallocCheck(sizeof(float) * (size_t)N * V);
    gpt_forward(&cpu, xs[0], NULL, B_TEST, T_TEST, 0.0f);
    gpu_gpt_forward(&g, xs[0], NULL, B_TEST, T_TEST, 0.0f);
    gpu_gpt_logits(&g, 0, N, logits);
    double e = rel_error(logits, cpu.acts.logits, (long)N * V, 1e-6);
    test_result(e < TOL_LOGITS, "gpu logits match cpu (rel err %.2e)", e);

    // one step: loss and every gradient
    float *grads = (float *)mallocCheck(sizeof(float) * (size_t)P);
    gpt_zero_grad(&cpu);
    float loss_c = gpt_forward(&cpu, xs[0], ys[0], B_TEST, T_TEST, 1.0f / N);
    gpt_backward(&cpu);
    gpu_gpt_zero_grad(&g);
    float loss_g = gpu_gpt_forward(&g, xs[0], ys[0], B_TEST, T_TEST, 1.0f / N);
    gpu_gpt_backward(&g);
    gpu_gpt_get_grads(&g, grads);
    test_result(fabsf(loss_g - loss_c) < TOL_LOSS, "gpu loss %.5f matches cpu %.5f", loss_g, loss_c);
    for (int t = 0; t < cpu.layout.num_tensors; t++) {
        const ParamTensor *pt = &cpu.layout.tensors[t];
        double ge = rel_error(grads + pt->offset, cpu.grads + pt->offset, (long)pt->numel, 1e-6);
        test_result(ge < TOL_GRAD, "gradient %s (rel err %.2e)", pt->name, ge);
    }
    float norm_g = gpu_gpt_grad_norm(&g), norm_c = (float)sqrt(sum_of_squares(cpu.grads, P));
    test_result(fabsf(norm_g - norm_c) < TOL_GRAD * norm_c, "grad norm %.5f matches cpu %.5f", norm_g, norm_c);
    gpu_gpt_free(&g);

    // recomputation gives the same gradients
    float *grads_r = (float *)mallocCheck(sizeof(float) * (size_t)P);
    const char *worst;
    const char *policies[] = {"selective", "full", "full:2"};
    for (int r = 0; r < 3; r++) {
        float loss_r = gpu_step_grads(&cfg, init, policies[r], ATTENTION_FLASH, 0, xs[0], ys[0], grads_r);
        double re = worst_tensor_error(&cpu.layout, grads_r, grads, &worst);
        test_result(loss_r == loss_g && re < TOL_SAME,
                    "recompute %s: loss %.6f (no recompute %.6f), gradients rel err %.2e (worst tensor %s)",
                    policies[r], loss_r, loss_g, re, worst);
        if (r > 0)  // (full runs the forward's kernels again: the same bits)
            test_result(memcmp(grads_r, grads, sizeof(float) * (size_t)P) == 0,
                        "recompute %s: the gradients of no recompute bit for bit", policies[r]);
    }

    // a split backward (B, then W: the zero-bubble schedules') gives the one-pass backward's gradients bit for bit
    const char *split_policies[] = {"none", "selective", "full:2"};
    for (int r = 0; r < 3; r++) {
        float *one = (float *)mallocCheck(sizeof(float) * (size_t)P), *apart = (float *)mallocCheck(sizeof(float) * (size_t)P);
        float l1 = gpu_step_grads(&cfg, init, split_policies[r], ATTENTION_FLASH, 0, xs[0], ys[0], one);
        float l2 = gpu_step_grads(&cfg, init, split_policies[r], ATTENTION_FLASH, 1, xs[0], ys[0], apart);
        test_result(l1 == l2 && memcmp(one, apart, sizeof(float) * (size_t)P) == 0,
                    "recompute %s: a split backward (B then W) gives the one-pass gradients bit for bit",
                    split_policies[r]);
        free(one);
        free(apart);
    }

    // gradient accumulation: two micro-batches of B/2 accumulate (in fp32) the gradients of one of B
    {
        GPTGPU ga;
        gpu_gpt_init(&ga, &cfg, NULL, tp_none(), B_TEST, T_TEST, 1, RecomputePolicy{}, ATTENTION_FLASH, zero_sharding(0, 0, 1), NULL, 0, 0);
        gpu_gpt_set_params(&ga, init);
        gpu_gpt_zero_grad(&ga);
        int half = B_TEST / 2, n_half = half * T_TEST;
        double la = 0.0;
        for (int k = 0; k < 2; k++) {
            la += gpu_gpt_forward(&ga, xs[0] + k * n_half, ys[0] + k * n_half, half, T_TEST, 1.0f / N);
            gpu_gpt_backward(&ga);
        }
        gpu_gpt_get_grads(&ga, grads_r);
        double ae = worst_tensor_error(&cpu.layout, grads_r, grads, &worst);
        test_result(fabs(la / 2 - loss_g) < 1e-3 && ae < TOL_SAME,
                    "2 accumulated micro-batches of %d: loss %.6f (one batch %.6f), gradients rel err %.2e (worst "
                    "tensor %s)", half, la / 2, loss_g, ae, worst);
        gpu_gpt_free(&ga);
    }

    // 10 steps of training
    float lc[STEPS], lg[STEPS], lg2[STEPS];
    float *adam_m = (float *)callocCheck((size_t)P, sizeof(float));
    float *adam_v = (float *)callocCheck((size_t)P, sizeof(float));
    memcpy(cpu.params, init, sizeof(float) * (size_t)P);
    train_cpu(&cpu, adam_m, adam_v, xs, ys, STEPS, lc);
    GPTGPU g1, g2;
    gpu_gpt_init(&g1, &cfg, NULL, tp_none(), B_TEST, T_TEST, 1, RecomputePolicy{}, ATTENTION_FLASH, zero_sharding(0, 0, 1), NULL, 0, 0);
    gpu_gpt_set_params(&g1, init);
    train_gpu(&g1, xs, ys, STEPS, lg, 1234);
    int ok = 1;
    for (int s = 0; s < STEPS; s++) {
        printf("step %d: cpu loss %.5f gpu loss %.5f\n", s, lc[s], lg[s]);
        ok &= fabsf(lg[s] - lc[s]) < TOL_LOSS + 1e-2f * fabsf(lc[s]);
    }
    test_result(ok, "%d training steps: gpu losses follow cpu losses", STEPS);
    // the CPU's loss falls by 1.28 nats over these steps; an untrained model's moves by 0.02
    test_result(lg[STEPS - 1] < lg[0] - 0.5f, "gpu training lowers the loss by over 0.5 (%.4f -> %.4f)", lg[0],
                lg[STEPS - 1]);

    // determinism: a second identical run gives the same bits
    gpu_gpt_init(&g2, &cfg, NULL, tp_none(), B_TEST, T_TEST, 1, RecomputePolicy{}, ATTENTION_FLASH, zero_sharding(0, 0, 1), NULL, 0, 0);
    gpu_gpt_set_params(&g2, init);
    train_gpu(&g2, xs, ys, STEPS, lg2, 1234);
    float *p1 = (float *)mallocCheck(sizeof(float) * (size_t)P), *p2 = (float *)mallocCheck(sizeof(float) * (size_t)P);
    gpu_gpt_get_params(&g1, p1);
    gpu_gpt_get_params(&g2, p2);
    test_result(memcmp(lg, lg2, sizeof(lg)) == 0 && memcmp(p1, p2, sizeof(float) * (size_t)P) == 0,
                "two identical gpu runs are bit-identical (losses and weights after %d steps)", STEPS);
    gpu_gpt_free(&g1);
    gpu_gpt_free(&g2);

    // sharded master weights: shards 0 and 1 of 2 together take the full model's step, bit for bit
    gpu_shard_step(&cfg, init, 0, 1, xs[0], ys[0], 0.5f, p1);
    memset(p2, 0, sizeof(float) * (size_t)P);
    for (int k = 0; k < 2; k++) gpu_shard_step(&cfg, init, k, 2, xs[0], ys[0], 0.5f, p2);
    test_result(memcmp(p1, p2, sizeof(float) * (size_t)P) == 0,
                "models with shards 0 and 1 of 2 of the master weights update them as the full model does");

    // cuDNN attention gives the flash attention's loss and gradients (last: gpu_gpt_init ends the
    // program when no cuDNN engine runs the graphs; the exit status then fails the test)
    if (cudnn_attention_available()) {
        float loss_n = gpu_step_grads(&cfg, init, "none", ATTENTION_CUDNN, 0, xs[0], ys[0], grads_r);
        double ne = worst_tensor_error(&cpu.layout, grads_r, grads, &worst);
        test_result(fabsf(loss_n - loss_g) < 2e-3f && ne < TOL_GRAD,
                    "attention cudnn: loss %.6f (flash %.6f), gradients rel err %.2e (worst tensor %s)", loss_n, loss_g,
                    ne, worst);
    } else {
        test_skip("attention cudnn (no cuDNN in this build)");
    }

    for (int s = 0; s < STEPS; s++) { free(xs[s]); free(ys[s]); }
    free(init); free(logits); free(grads); free(grads_r); free(adam_m); free(adam_v); free(p1); free(p2);
    gpt_free(&cpu);
    return test_exit_code();
}
