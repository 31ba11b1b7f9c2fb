// test_pp_plan.c: the pipeline plan. llmc/pp_layout.h: the layers of each
// stage (even, and as --pp-layers lists them, with its bad inputs) and the
// layout each rank holds, mapped onto the global order (together they cover
// the whole model's parameters once). llmc/pp_schedule.h: the schedules over every
// p <= 8, v <= 4 (interleaved), m <= 32: each list passes the checker (F, B, W
// in order on the right stages, every send matched by one receive), runs in
// the blocking-send simulator without deadlock under unit and under uneven
// times, holds at most the theory's live activations on each rank (exactly the
// theory's peak), and with F = B = W = 1 has the closed-form bubble (zb1p: at
// a third of 1f1b's idle time). The checker and the simulator are themselves
// tested on broken lists: a dropped receive, a swapped B and W, and a receive
// posted before the send it depends on (a deadlock the checker cannot see).
#include "llmc/param_map.h"
#include "llmc/pp_layout.h"
#include "llmc/pp_schedule.h"
#include "tests/testing.h"

static void mark_run(void *ctx, int64_t local, int64_t global, int64_t n) {
    (void)local;
    for (int64_t i = 0; i < n; i++) ((unsigned char *)ctx)[global + i]++;
}

static void test_layout(void) {
    GPTConfig cfg = {64, 100, pad_vocab(100), 12, 2, 16};
    ParamLayout pl;
    param_layout_init(&pl, &cfg);
    PPLayout pp;
    char err[256] = "";
    int counts[5], ok = pp_layout_init(&pp, 12, 5, 1, "", err, sizeof err) == 0;
    for (int g = 0; ok && g < 5; g++) counts[g] = pp.first_layer[g + 1] - pp.first_layer[g];
    test_result(ok && counts[0] == 2 && counts[1] == 3 && counts[2] == 3 && counts[3] == 2 && counts[4] == 2,
                "pp_layout_even_split_gives_the_middle_stages_the_extra_layers (12 over 5: %d %d %d %d %d)",
                counts[0], counts[1], counts[2], counts[3], counts[4]);
    pp_layout_free(&pp);
    // each rank's layout (pp_holding) maps onto the global order (param_map.h): over the ranks, every
    // parameter of the whole model's buffer exactly once and no alignment gap (the last stage's wte copy
    // lives outside its layout)
    unsigned char layers[12];
    for (int S = 1; S <= 12; S++) {
        for (int v = 1; v <= 2 && S * v <= 12; v++) {
            pp_layout_init(&pp, 12, S, v, "", err, sizeof err);
            unsigned char *seen = (unsigned char *)callocCheck((size_t)pl.num_elements, 1);
            int64_t params = 0, stage_params = 0;
            for (int r = 0; r < S; r++) {
                ParamHolding h = pp_holding(&pp, r, -1, 12, layers);
                ParamLayout local;
                param_layout_init_held(&local, &cfg, &h, 1, 0);
                ParamMap map;
                param_map_init(&map, &local);
                param_map_runs(&map, 0, local.num_elements, mark_run, seen);
                params += local.num_params;
                param_map_free(&map);
                param_layout_free(&local);
            }
            for (int g = 0; g < S * v; g++) stage_params += pp_stage_params(&cfg, &pp, g);
            int bad = 0;  // each tensor's elements once, the alignment gaps never
            for (int t = 0; t < pl.num_tensors; t++) {
                const ParamTensor *x = &pl.tensors[t];
                int64_t end = t + 1 < pl.num_tensors ? pl.tensors[t + 1].offset : pl.num_elements;
                for (int64_t i = x->offset; i < end; i++) bad += seen[i] != (i < x->offset + x->numel);
            }
            test_result(bad == 0 && params == pl.num_params && stage_params == pl.num_params,
                        "pp_layout_%d_ranks_x_%d_chunks_cover_the_model_once (%d elements wrong, %lld params)",
                        S, v, bad, (long long)params);
            free(seen);
            pp_layout_free(&pp);
        }
    }
    ok = pp_layout_init(&pp, 12, 2, 2, "1,5,5,1", err, sizeof err) == 0 && pp.first_layer[1] == 1 &&
         pp.first_layer[2] == 6 && pp.first_layer[3] == 11 && pp.first_layer[4] == 12;
    test_result(ok, "pp_layout_pp_layers_as_listed (%s)", err);
    pp_layout_free(&pp);
    const char *bad_lists[] = {"6,6,", "6", "0,12", "6,7", "a,b", "6,6,0"};
    for (size_t i = 0; i < sizeof(bad_lists) / sizeof(bad_lists[0]); i++) {
        err[0] = 0;
        ok = pp_layout_init(&pp, 12, 2, 1, bad_lists[i], err, sizeof err) == 1 && strstr(err, "--pp-layers");
        test_result(ok, "pp_layout_refuses_pp_layers_%zu ('%s': %s)", i, bad_lists[i], err);
        pp_layout_free(&pp);
    }
    ok = pp_layout_init(&pp, 12, 7, 2, "", err, sizeof err) == 1 && strstr(err, "more than the model's 12 layers");
    test_result(ok, "pp_layout_refuses_more_stages_than_layers (%s)", err);
    pp_layout_free(&pp);
    param_layout_free(&pl);
}

