// test_gpu_libs.cu (emulated build only): the strict parts of the libraries'
// emulation -- what the real cuDNN, cuBLASLt and CUDA runtime refuse, as
// their documentation says (tests/emu_include/cudnn.h,
// tests/cublaslt_emulator.h, tests/cuda_runtime_emulator.h) -- and the GPU
// code's answers to each refusal:
//   - cuDNN: the attention graphs llmc/attention_cudnn.cuh builds get an
//     engine on the emulated sm_90 and sm_80; the backward graph masking
//     before it subtracts the statistics (cudnn-frontend 1.0.3's order, the
//     trainer's graph rewired) matches no engine, naming the mask; the fused
//     engines' support limits (compute capability, head dim per device and
//     direction, a sequence of one) refuse the plan naming the rule, and the code refuses
//     the same shapes itself before it builds a graph; when heuristic mode A
//     offers nothing the code takes B, then FALLBACK's, and with none it says
//     which modes it tried; the bottom-right causal mask (context parallel's
//     query chunks) gets an engine for s_q < s_kv, but not for s_q > s_kv
//     nor, before cuDNN 9.6, off multiples of 64 (the code refusing the same
//     itself), and a bottom-right mask built otherwise than cudnn-frontend's
//     matches no engine, naming the node;
//   - cuBLASLt: combinations no algorithm runs are NOT_SUPPORTED with no
//     heuristic result, and llmc/matmul.cuh ends with its one message;
//   - the device: the start-up checks of llmc/device_check.cuh (more ranks
//     than GPUs for NCCL; a binary without code for the GPU's compute
//     capability, which ends the program with one line).
// Settings go through the emulator's environment (LLMC_EMU_DEVICE_CC,
// LLMC_EMU_CUDNN_HEUR_MODES); a check that must end the program runs in a
// child process, whose exit status and stderr are checked.
#ifndef LLMC_CUDA_EMULATION
#error "tests/test_gpu_libs.cu checks the emulation (build/emu/test_gpu_libs)"
#endif
#include <sys/wait.h>

#include <string>

#include "llmc/attention_cudnn.cuh"
#include "llmc/device_check.cuh"
#include "llmc/matmul.cuh"
#include "tests/testing.h"

// Runs fn in a child process; its exit status, and its stderr in *err.
template <typename Fn> static int run_child(Fn fn, std::string *err) {
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        fn();
        exit(0);
    }
    close(fds[1]);
    char buf[1024];
    ssize_t n;
    err->clear();
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) err->append(buf, (size_t)n);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
static int contains(const std::string &s, const char *needle) { return s.find(needle) != std::string::npos; }
static int one_line(const std::string &s) { return !s.empty() && s.find('\n') == s.size() - 1; }

static void set_device_cc(const char *cc) { setenv("LLMC_EMU_DEVICE_CC", cc, 1); }

// ---------------------------------------------------------------------------
// cuDNN

// A cuDNN attention set up by hand (no support check, no plans), for building
// graphs and plans directly.
static void cudnn_setup(CudnnAttention *ca, int C, int NH) {
    memset(ca, 0, sizeof(*ca));
    CUDNN_CHECK(cudnnCreate(&ca->handle));
    ca->C = C;
    ca->NH = NH;
    ca->workspace_cap = CUDNN_ENGINE_WORKSPACE;
}

// What making the plan of graph g says: "" when the plan is made.
static std::string plan_result(CudnnAttention *ca, CdGraph *g, const CdShape *sh, int backward) {
    CudnnPlan plan;
    const char *why = cudnn_make_plan(ca, g, sh, backward, &plan);
    if (why) return why;
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(plan.plan));
    return "";
}
static std::string plan_for_shape(int C, int NH, const CdShape &sh, int backward) {
    CudnnAttention ca;
    cudnn_setup(&ca, C, NH);
    CdGraph g;
    cd_graph_build(&ca, &g, &sh, backward);
    std::string r = plan_result(&ca, &g, &sh, backward);
    CUDNN_CHECK(cudnnDestroy(ca.handle));
    return r;
}
static std::string plan_for(int C, int NH, int B, int T, int backward) {
    return plan_for_shape(C, NH, cd_shape_whole(B, T, C), backward);
}

