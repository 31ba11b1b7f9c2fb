// dev/cuda/layernorm.cu: LayerNorm, two versions, each checked against
// llmc/cpu_layers.h (layernorm_forward, layernorm_backward): the plain
// forward, the fused residual add + LayerNorm, and the backward (input
// gradient accumulated in fp32, parameter gradients):
//   version 1 = the first kernels (below): one warp per row, scalar 2-byte
//               loads, the row re-read from memory for the mean, the variance
//               and the normalise (and the fused residual re-read after its
//               write), the backward rows reading dout and inp twice;
//   version 2 = llmc/layernorm.cuh (what the trainer runs): 16-byte vectors,
//               the row held in registers from its one read (C <= 2048), an
//               element-by-element path for C % 8 != 0 or unaligned pointers.
// Shapes: C a multiple of 8 (vector path; C = 2304 > 2048 re-reads the row),
// C = 100 and 2052 (element path), N not a multiple of the rows per block or
// of the 128-row chunks of the parameter gradients. Version 2 is also run on
// misaligned copies of every buffer (its element path) and must give the bits
// of the aligned run; the fused forward followed by a plain forward of its
// residual must give the same out, mean and rstd bits (the --recompute 2
// guarantee); two backward runs must agree bit for bit. Then both versions are
// timed at d12 (16384 x 768) and d48 (16384 x 1600) width.
#include "dev/cuda/dev_common.cuh"
#include "llmc/cpu_layers.h"
#include "llmc/layernorm.cuh"

// ---------------------------------------------------------------------------
// version 1: one warp per row, scalar loads (the kernels version 2 replaced)

#define V1_WARPS 8

__device__ __forceinline__ void ln_row_v1(floatX *out, float *mean_out, float *rstd_out, const floatX *x, const floatX *w,
                                          const floatX *b, int C) {
    int lane = threadIdx.x % 32;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += to_float(x[c]);
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = to_float(x[c]) - m;
        var += d * d;
    }
    float s = rsqrtf(warp_sum(var) / C + LN_EPS);
    for (int c = lane; c < C; c += 32) {
        float n = (to_float(x[c]) - m) * s;
        out[c] = to_floatX(n * to_float(w[c]) + to_float(b[c]));
    }
    if (lane == 0) { *mean_out = m; *rstd_out = s; }
}

__global__ void layernorm_forward_v1_kernel(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *w,
                                            const floatX *b, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    int64_t off = (int64_t)row * C;
    ln_row_v1(out + off, mean + row, rstd + row, inp + off, w, b, C);
}

__global__ void fused_residual_layernorm_v1_kernel(floatX *residual_out, floatX *out, float *mean, float *rstd,
                                                   const floatX *res_in, const floatX *x, const floatX *w, const floatX *b,
                                                   int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    int64_t off = (int64_t)row * C;
    for (int c = threadIdx.x % 32; c < C; c += 32)
        residual_out[off + c] = to_floatX(to_float(res_in[off + c]) + to_float(x[off + c]));
    __syncwarp();
    ln_row_v1(out + off, mean + row, rstd + row, residual_out + off, w, b, C);
}

__global__ void layernorm_backward_rows_v1_kernel(float *dinp, floatX *dinp_compute, const floatX *dout, const floatX *inp,
                                                  const floatX *w, const float *mean, const float *rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    int lane = threadIdx.x % 32;
    int64_t off = (int64_t)row * C;
    float m = mean[row], s = rstd[row];
    float dmean = 0.0f, dnorm_mean = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float norm = (to_float(inp[off + c]) - m) * s;
        float dnorm = to_float(w[c]) * to_float(dout[off + c]);
        dmean += dnorm;
        dnorm_mean += dnorm * norm;
    }
    dmean = warp_sum(dmean) / C;
    dnorm_mean = warp_sum(dnorm_mean) / C;
    for (int c = lane; c < C; c += 32) {
        float norm = (to_float(inp[off + c]) - m) * s;
        float dnorm = to_float(w[c]) * to_float(dout[off + c]);
        float d = dinp[off + c] + (dnorm - dmean - norm * dnorm_mean) * s;
        dinp[off + c] = d;
        dinp_compute[off + c] = to_floatX(d);
    }
}

static void v1_layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *w, const floatX *b,
                                 int N, int C, cudaStream_t s) {
    launch_kernel(layernorm_forward_v1_kernel, ceil_div_int(N, V1_WARPS), V1_WARPS * 32, 0, s, out, mean, rstd, inp,
                  w, b, N, C);
    CUDA_CHECK_LAUNCH();
}