static int simulate(const PPSchedule *s, PPTimes t, PPSim *sim, char *err) {
    return pp_simulate(s, t, 0, sim, err, 256);
}

// every list of one (kind, p, v, m); returns the number of failures printed
static int check_one(PPKind kind, int p, int v, int m, double *zb_over_1f1b) {
    PPSchedule s;
    PPSim sim;
    char err[256] = "";
    int fails = 0;
    pp_schedule_build(&s, kind, p, v, m);
#define ONE_FAIL(...) do { if (fails++ < 1) test_result(0, __VA_ARGS__); } while (0)
    if (pp_simulate(&s, (PPTimes){1, 1, 1, 0}, 0, &sim, err, sizeof err)) {
        ONE_FAIL("pp_%s_p%d_v%d_m%d_runs (%s)", pp_kind_names[kind], p, v, m, err);
    } else {
        double theory = pp_bubble_theory(kind, p, v, m);
        if (kind == PP_ZB1P && m < p) theory = pp_bubble_theory(PP_1F1B, p, v, m);  // (no closed form: at most 1f1b's)
        if (kind == PP_ZB1P && m < p ? sim.bubble > theory + 1e-12 : fabs(sim.bubble - theory) > 1e-12)
            ONE_FAIL("pp_%s_p%d_v%d_m%d_bubble (simulated %.6f, theory %.6f)", pp_kind_names[kind], p, v, m,
                     sim.bubble, theory);
        if (kind == PP_ZB1P && m >= p) {
            // idle time against 1f1b's (p-1)(F+B+W) = 3(p-1) units
            double idle = sim.span * p - 3.0 * m * p;
            double ratio = p > 1 ? idle / (3.0 * (p - 1) * p) : 0;
            if (ratio > *zb_over_1f1b) *zb_over_1f1b = ratio;
        }
        for (int r = 0; r < p; r++) {
            int want = pp_peak_alive_theory(kind, p, v, m, r);
            int want_in_flight = pp_peak_in_flight_theory(kind, p, v, m, r);
            if (sim.peak_alive[r] != want || sim.peak_in_flight[r] != want_in_flight)
                ONE_FAIL("pp_%s_p%d_v%d_m%d_peak_activations (rank %d: %d alive, %d between F and B; theory %d, %d)",
                         pp_kind_names[kind], p, v, m, r, sim.peak_alive[r], sim.peak_in_flight[r], want,
                         want_in_flight);
        }
    }
    pp_sim_free(&sim);
    // uneven compute and a transfer time: the same lists still run to the end
    if (simulate(&s, (PPTimes){1.0, 2.3, 0.7, 0.45}, &sim, err))
        ONE_FAIL("pp_%s_p%d_v%d_m%d_runs_uneven_times (%s)", pp_kind_names[kind], p, v, m, err);
    pp_sim_free(&sim);
    // the fused lists the GPU trainer runs over NCCL (receives with the sends before their consumer,
    // every message of a group completing together, each pair's messages in one order) run to the end
    // too; not the interleaved ones, whose fused lists can deadlock (the trainer refuses that pairing)
    if (kind == PP_INTERLEAVED) {
        pp_schedule_free(&s);
        return fails;
    }
    pp_schedule_fuse_receives(&s);
    if (simulate(&s, (PPTimes){1, 1, 1, 0}, &sim, err)) {
        ONE_FAIL("pp_%s_p%d_v%d_m%d_fused_runs (%s)", pp_kind_names[kind], p, v, m, err);
    } else if (kind != PP_ZB1P && fabs(sim.bubble - pp_bubble_theory(kind, p, v, m)) > 1e-12) {
        // (zb1p's fused lists may idle more than its unit-time theory: checked to run, not timed)
        ONE_FAIL("pp_%s_p%d_v%d_m%d_fused_bubble (simulated %.6f, theory %.6f)", pp_kind_names[kind], p, v, m,
                 sim.bubble, pp_bubble_theory(kind, p, v, m));
    }
    pp_sim_free(&sim);
    if (simulate(&s, (PPTimes){1.0, 2.3, 0.7, 0.45}, &sim, err))
        ONE_FAIL("pp_%s_p%d_v%d_m%d_fused_runs_uneven_times (%s)", pp_kind_names[kind], p, v, m, err);
    pp_sim_free(&sim);
#undef ONE_FAIL
    pp_schedule_free(&s);
    return fails;
}

