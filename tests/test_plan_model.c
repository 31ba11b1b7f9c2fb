// test_plan_model.c: each piece of the planner's GPU model (llmc/plan_model.h) against the formula it
// cites (docs/planner.md), written out here on its own: a GEMM's time at the compute-bound extreme (tile
// and wave quantization over the SMs at the achievable tensor-core rate; without SMs the plain roofline)
// and at the memory-bound one (its bytes at the achievable HBM bandwidth), a memory-bound kernel, causal
// flash attention; NCCL's collectives at small messages (the latency: 2 (p-1) ring steps, the tree's
// 2 (local chain + log2 nodes) steps, NVLS) and large ones (the bus-bandwidth volume 2 (p-1)/p n over the
// bottleneck: NVLink in a node, the group's NICs across nodes), ring against tree (tree at small
// messages across many nodes, ring at large), the reduce-scatter's half volume, and the nodes a group
// crosses. A planted error in any of these formulas fails one of the checks.
#include "llmc/plan_model.h"
#include "tests/testing.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-9 + 1e-9 * fabs(b); }

static Cluster preset(const char *name) {
    Cluster c;
    char err[512];
    if (cluster_load(name, &c, err, sizeof(err))) die_at(__FILE__, __LINE__, "%s", err);
    return c;
}

static void gemm_checks(void) {
    Cluster c = preset("dgx-h100");
    double rate = c.peak_tflops * 1e12 * c.matmul_eff, hbm = c.hbm_gbs * 1e9 * c.hbm_eff, gap = c.launch_us * 1e-6;
    // compute-bound: 8192^3; tiles 64 x 32 = 2048 over 132 SMs: 16 waves, each a full wave's time
    double M = 8192, K = 8192, N = 8192, tiles = (M / c.tile_m) * (N / c.tile_n), waves = ceil(tiles / c.sms);
    double want = waves * 2 * c.tile_m * c.tile_n * K / (rate / c.sms) + gap;
    double got = plan_gpu_gemm_s(&c, M, K, N, 0);
    test_result(near(got, want), "gemm_compute_bound_is_waves_of_tiles (8192^3 on %d SMs: %.4f ms, formula %.4f)",
                c.sms, got * 1e3, want * 1e3);
    test_result(got >= 2 * M * K * N / rate + gap && got <= 2 * M * K * N / rate * waves / (tiles / c.sms) + gap * 1.0001,
                "gemm_quantization_costs_at_most_the_last_wave");
    Cluster flat = c;
    flat.sms = 0;
    test_result(near(plan_gpu_gemm_s(&flat, M, K, N, 0), 2 * M * K * N / rate + gap),
                "gemm_without_sms_is_the_roofline_2MKN_over_the_achievable_rate");
    // split-K: 768 x 2304 output tiles (6 x 9 = 54 < 132 SMs), K 65536: split 2 ways, one wave
    double split = floor(c.sms / 54.0);
    want = 1 * 2 * c.tile_m * c.tile_n * (65536 / split) / (rate / c.sms) + gap;
    test_result(near(plan_gpu_gemm_s(&c, 768, 65536, 2304, 0), want), "gemm_splits_k_over_idle_sms (split %g)", split);
    // memory-bound: a row of 16 through an 8192 x 8192 weight: its bytes at the achievable bandwidth
    M = 16;
    want = 2 * (M * K + K * N + M * N) / hbm + gap;
    got = plan_gpu_gemm_s(&c, M, K, N, 0);
    test_result(near(got, want), "gemm_memory_bound_is_its_bytes_at_the_achievable_hbm (%.4f ms, formula %.4f)",
                got * 1e3, want * 1e3);
    test_result(near(plan_gpu_mem_s(&c, 1e9), 1e9 / hbm + gap), "memory_bound_kernel_is_bytes_over_hbm_plus_the_gap");
    // causal flash attention: 2 B T^2 Cl FLOPs forward, 2.5x backward, at the attention fraction of the peak
    double B = 8, T = 4096, Cl = 4096, att = c.peak_tflops * 1e12 * c.attention_eff;
    test_result(near(plan_gpu_attention_s(&c, B, T, 1, Cl, 0), 2 * B * T * T * Cl / att + gap) &&
                    near(plan_gpu_attention_s(&c, B, T, 1, Cl, 1), 2.5 * 2 * B * T * T * Cl / att + 2 * gap),
                "attention_is_2BT2C_forward_and_2_5x_backward");
}