static void v1_fused_residual_layernorm(floatX *residual_out, floatX *out, float *mean, float *rstd, const floatX *res_in,
                                        const floatX *x, const floatX *w, const floatX *b, int N, int C, cudaStream_t s) {
    launch_kernel(fused_residual_layernorm_v1_kernel, ceil_div_int(N, V1_WARPS), V1_WARPS * 32, 0, s, residual_out,
                  out, mean, rstd, res_in, x, w, b, N, C);
    CUDA_CHECK_LAUNCH();
}

// the rows kernel above, then llmc's scalar parameter-gradient kernels (unchanged from version 1)
static void v1_layernorm_backward(float *dinp, floatX *dinp_compute, float *dw, float *db, float *scratch, const floatX *dout,
                                  const floatX *inp, const floatX *w, const float *mean, const float *rstd, int N, int C,
                                  cudaStream_t s) {
    launch_kernel(layernorm_backward_rows_v1_kernel, ceil_div_int(N, V1_WARPS), V1_WARPS * 32, 0, s, dinp, dinp_compute,
                  dout, inp, w, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    int R = ceil_div_int(N, LN_ROWS_PER_CHUNK);
    launch_kernel(layernorm_backward_params_kernel, dim3(ceil_div_int(C, 32), R), dim3(32, 8), 0, s, scratch, dout,
                  inp, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    launch_kernel(layernorm_backward_finish_kernel, ceil_div_int(C, 256), 256, 0, s, dw, db, scratch, R, C);
    CUDA_CHECK_LAUNCH();
}

typedef void (*ForwardFn)(floatX *, float *, float *, const floatX *, const floatX *, const floatX *, int, int, cudaStream_t);
typedef void (*FusedFn)(floatX *, floatX *, float *, float *, const floatX *, const floatX *, const floatX *, const floatX *, int,
                        int, cudaStream_t);
typedef void (*BackwardFn)(float *, floatX *, float *, float *, float *, const floatX *, const floatX *, const floatX *,
                           const float *, const float *, int, int, cudaStream_t);
typedef struct {
    const char *name;
    ForwardFn forward;
    FusedFn fused;
    BackwardFn backward;
} Version;
static const Version versions[] = {
    {"v1 scalar", v1_layernorm_forward, v1_fused_residual_layernorm, v1_layernorm_backward},
    {"v2 llmc", gpu_layernorm_forward, gpu_fused_residual_layernorm, gpu_layernorm_backward},
};

// ---------------------------------------------------------------------------
// checks

// Host-side inputs of one shape and the CPU reference.
typedef struct {
    int N, C;
    size_t nc;
    float *x, *r, *w, *b, *res, *ref, *mean, *rstd;               // forward
    float *dout, *dinp0, *dw0, *db0, *dinp, *dw, *db;             // backward: start values and reference
} Case;

// Device inputs; misaligned: one element past a 16-byte boundary.
typedef struct {
    floatX *x, *r, *res, *w, *b, *dout;
    float *mean, *rstd;  // the reference statistics (the backward's input)
    int misaligned;
} DevIn;

static DevIn dev_in(const Case *k, int misaligned) {
    DevIn d;
    d.misaligned = misaligned;
    d.x = upload_floatX(k->x, k->nc, misaligned); d.r = upload_floatX(k->r, k->nc, misaligned);
    d.res = upload_floatX(k->res, k->nc, misaligned); d.dout = upload_floatX(k->dout, k->nc, misaligned);
    d.w = upload_floatX(k->w, k->C, misaligned); d.b = upload_floatX(k->b, k->C, misaligned);
    d.mean = upload_f32(k->mean, k->N, misaligned); d.rstd = upload_f32(k->rstd, k->N, misaligned);
    return d;
}

static void dev_in_free(DevIn *d) {
    floatX *p[] = {d->x, d->r, d->res, d->dout, d->w, d->b};
    for (int i = 0; i < 6; i++) device_buffer_free(p[i], d->misaligned);
    device_buffer_free(d->mean, d->misaligned);
    device_buffer_free(d->rstd, d->misaligned);
}

// What one run of a version gave (host copies).
typedef struct {
    float *out, *mean, *rstd, *fres, *fout, *fmean, *frstd, *rout, *rmean, *rrstd, *dinp, *dinp_bf, *dw, *db;
} Got;

static Got run_version(const Version *v, const Case *k, int misaligned) {
    int N = k->N, C = k->C;
    size_t nc = k->nc;
    DevIn in = dev_in(k, misaligned);
    Got g;
    // plain forward of the (reference-rounded) residual
    floatX *out = device_buffer<floatX>(nc, misaligned), *res = device_buffer<floatX>(nc, misaligned);
    float *mean = device_buffer<float>(N, misaligned), *rstd = device_buffer<float>(N, misaligned);
    v->forward(out, mean, rstd, in.res, in.w, in.b, N, C, 0);
    g.out = host_from_floatX(out, nc); g.mean = host_from_f32(mean, N); g.rstd = host_from_f32(rstd, N);
    // fused residual + forward
    poison(out, nc * 2); poison(mean, N * 4); poison(rstd, N * 4);
    v->fused(res, out, mean, rstd, in.r, in.x, in.w, in.b, N, C, 0);
    g.fres = host_from_floatX(res, nc); g.fout = host_from_floatX(out, nc);
    g.fmean = host_from_f32(mean, N); g.frstd = host_from_f32(rstd, N);
    // the recompute of --recompute 2: a plain forward of the fused kernel's residual
    poison(out, nc * 2); poison(mean, N * 4); poison(rstd, N * 4);
    v->forward(out, mean, rstd, res, in.w, in.b, N, C, 0);
    g.rout = host_from_floatX(out, nc); g.rmean = host_from_f32(mean, N); g.rrstd = host_from_f32(rstd, N);
    // backward from the start values, with the reference statistics
    float *dinp = device_buffer<float>(nc, misaligned), *dw = device_buffer<float>(C, misaligned);
    float *db = device_buffer<float>(C, misaligned);
    floatX *dinp_bf = device_buffer<floatX>(nc, misaligned);
    float *scratch = (float *)cudaMallocCheck(layernorm_scratch_floats(N, C) * 4);
    CUDA_CHECK(cudaMemcpy(dinp, k->dinp0, nc * 4, cudaMemcpyHostToDevice));  // (over the poison)
    CUDA_CHECK(cudaMemcpy(dw, k->dw0, C * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(db, k->db0, C * 4, cudaMemcpyHostToDevice));
    v->backward(dinp, dinp_bf, dw, db, scratch, in.dout, in.res, in.w, in.mean, in.rstd, N, C, 0);
    g.dinp = host_from_f32(dinp, nc); g.dinp_bf = host_from_floatX(dinp_bf, nc);
    g.dw = host_from_f32(dw, C); g.db = host_from_f32(db, C);
    device_buffer_free(out, misaligned); device_buffer_free(res, misaligned); device_buffer_free(mean, misaligned);
    device_buffer_free(rstd, misaligned); device_buffer_free(dinp, misaligned); device_buffer_free(dw, misaligned);
    device_buffer_free(db, misaligned); device_buffer_free(dinp_bf, misaligned);
    CUDA_CHECK(cudaFree(scratch));
    dev_in_free(&in);
    return g;
}

static void got_free(Got *g) {
    float *p[] = {g->out,  g->mean,  g->rstd, g->fres,    g->fout, g->fmean, g->frstd,
                  g->rout, g->rmean, g->rrstd, g->dinp, g->dinp_bf, g->dw,  g->db};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) free(p[i]);
}

// A forward's out, mean and rstd against the CPU's.
static void check_forward(const char *name, const char *kernel, const Case *k, const float *out, const float *mean,
                          const float *rstd) {
    char what[192];
    snprintf(what, sizeof(what), "%s %s N=%d C=%d: out", name, kernel, k->N, k->C);
    check_close(what, out, k->ref, k->nc, 2e-2, 1e-2);
    snprintf(what, sizeof(what), "%s %s N=%d C=%d: mean, rstd", name, kernel, k->N, k->C);
    check_close(what, mean, k->mean, k->N, 1e-5, 1e-4);
    check_close(what, rstd, k->rstd, k->N, 1e-5, 1e-4);
}

static void check_against_cpu(const char *name, const Case *k, const Got *g) {
    char what[192];
    int N = k->N, C = k->C;
    size_t nc = k->nc;
    check_forward(name, "layernorm forward", k, g->out, g->mean, g->rstd);
    snprintf(what, sizeof(what), "%s fused residual+layernorm N=%d C=%d: residual", name, N, C);
    check_close(what, g->fres, k->res, nc, 0, 0);
    check_forward(name, "fused residual+layernorm", k, g->fout, g->fmean, g->frstd);
    snprintf(what, sizeof(what), "%s layernorm backward N=%d C=%d: dinp (fp32)", name, N, C);
    check_close(what, g->dinp, k->dinp, nc, 1e-4, 1e-3);
    snprintf(what, sizeof(what), "%s layernorm backward N=%d C=%d: dinp (bf16 copy)", name, N, C);
    check_close(what, g->dinp_bf, k->dinp, nc, 1e-3, 1e-2);
    snprintf(what, sizeof(what), "%s layernorm backward N=%d C=%d: dweight, dbias", name, N, C);
    check_close(what, g->dw, k->dw, C, 1e-3, 1e-3);
    check_close(what, g->db, k->db, C, 1e-3, 1e-3);
}

static void check_shape(Rng *rng, int N, int C) {
    char what[192];
    Case k;
    k.N = N; k.C = C; k.nc = (size_t)N * C;
    size_t nc = k.nc;
    k.x = host_random(rng, nc, 2.0f); k.r = host_random(rng, nc, 2.0f);
    k.w = host_random(rng, C, 1.0f); k.b = host_random(rng, C, 1.0f);
    // reference: residual rounded to bf16 (as the GPU stores it), then LayerNorm
    k.res = (float *)mallocCheck(nc * 4); k.ref = (float *)mallocCheck(nc * 4);
    k.mean = (float *)mallocCheck(N * 4); k.rstd = (float *)mallocCheck(N * 4);
    for (size_t i = 0; i < nc; i++) k.res[i] = floatX_round(k.r[i] + k.x[i]);
    layernorm_forward(k.ref, k.mean, k.rstd, k.res, k.w, k.b, N, C);
    // backward: dinp accumulates onto a random start, dw/db onto random starts
    k.dout = host_random(rng, nc, 1.0f);
    k.dinp0 = host_random(rng, nc, 1.0f); k.dw0 = host_random(rng, C, 1.0f); k.db0 = host_random(rng, C, 1.0f);
    k.dinp = (float *)mallocCheck(nc * 4); k.dw = (float *)mallocCheck(C * 4); k.db = (float *)mallocCheck(C * 4);
    memcpy(k.dinp, k.dinp0, nc * 4); memcpy(k.dw, k.dw0, C * 4); memcpy(k.db, k.db0, C * 4);
    layernorm_backward(k.dinp, k.dw, k.db, k.dout, k.res, k.w, k.mean, k.rstd, N, C);

    Got g1 = run_version(&versions[0], &k, 0);
    check_against_cpu(versions[0].name, &k, &g1);
    Got g2 = run_version(&versions[1], &k, 0);
    check_against_cpu(versions[1].name, &k, &g2);
    // version 2's element-by-element path: misaligned buffers, same bits as aligned (forwards)
    Got g2m = run_version(&versions[1], &k, 1);
    check_against_cpu("v2 llmc (misaligned: element path)", &k, &g2m);
    int same = bits_equal(g2m.out, g2.out, nc * 4) && bits_equal(g2m.mean, g2.mean, N * 4) &&
               bits_equal(g2m.rstd, g2.rstd, N * 4) && bits_equal(g2m.fres, g2.fres, nc * 4) &&
               bits_equal(g2m.fout, g2.fout, nc * 4) && bits_equal(g2m.fmean, g2.fmean, N * 4) &&
               bits_equal(g2m.frstd, g2.frstd, N * 4);
    test_result(same, "v2 layernorm forwards N=%d C=%d: element path gives the vector path's bits (out, mean, rstd)", N,
                C);
    // the --recompute 2 guarantee: a LayerNorm of the fused kernel's residual gives the fused kernel's bits
    for (int m = 0; m < 2; m++) {
        const Got *g = m ? &g2m : &g2;
        same = bits_equal(g->rout, g->fout, nc * 4) && bits_equal(g->rmean, g->fmean, N * 4) &&
               bits_equal(g->rrstd, g->frstd, N * 4);
        test_result(same, "v2 layernorm N=%d C=%d%s: forward of the fused residual == fused forward, bit for bit", N,
                    C, m ? " (misaligned)" : "");
    }
    // deterministic backward: a second run gives the same bits
    Got again = run_version(&versions[1], &k, 0);
    same = bits_equal(again.dinp, g2.dinp, nc * 4) && bits_equal(again.dinp_bf, g2.dinp_bf, nc * 4) &&
           bits_equal(again.dw, g2.dw, C * 4) && bits_equal(again.db, g2.db, C * 4);
    snprintf(what, sizeof(what), "v2 layernorm backward N=%d C=%d: two runs bit-identical (dinp, dweight, dbias)", N, C);
    test_result(same, "%s", what);
    got_free(&g1); got_free(&g2); got_free(&g2m); got_free(&again);
    float *host[] = {k.x, k.r, k.w, k.b, k.res, k.ref, k.mean, k.rstd, k.dout, k.dinp0, k.dw0, k.db0, k.dinp, k.dw, k.db};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) free(host[i]);
}

// Times both versions at N x C (random bf16 inputs).
static void bench_shape(Bench *b, int N, int C) {
    size_t nc = (size_t)N * C;
    floatX *x = (floatX *)cudaMallocCheck(nc * 2), *r = (floatX *)cudaMallocCheck(nc * 2), *out = (floatX *)cudaMallocCheck(nc * 2);
    floatX *res = (floatX *)cudaMallocCheck(nc * 2), *w = (floatX *)cudaMallocCheck(C * 2), *bb = (floatX *)cudaMallocCheck(C * 2);
    float *mean = (float *)cudaMallocCheck(N * 4), *rstd = (float *)cudaMallocCheck(N * 4);
    float *dinp = (float *)cudaMallocCheck(nc * 4), *dw = (float *)cudaMallocCheck(C * 4), *db = (float *)cudaMallocCheck(C * 4);
    float *scratch = (float *)cudaMallocCheck(layernorm_scratch_floats(N, C) * 4);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(nc, 256), 256, 0, 0, x, (int64_t)nc, 5);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(nc, 256), 256, 0, 0, r, (int64_t)nc, 6);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(C, 256), 256, 0, 0, w, C, 7);
    launch_kernel(fill_hash_floatX_kernel, ceil_div_int(C, 256), 256, 0, 0, bb, C, 8);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemset(dinp, 0, nc * 4));
    CUDA_CHECK(cudaMemset(dw, 0, C * 4));
    CUDA_CHECK(cudaMemset(db, 0, C * 4));
    gpu_layernorm_forward(out, mean, rstd, x, w, bb, N, C, 0);  // real statistics for the backward
    char name[96];
    for (const Version &v : versions) {
        double ms = bench_ms(b, 20, [&] { v.forward(out, mean, rstd, x, w, bb, N, C, 0); });
        snprintf(name, sizeof(name), "%s layernorm forward %dx%d", v.name, N, C);
        bench_report(b, name, ms, 2.0 * nc * 2, 0);
    }
    for (const Version &v : versions) {
        double ms = bench_ms(b, 20, [&] { v.fused(res, out, mean, rstd, r, x, w, bb, N, C, 0); });
        snprintf(name, sizeof(name), "%s fused residual+layernorm %dx%d", v.name, N, C);
        bench_report(b, name, ms, 4.0 * nc * 2, 0);
    }
    for (const Version &v : versions) {
        double ms = bench_ms(b, 20, [&] { v.backward(dinp, res, dw, db, scratch, r, x, w, mean, rstd, N, C, 0); });
        snprintf(name, sizeof(name), "%s layernorm backward %dx%d", v.name, N, C);
        // the fewest bytes: reads dout, inp (bf16), dinp (fp32); writes dinp (fp32) and its bf16 copy
        // (both versions also re-read dout and inp for the parameter gradients: at most 14/18 of copy)
        bench_report(b, name, ms, nc * (2.0 + 2.0 + 4.0 + 4.0 + 2.0), 0);
    }
    void *dev[] = {x, r, out, res, w, bb, mean, rstd, dinp, dw, db, scratch};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) CUDA_CHECK(cudaFree(dev[i]));
}

int main(void) {
    dev_require_gpu("dev_layernorm");
    Rng rng;
    rng_seed(&rng, 2);
    const int E = DEV_EMULATED;  // the emulator: fewer rows
    const int shapes[][2] = {
        {7, 64},                // vector path, one chunk per lane
        {5, 100},               // C % 8 != 0: element path
        {E ? 150 : 300, 768},   // d12: 3 chunks per lane, a partial 128-row chunk
        {E ? 20 : 1000, 1600},  // d48: 7 chunks per lane, the last one partly past C
        {E ? 3 : 33, 2304},     // past 2048: re-read from memory, vector path
        {E ? 3 : 9, 2052},      // past 2048, element path
    };
    for (const auto &s : shapes) check_shape(&rng, s[0], s[1]);
    if (!dev_benchmarks("dev_layernorm")) return test_exit_code();

    Bench b;
    bench_init(&b);
    bench_shape(&b, 16 * 1024, 768);
    bench_shape(&b, 16 * 1024, 1600);
    bench_free(&b);
    return test_exit_code();
}