static void test_sweep(void) {
    for (int kind = 0; kind < PP_KIND_COUNT; kind++) {
        int lists = 0, fails = 0;
        double zb_ratio = 0;
        for (int p = 1; p <= 8; p++)
            for (int v = 1; v <= 4; v++)
                for (int m = 1; m <= 32; m++) {
                    if (pp_schedule_unusable((PPKind)kind, p, v, m)) continue;
                    fails += check_one((PPKind)kind, p, v, m, &zb_ratio);
                    lists++;
                }
        test_result(fails == 0 && lists > 0, "pp_%s_every_list_checks_and_meets_theory (%d configurations, %d failed)",
                    pp_kind_names[kind], lists, fails);
        if (kind == PP_ZB1P)
            test_result(fabs(zb_ratio - 1.0 / 3) < 1e-9, "pp_zb1p_idle_a_third_of_1f1b (worst %.6f over m >= p)", zb_ratio);
    }
}

// the closed forms are the simulator's figures, not restatements: for p = 4,
// m = 8, 1f1b idles 3 x 3 units of a 33-unit step per rank
static void test_known_spans(void) {
    PPSchedule s;
    PPSim sim;
    char err[256];
    pp_schedule_build(&s, PP_1F1B, 4, 1, 8);
    simulate(&s, (PPTimes){1, 1, 1, 0}, &sim, err);
    test_result(fabs(sim.span - 33) < 1e-12 && fabs(sim.idle[0] - 9) < 1e-12 && fabs(sim.idle[3] - 9) < 1e-12,
                "pp_1f1b_p4_m8_span_33_idle_9 (span %g, idle %g %g)", sim.span, sim.idle[0], sim.idle[3]);
    pp_sim_free(&sim);
    pp_schedule_free(&s);
    pp_schedule_build(&s, PP_1F1B, 1, 1, 5);
    simulate(&s, (PPTimes){1, 2, 3, 7}, &sim, err);
    test_result(fabs(sim.span - 30) < 1e-12 && sim.bubble == 0, "pp_one_stage_has_no_bubble_or_transfers (span %g)",
                sim.span);
    pp_sim_free(&sim);
    pp_schedule_free(&s);
}

static int find(const PPSchedule *s, int rank, int op, int mb) {
    for (int i = s->begin[rank]; i < s->begin[rank + 1]; i++)
        if (s->acts[i].op == op && s->acts[i].mb == mb) return i;
    return -1;
}

static void test_broken_lists(void) {
    PPSchedule s;
    PPSim sim;
    char err[256] = "";
    // a receive turned into compute: the send has no partner
    pp_schedule_build(&s, PP_1F1B, 2, 1, 4);
    int i = find(&s, 1, PP_RECV_F, 2);
    s.acts[i].op = PP_RECV_B;
    test_result(pp_schedule_check(&s, NULL, err, sizeof err) == 1, "pp_check_finds_a_missing_receive (%s)", err);
    pp_schedule_free(&s);
    // W before its B
    pp_schedule_build(&s, PP_ZB1P, 3, 1, 6);
    int b = find(&s, 1, PP_B, 1), w = find(&s, 1, PP_W, 1);
    PPAction t = s.acts[b];
    s.acts[b] = s.acts[w], s.acts[w] = t;
    test_result(pp_schedule_check(&s, NULL, err, sizeof err) == 1, "pp_check_finds_W_before_B (%s)", err);
    pp_schedule_free(&s);
    // a list that passes the checker but waits on itself: rank 0 of 1f1b (p 2,
    // m 2) sends micro-batch 0's output last; its send of micro-batch 1 blocks
    // until rank 1 posts that receive, which rank 1 does after its F of
    // micro-batch 0, whose input never comes
    pp_schedule_build(&s, PP_1F1B, 2, 1, 2);
    int sf0 = find(&s, 0, PP_SEND_F, 0), last = s.begin[1] - 1;
    PPAction moved = s.acts[sf0];
    memmove(&s.acts[sf0], &s.acts[sf0 + 1], (size_t)(last - sf0) * sizeof(PPAction));
    s.acts[last] = moved;
    int bad_check = pp_schedule_check(&s, NULL, err, sizeof err);
    int dead = simulate(&s, (PPTimes){1, 1, 1, 0}, &sim, err);
    test_result(bad_check == 0 && dead && sim.deadlock, "pp_simulator_finds_a_deadlock (%s)", err);
    pp_sim_free(&sim);
    pp_schedule_free(&s);
}