static void check_cudnn_graphs_taken(void) {
    for (const char *cc : {"9.0", "8.0"}) {
        set_device_cc(cc);
        std::string f = plan_for(128, 2, 2, 64, 0), b = plan_for(128, 2, 2, 64, 1);
        test_result(f.empty() && b.empty(), "emulated cuDNN on sm %s takes the attention graphs at head size 64%s%s%s",
                    cc, f.empty() ? "" : ": forward: ", f.c_str(), b.empty() ? "" : b.c_str());
    }
    set_device_cc("9.0");
}

// The backward graph as cudnn-frontend 1.0.3 built it, with the causal mask on
// the scaled scores before the statistics are subtracted: the trainer's graph,
// finalized, then rewired (exp(mask(s) - stats) for exp(mask(s - stats))).
static void rewire_mask_before_stats(EmuCudnnGraph *g) {
    EmuCudnnOp *sub = NULL, *sel = NULL, *ex = NULL;
    for (EmuCudnnOp &op : g->ops)
        if (op.kind == EMU_CD_POINTWISE && op.mode == CUDNN_POINTWISE_SUB && op.in[1].uid == CD_STATS) sub = &op;
    CHECK(sub, "no scores - statistics in the backward graph");
    const EmuCudnnTensor scaled = sub->in[0], centred = sub->out;
    for (EmuCudnnOp &op : g->ops) {
        if (op.kind != EMU_CD_POINTWISE || op.in[0].uid != centred.uid) continue;
        if (op.mode == CUDNN_POINTWISE_BINARY_SELECT) sel = &op;
        if (op.mode == CUDNN_POINTWISE_GEN_INDEX || op.mode == CUDNN_POINTWISE_BINARY_SELECT) op.in[0] = scaled;
    }
    CHECK(sel, "no causal mask of the centred scores");
    for (EmuCudnnOp &op : g->ops)
        if (op.kind == EMU_CD_POINTWISE && op.mode == CUDNN_POINTWISE_EXP && op.in[0].uid == sel->out.uid) ex = &op;
    CHECK(ex, "no exp of the masked scores");
    sub->in[0] = sel->out;
    ex->in[0] = centred;
}

static void check_cudnn_mask_order(void) {
    CudnnAttention ca;
    cudnn_setup(&ca, 128, 2);
    CdGraph g;
    const CdShape sh = cd_shape_whole(2, 64, 128);
    cd_graph_build(&ca, &g, &sh, 1);
    cudnnBackendDescriptor_t graph;
    CUDNN_CHECK(cd_operation_graph(ca.handle, &g, &graph));
    EmuCudnnGraph planted = *graph->graph;
    EmuSdpa sdpa;
    std::string as_built, why;
    int taken = emu_sdpa_match(planted, &sdpa, &as_built);
    rewire_mask_before_stats(&planted);
    int refused = !emu_sdpa_match(planted, &sdpa, &why);
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(graph));
    cd_graph_free(&g);
    CUDNN_CHECK(cudnnDestroy(ca.handle));
    test_result(taken && refused && contains(why, "the causal mask, applied after the statistics are subtracted"),
                "emulated cuDNN's engine takes the backward graph but not one that masks before subtracting the "
                "statistics, naming the mask (%s)", why.c_str());
}