static void collective_checks(void) {
    Cluster h = preset("dgx-h100"), a = preset("dgx-a100");
    PlanGroup node = {8, 1};
    double us = h.intra_us * 1e-6, n = 8;
    // small message in a node: the ring's 2 (p-1) steps; NVLS's few steps win
    double ring = plan_collective_algo(&h, PLAN_ALL_REDUCE, n, node, PLAN_RING);
    test_result(near(ring, 2 * 7 * us + 2.0 * 7 / 8 * n / (h.intra_gbs * 1e9)),
                "ring_all_reduce_small_is_2_p_minus_1_steps (%.1f us)", ring * 1e6);
    PlanAlgo algo;
    double best = plan_collective(&h, PLAN_ALL_REDUCE, n, node, &algo);
    test_result(algo == PLAN_NVLS && near(best, 4 * us + 2.0 * 7 / 8 * n / (h.nvls_gbs * 1e9)),
                "nvls_all_reduce_in_an_h100_node (%s, %.1f us)", plan_algo_names[algo], best * 1e6);
    // large message in a node: the bus bandwidth volume 2 (p-1)/p n
    n = 1e9;
    ring = plan_collective_algo(&a, PLAN_ALL_REDUCE, n, node, PLAN_RING);
    test_result(near(ring, 2 * 7 * a.intra_us * 1e-6 + 2.0 * 7 / 8 * n / (a.intra_gbs * 1e9)),
                "ring_all_reduce_large_is_2_p_minus_1_over_p_n_over_the_bus_bandwidth (%.2f ms)", ring * 1e3);
    test_result(near(plan_collective_algo(&a, PLAN_REDUCE_SCATTER, n, node, PLAN_RING),
                     7 * a.intra_us * 1e-6 + 7.0 / 8 * n / (a.intra_gbs * 1e9)),
                "reduce_scatter_is_half_the_all_reduce");
    // across 48 nodes of 8: ring's 2 (p-1) network steps against the tree's 2 (7 + log2 48) steps
    PlanGroup wide = {384, 48};
    double net = 8 * a.inter_gbs, bw = net < a.intra_gbs ? net : a.intra_gbs;
    n = 8;
    ring = plan_collective_algo(&a, PLAN_ALL_REDUCE, n, wide, PLAN_RING);
    double tree = plan_collective_algo(&a, PLAN_ALL_REDUCE, n, wide, PLAN_TREE);
    test_result(near(ring, 2 * 383 * a.inter_us * 1e-6 + 2.0 * 383 / 384 * n / (bw * 1e9)) &&
                    near(tree, 2 * (7 * a.intra_us + 6 * a.inter_us) * 1e-6 + 2.0 * 383 / 384 * n / (bw * a.tree_eff * 1e9)),
                "ring_and_tree_latency_across_nodes (ring %.0f us, tree %.0f us)", ring * 1e6, tree * 1e6);
    plan_collective(&a, PLAN_ALL_REDUCE, n, wide, &algo);
    test_result(algo == PLAN_TREE, "tree_wins_small_messages_across_48_nodes (%s)", plan_algo_names[algo]);
    n = 4e9;
    plan_collective(&a, PLAN_ALL_REDUCE, n, wide, &algo);
    test_result(algo == PLAN_RING && near(plan_collective_algo(&a, PLAN_ALL_REDUCE, n, wide, PLAN_RING),
                                          2 * 383 * a.inter_us * 1e-6 + 2.0 * 383 / 384 * n / (bw * 1e9)),
                "ring_wins_large_messages_at_the_nics_bandwidth (%s, %.0f GB/s: 8 NICs of %.0f)", plan_algo_names[algo],
                bw, a.inter_gbs);
    // the nodes a group crosses (data outermost, then pipeline, then tensor)
    a.nodes = 48;
    PlanGroup g1 = plan_group(&a, 1, 8), g2 = plan_group(&a, 1, 384), g3 = plan_group(&a, 8, 48), g4 = plan_group(&a, 2, 8);
    test_result(g1.nodes == 1 && g2.nodes == 48 && g3.nodes == 48 && g4.nodes == 2,
                "groups_cross_the_nodes_they_span (%d %d %d %d)", g1.nodes, g2.nodes, g3.nodes, g4.nodes);
}

int main(void) {
    gemm_checks();
    collective_checks();
    return test_failures ? 1 : 0;
}