// fused lists: a receive moved before the F that consumes it, the sends of a
// pair in the order of its receives, and a swap of two of a rank's sends to
// one peer caught (a backend that pairs messages by order would cross them)
static void test_fused_lists(void) {
    PPSchedule s;
    PPSim sim;
    char err[256] = "";
    pp_schedule_build(&s, PP_1F1B, 2, 1, 4);
    pp_schedule_fuse_receives(&s);
    int f2 = find(&s, 1, PP_F, 2), r2 = find(&s, 1, PP_RECV_F, 2);
    test_result(r2 == f2 - 1 && pp_schedule_check(&s, NULL, err, sizeof err) == 0,
                "pp_fused_receive_right_before_its_forward (%s)", err);
    // rank 0's send of micro-batch 1 moved after its send of micro-batch 2 (still after its F)
    int a = find(&s, 0, PP_SEND_F, 1), b = find(&s, 0, PP_SEND_F, 2);
    PPAction t = s.acts[a];
    memmove(&s.acts[a], &s.acts[a + 1], (size_t)(b - a) * sizeof(PPAction));
    s.acts[b] = t;
    int dead = simulate(&s, (PPTimes){1, 1, 1, 0}, &sim, err);
    test_result(dead && strstr(err, "out of the order"), "pp_fused_check_finds_sends_out_of_order (%s)", err);
    pp_sim_free(&sim);
    pp_schedule_free(&s);
    // the unfused lists' early receives, run with fused semantics, deadlock: why the GPU fuses them
    pp_schedule_build(&s, PP_1F1B, 2, 1, 4);
    s.fused = 1;
    dead = simulate(&s, (PPTimes){1, 1, 1, 0}, &sim, err);
    test_result(dead && sim.deadlock, "pp_early_receives_deadlock_when_groups_complete_whole (%s)", err);
    pp_sim_free(&sim);
    pp_schedule_free(&s);
}

static void test_fused_interleaved(void) {
    PPSchedule s;
    PPSim sim;
    char err[256] = "";
    pp_schedule_build(&s, PP_INTERLEAVED, 2, 2, 4);
    pp_schedule_fuse_receives(&s);
    int dead = simulate(&s, (PPTimes){1, 1, 1, 0}, &sim, err);
    test_result(dead, "pp_interleaved_fused_lists_deadlock_so_nccl_refuses_them (%s)", err);
    pp_sim_free(&sim);
    pp_schedule_free(&s);
}

static void test_unusable(void) {
    test_result(pp_schedule_unusable(PP_INTERLEAVED, 4, 2, 6) != NULL, "pp_interleaved_refuses_m_not_multiple_of_p");
    test_result(pp_schedule_unusable(PP_INTERLEAVED, 4, 1, 8) != NULL, "pp_interleaved_needs_two_chunks");
    test_result(pp_schedule_unusable(PP_1F1B, 4, 2, 8) != NULL, "pp_chunks_need_interleaved");
    test_result(pp_schedule_unusable(PP_ZB1P, 4, 1, 3) == NULL && pp_schedule_unusable(PP_GPIPE, 8, 1, 1) == NULL,
                "pp_fewer_micro_batches_than_stages_is_allowed");
    test_result(pp_kind_from_name("zb1p") == PP_ZB1P && pp_kind_from_name("1F1B") == PP_KIND_COUNT,
                "pp_schedule_names");
}

int main(void) {
    test_layout();
    test_unusable();
    test_known_spans();
    test_broken_lists();
    test_fused_lists();
    test_fused_interleaved();
    test_sweep();
    return test_failures ? 1 : 0;
}