// The fused engines' limits, on plans made directly (the code's own check is bypassed).
static void check_cudnn_engine_limits(void) {
    struct Case {
        const char *cc;
        int C, NH, T, backward;
        const char *expect;  // in the refusal; NULL: the plan is made
    } cases[] = {
        {"9.0", 24, 2, 64, 0, "head dim 12: the forward takes a multiple of 8"},
        {"8.0", 272, 2, 64, 1, "head dim 136: the backward takes a multiple of 8 up to 128 on compute capability 8.0"},
        {"8.0", 272, 2, 64, 0, NULL},  // the forward takes 136 on sm_80 (cuDNN 9.19)
        {"9.0", 272, 2, 64, 1, NULL},  // Hopper's backward up to 256
        {"9.0", 528, 2, 64, 1, "head dim 264: the backward takes a multiple of 8 up to 256"},
        {"7.5", 128, 2, 64, 0, "needs compute capability 8.0 or newer, this device has 7.5"},
        {"9.0", 128, 2, 1, 1, "the backward of s_q = s_kv = 1 is not supported"},
    };
    for (const Case &c : cases) {
        set_device_cc(c.cc);
        std::string r = plan_for(c.C, c.NH, 1, c.T, c.backward);
        int ok = c.expect ? contains(r, "engine") && contains(r, c.expect) : r.empty();
        test_result(ok, "emulated cuDNN on sm %s, head size %d, T=%d, %s: %s (%s)", c.cc, c.C / c.NH, c.T,
                    c.backward ? "backward" : "forward", c.expect ? "refused, naming the rule" : "plan made",
                    r.empty() ? "made" : r.c_str());
    }
    set_device_cc("9.0");
}

// The code's own check refuses the same shapes before any graph: cudnn_attention_try_init.
static void check_cudnn_refused_before_graphs(void) {
    struct Case {
        const char *cc;
        int C, NH, T;
        const char *expect;
    } cases[] = {
        {"9.0", 24, 2, 64, "head size 12 (n-embd / n-head) is not a multiple of 8"},
        {"8.6", 272, 2, 64, "head size 136 is over 128"},
        {"9.0", 528, 2, 64, "head size 264 is over 256"},
        {"7.5", 128, 2, 64, "needs compute capability 8.0 or newer; this GPU has 7.5"},
        {"9.0", 128, 2, 1, "sequence length 1"},
    };
    for (const Case &c : cases) {
        set_device_cc(c.cc);
        GPTConfig cfg = {c.T, 2, 128, 1, c.NH, c.C};
        CudnnAttention ca;
        const char *why = cudnn_attention_try_init(&ca, &cfg, 1, c.T);
        test_result(why && contains(why, c.expect) && !ca.enabled,
                    "cuDNN attention on sm %s at head size %d, T=%d is refused before any graph: %s", c.cc,
                    c.C / c.NH, c.T, why ? why : "(accepted)");
    }
    set_device_cc("9.0");
}

// Heuristic mode A offering nothing: the code asks B, then FALLBACK.
static void check_cudnn_heuristic_fallback(void) {
    GPTConfig cfg = {64, 2, 128, 1, 2, 128};
    for (const char *modes : {"B", "FALLBACK", "none"}) {
        setenv("LLMC_EMU_CUDNN_HEUR_MODES", modes, 1);
        CudnnAttention ca;
        const char *why = cudnn_attention_try_init(&ca, &cfg, 2, 64);
        if (strcmp(modes, "none") != 0) {
            test_result(why == NULL, "cuDNN attention plans made when only heuristic mode %s offers the engine%s%s",
                        modes, why ? ": " : "", why ? why : "");
            if (!why) cudnn_attention_free(&ca);
        } else {
            test_result(why && contains(why, "heuristic modes A, B and fallback offered 0 configs") &&
                            contains(why, "offers no engine"),
                        "with no heuristic mode offering an engine, the refusal names the modes tried and cuDNN's "
                        "last error (%s)", why ? why : "accepted");
        }
    }
    unsetenv("LLMC_EMU_CUDNN_HEUR_MODES");
}

// The bottom-right causal mask: B=1 sequences of s_q queries against s_kv keys in separate buffers (q_rows
// s_q, kv_rows s_kv, kv 2C a row, as context parallel's gathered K and V), C=128 NH=2.
static CdShape bottom_right_shape(int s_q, int s_kv) {
    CdShape sh = {1, s_q, s_kv, s_q, s_kv, 1, 256};
    return sh;
}
static void check_cudnn_bottom_right(void) {
    for (const char *cc : {"9.0", "8.0"}) {
        set_device_cc(cc);
        std::string f = plan_for_shape(128, 2, bottom_right_shape(40, 120), 0),
                    b = plan_for_shape(128, 2, bottom_right_shape(40, 120), 1);
        test_result(f.empty() && b.empty(), "emulated cuDNN on sm %s takes the bottom-right graphs of 40 queries "
                    "against 120 keys%s%s%s", cc, f.empty() ? "" : ": forward: ", f.c_str(), b.c_str());
    }
    set_device_cc("9.0");
    for (int backward = 0; backward < 2; backward++) {
        std::string r = plan_for_shape(128, 2, bottom_right_shape(64, 32), backward);
        test_result(contains(r, "engine") && contains(r, "the bottom-right causal mask does not take s_q > s_kv"),
                    "emulated cuDNN refuses the bottom-right %s of 64 queries against 32 keys, naming the rule (%s)",
                    backward ? "backward" : "forward", r.empty() ? "made" : r.c_str());
    }
    char more[256];
    const char *code_more = cudnn_attention_unsupported(90, 64, 64, 32, 1, 91900, more, sizeof(more));
    test_result(code_more && contains(code_more, "takes no more queries than keys"),
                "the code refuses 64 queries against 32 keys itself, before any graph (%s)",
                code_more ? code_more : "accepted");
    // before cuDNN 9.6: s_q and s_kv multiples of 64 only (the engine's rule, then the code's own)
    CudnnAttention ca;
    cudnn_setup(&ca, 128, 2);
    CdGraph g;
    const CdShape off = bottom_right_shape(40, 120), tiles = bottom_right_shape(64, 128);
    cd_graph_build(&ca, &g, &off, 1);
    cudnnBackendDescriptor_t graph;
    CUDNN_CHECK(cd_operation_graph(ca.handle, &g, &graph));
    EmuSdpa sdpa;
    std::string why;
    int taken = emu_sdpa_match(*graph->graph, &sdpa, &why);
    std::string old = taken ? emu_sdpa_unsupported(sdpa, 90, 90500) : why, now = emu_sdpa_unsupported(sdpa, 90, 90600);
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(graph));
    cd_graph_free(&g);
    char text[256];
    const char *code_old = cudnn_attention_unsupported(90, 64, off.s_q, off.s_kv, 1, 90500, text, sizeof(text));
    std::string code_old_s = code_old ? code_old : "";
    test_result(sdpa.bottom_right && contains(old, "multiples of 64 only before cuDNN 9.6.0") && now.empty() &&
                    contains(code_old_s, "takes multiples of 64") &&
                    !cudnn_attention_unsupported(90, 64, tiles.s_q, tiles.s_kv, 1, 90500, text, sizeof(text)) &&
                    !cudnn_attention_unsupported(90, 64, off.s_q, off.s_kv, 1, 90600, text, sizeof(text)),
                "the bottom-right mask off multiples of 64 refused on cuDNN 9.5 by the engine (%s) and the code (%s), "
                "taken on 9.6", old.c_str(), code_old_s.c_str());
    // a bottom-right mask built otherwise: the row index + s_kv compared with the column, without the - s_q
    cd_graph_build(&ca, &g, &off, 0);
    CUDNN_CHECK(cd_operation_graph(ca.handle, &g, &graph));
    EmuCudnnGraph planted = *graph->graph;
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(graph));
    cd_graph_free(&g);
    CUDNN_CHECK(cudnnDestroy(ca.handle));
    int64_t with_skv = -1, shifted = -1;
    for (size_t i = 0; i < planted.ops.size(); i++) {
        const EmuCudnnOp &op = planted.ops[i];
        if (op.kind == EMU_CD_POINTWISE && op.mode == CUDNN_POINTWISE_SUB && op.in.size() == 2 &&
            op.in[1].uid == CD_SEQ_Q) {
            with_skv = op.in[0].uid, shifted = op.out.uid;
            planted.ops.erase(planted.ops.begin() + (long)i);
            break;
        }
    }
    for (EmuCudnnOp &op : planted.ops)
        for (EmuCudnnTensor &t : op.in)
            if (t.uid == shifted) t.uid = with_skv;
    int refused = with_skv >= 0 && !emu_sdpa_match(planted, &sdpa, &why);
    test_result(refused && contains(why, "the bottom-right mask's row index + s_kv - s_q"),
                "emulated cuDNN gives no engine to a bottom-right mask without the - s_q, naming the node (%s)",
                why.c_str());
}

// ---------------------------------------------------------------------------
// cuBLASLt

static cublasStatus_t lt_heuristic(int epilogue, int64_t aux_ld, int m, cudaDataType_t a_type, uint32_t align_a,
                                   int *found) {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtCreate(&h));
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)epilogue;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    static bf16 aux_buf[64 * 64];
    void *aux = aux_buf;
    if (epilogue & EMU_LT_EPILOGUE_AUX) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    }
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, a_type, m, 16, m));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, 16, 8, 16));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, m, 8, m));
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                      sizeof(align_a)));
    cublasLtMatmulHeuristicResult_t r;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, d, a, b, c, c, pref, 1, &r, found);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(a));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(b));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(c));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(d));
    CUBLAS_CHECK(cublasLtDestroy(h));
    return st;
}

static void check_cublaslt_not_supported(void) {
    struct Case {
        const char *what;
        int epilogue;
        int64_t aux_ld;
        int m;
        cudaDataType_t a_type;
        uint32_t align_a;
        cublasStatus_t expect;
    } cases[] = {
        {"a bf16 GELU_AUX at aux ld 16 (supported)", CUBLASLT_EPILOGUE_GELU_AUX, 16, 16, CUDA_R_16BF, 256,
         CUBLAS_STATUS_SUCCESS},
        {"a GELU aux leading dimension not divisible by 8", CUBLASLT_EPILOGUE_GELU_AUX, 12, 12, CUDA_R_16BF, 256,
         CUBLAS_STATUS_NOT_SUPPORTED},
        {"an fp32 A with bf16 B", CUBLASLT_EPILOGUE_DEFAULT, 0, 16, CUDA_R_32F, 256, CUBLAS_STATUS_NOT_SUPPORTED},
        {"a bf16 A less aligned than one element", CUBLASLT_EPILOGUE_DEFAULT, 0, 16, CUDA_R_16BF, 1,
         CUBLAS_STATUS_NOT_SUPPORTED},
    };
    for (const Case &c : cases) {
        int found = -1;
        cublasStatus_t st = lt_heuristic(c.epilogue, c.aux_ld, c.m, c.a_type, c.align_a, &found);
        int ok = st == c.expect && found == (c.expect == CUBLAS_STATUS_SUCCESS ? 1 : 0);
        test_result(ok, "emulated cuBLASLt heuristic, %s: status %d with %d results", c.what, (int)st, found);
    }
}

// matmul.cuh's message for a combination with no algorithm (a GELU epilogue writing
// its pre-activation at 12 rows: the aux leading dimension 12 is not divisible by 8).
static void check_matmul_no_algorithm_message(void) {
    std::string err;
    int rc = run_child(
        [] {
            static MatmulContext mc;  // (static: still reachable when the child exits, for LeakSanitizer)
            static bf16 *inp, *W, *out, *pre;
            const int N = 4, IC = 16, OC = 12;
            matmul_init(&mc);
            inp = (bf16 *)cudaMallocCheck(sizeof(bf16) * N * IC), W = (bf16 *)cudaMallocCheck(sizeof(bf16) * OC * IC);
            out = (bf16 *)cudaMallocCheck(sizeof(bf16) * N * OC), pre = (bf16 *)cudaMallocCheck(sizeof(bf16) * N * OC);
            gpu_matmul_forward(&mc, out, pre, inp, W, NULL, N, IC, OC, 0);
        },
        &err);
    test_result(rc == 1 && one_line(err) && contains(err, "cuBLASLt has no algorithm for m=12 n=4 k=16") &&
                    contains(err, "(cuBLASLt status 15)"),
                "matmul.cuh ends with one line when cuBLASLt has no algorithm (exit %d: %s)", rc, err.c_str());
}

// ---------------------------------------------------------------------------
// the device

static void check_ranks_per_gpu(void) {
    char buf[384];
    int ok = !device_ranks_problem(0, 0, 1, 1, 1, buf, sizeof(buf)) &&  // one rank, one GPU
             !device_ranks_problem(3, 3, 4, 4, 1, buf, sizeof(buf)) &&  // a GPU each
             !device_ranks_problem(1, 1, 2, 1, 0, buf, sizeof(buf));    // staged MPI shares the GPU
    const char *why = device_ranks_problem(0, 0, 4, 2, 1, buf, sizeof(buf));
    ok &= why && contains(why, "rank 0: 4 ranks on this node but 2 GPUs") && contains(why, "--comm mpi") &&
          contains(why, "ppr:2:node");
    test_result(ok, "NCCL with more ranks than GPUs on a node is refused, naming both counts (%s)", why ? why : "-");
    why = device_ranks_problem(5, 2, 0, 2, 1, buf, sizeof(buf));  // the launcher gives no local count
    test_result(why && contains(why, "rank 5: at least 3 ranks on this node but 2 GPUs"),
                "without the launcher's local count, the rank past the GPUs says at least how many (%s)",
                why ? why : "-");
}

static void check_device_code(void) {
    static const int archs[] = {__CUDA_ARCH_LIST__};  // the Makefile's CUDA_ARCHS: sm_80 sm_90 [sm_100]
    const int last_ptx = archs[sizeof(archs) / sizeof(archs[0]) - 1] / 10;
    struct Case {
        const char *cc;
        int binary, ptx;  // ptx 0: the last architecture's PTX, JIT-compiled
    } cases[] = {{"9.0", 90, 90}, {"8.6", 80, 80}, {"8.0", 80, 80}, {"12.0", 120, 0}};
    for (const Case &c : cases) {
        set_device_cc(c.cc);
        cudaFuncAttributes a;
        cudaError_t e = cudaFuncGetAttributes(&a, device_probe_kernel);
        test_result(e == cudaSuccess && a.binaryVersion == c.binary && a.ptxVersion == (c.ptx ? c.ptx : last_ptx),
                    "a device of compute capability %s runs code %d (PTX %d) of the fat binary", c.cc,
                    a.binaryVersion, a.ptxVersion);
    }
    set_device_cc("7.5");
    std::string err;
    int rc = run_child([] { device_check_code(); }, &err);
    test_result(rc == 2 && one_line(err) && contains(err, "compute capability 7.5 but this program holds device code "
                                                          "for sm_80 sm_90") &&
                    contains(err, "make CUDA_ARCHS=\"sm_75\""),
                "a GPU the binary has no code for ends the program with one line (exit %d: %s)", rc, err.c_str());
    set_device_cc("9.0");
}

int main(void) {
    check_cudnn_graphs_taken();
    check_cudnn_mask_order();
    check_cudnn_engine_limits();
    check_cudnn_refused_before_graphs();
    check_cudnn_heuristic_fallback();
    check_cudnn_bottom_right();
    check_cublaslt_not_supported();
    check_matmul_no_algorithm_message();
    check_ranks_per_gpu();
    check_device_code();
    return test_exit_code();
}
