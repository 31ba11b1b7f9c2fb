// plan_cluster.h: the machines the planner (plan.c) places a run on. A
// cluster is nodes of devices with a peak, a memory, the curves of the GPU
// model (plan_model.h: the achievable GEMM rate, its tiles over the SMs, the
// achievable memory bandwidth, attention's efficiency, the gap between
// kernels; NCCL's ring, tree and NVLS bus bandwidths and per-step latencies
// inside a node and across nodes), and a price per device-hour. Presets:
// dgx-a100, dgx-h100, dgx-h200, dgx-b200 (docs/planner.md gives each figure's
// source) and local, this machine running the CPU trainer, whose figures
// plan.c measures (plan_measure.h). Or a file of "key = value" lines
// (docs/planner.md): every required key the table below names, optional ones
// at most once, each value within the table's range, and optionally name,
// trainer (gpu, the default, or cpu) and currency.
#ifndef LLMC_PLAN_CLUSTER_H
#define LLMC_PLAN_CLUSTER_H

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "file_io.h"  // defines: open_input
#include "utils.h"    // defines: checked_mul_i64, die_usage

typedef struct {
    char name[64];
    int local;             // 1: this machine (figures measured)
    int from_file;         // 1: read from a cluster file (its --cluster spec is the path)
    int cpu_trainer;       // 1: the CPU trainer runs on it (fp32, every activation kept), 0: the GPU trainer
    int devices_per_node;  // GPUs (local: ranks, which share the cores)
    int nodes;
    int cores;             // local: the cores the ranks share
    double peak_tflops;    // dense bf16 per device (local: the sgemm peak measured, one thread)
    double matmul_eff;     // the fraction of the peak a large GEMM reaches in cuBLAS (local: measured per shape)
    double hbm_gbs;        // device memory bandwidth, GB/s (the datasheet's)
    double memory_gb;      // per device (local: what the host has available, shared by the ranks)
    double intra_gbs, intra_us;  // NCCL's ring bus bandwidth (GB/s) inside a node, its latency a ring step (us)
    double inter_gbs, inter_us;  // one device's network link (GB/s achievable) and its latency a step (us)
    double price_per_hour;       // per device-hour, in currency
    // the GPU model's curves (optional in a file: the defaults below)
    int sms, tile_m, tile_n;     // streaming multiprocessors, a GEMM's output tile (wave quantization; sms 0: none)
    double hbm_eff;              // the fraction of hbm_gbs a memory-bound kernel reaches
    double attention_eff;        // the fraction of the peak flash attention reaches (forward and backward)
    double launch_us;            // the gap between two kernels on one stream
    double nvls_gbs;             // NVLink SHARP all-reduce bus bandwidth in a node (0: none)
    double tree_eff;             // NCCL's tree across nodes: its bus bandwidth as a fraction of the ring's (0: none)
    char currency[8];
    // local (plan_measure.h): the time a synchronisation of two ranks ([0]) and of all of them ([1])
    // loses besides the transfer when the ranks compute sync_chunk_s[k] between them (their scheduling
    // on shared cores); a rank's memory besides the model's
    int sync_points;
    double sync_chunk_s[8], sync_loss_s[2][8];
    double rank_baseline_mb;
    double zero_s[2][2];  // local: ZeRO-2's reduction, ZeRO-3's gather pattern, s a byte ([0]: 2 ranks, [1]: all)
    // local: each collective's own bandwidth and latency (all-reduce, reduce-scatter, all-gather; 0: the links')
    double op_gbs[3], op_us[3];
} Cluster;

// Bounds shared with plan.c's --nodes and --devices-per-node.
#define CLUSTER_MAX_NODES (1 << 20)
#define CLUSTER_MAX_DEVICES_PER_NODE 4096
#define CLUSTER_MAX_RANKS (1 << 24)  // nodes x devices_per_node (every layout of them is enumerated)

// The file keys, in Cluster's fields, and the range of each value: finite,
// positive where a time is divided by it, an integer for the counts.
// (inter_node_gbs may be 0 on one node: cluster_ranks checks it for several.)
// An optional key's value when a file leaves it out is its default.
typedef struct { const char *key; size_t offset; int is_int; double min, max; int optional; double dflt; } ClusterKey;
#define CK(f) offsetof(Cluster, f)
static const ClusterKey CLUSTER_KEYS[] = {
    {"devices_per_node", CK(devices_per_node), 1, 1, CLUSTER_MAX_DEVICES_PER_NODE, 0, 0},
    {"nodes", CK(nodes), 1, 1, CLUSTER_MAX_NODES, 0, 0},
    {"peak_tflops", CK(peak_tflops), 0, 1e-6, 1e6, 0, 0},
    {"matmul_efficiency", CK(matmul_eff), 0, 1e-3, 1, 0, 0},
    {"hbm_gbs", CK(hbm_gbs), 0, 1e-3, 1e6, 0, 0},
    {"memory_gb", CK(memory_gb), 0, 1e-3, 1e6, 0, 0},
    {"intra_node_gbs", CK(intra_gbs), 0, 1e-3, 1e6, 0, 0},
    {"intra_node_us", CK(intra_us), 0, 0, 1e6, 0, 0},
    {"inter_node_gbs", CK(inter_gbs), 0, 0, 1e6, 0, 0},
    {"inter_node_us", CK(inter_us), 0, 0, 1e6, 0, 0},
    {"price_per_hour", CK(price_per_hour), 0, 0, 1e6, 0, 0},
    {"sms", CK(sms), 1, 0, 4096, 1, 0},
    {"gemm_tile_m", CK(tile_m), 1, 1, 4096, 1, 128},
    {"gemm_tile_n", CK(tile_n), 1, 1, 4096, 1, 128},
    {"hbm_efficiency", CK(hbm_eff), 0, 1e-3, 1, 1, 1.0},
    {"attention_efficiency", CK(attention_eff), 0, 1e-3, 1, 1, 0.35},
    {"launch_us", CK(launch_us), 0, 0, 1e6, 1, 4.0},
    {"nvls_gbs", CK(nvls_gbs), 0, 0, 1e6, 1, 0},
    {"tree_efficiency", CK(tree_eff), 0, 0, 1, 1, 0.9},
};
#undef CK
#define CLUSTER_NUM_KEYS (sizeof(CLUSTER_KEYS) / sizeof(CLUSTER_KEYS[0]))
#define CLUSTER_MIN_NETWORK_GBS 1e-3  // inter_node_gbs with several nodes

// Datasheet figures and published microbenchmarks (docs/planner.md gives
// each one's source and says which are assumptions): the peak, memory and
// SMs from the datasheets; the GEMM and memory-bound fractions from
// published cuBLAS and bandwidth measurements; the bus bandwidths from
// published nccl-tests results (NDR 400 Gb/s a GPU on DGX H100/H200/B200,
// HDR 200 Gb/s on DGX A100); the prices are on-demand cloud rates per
// GPU-hour in USD, to be replaced by yours (--price-per-hour).
static const Cluster CLUSTER_PRESETS[] = {
    {.name = "dgx-a100", .devices_per_node = 8, .nodes = 1, .peak_tflops = 312.0, .matmul_eff = 0.859, .hbm_gbs = 2039.0,
     .memory_gb = 80.0, .intra_gbs = 230.0, .intra_us = 1.0, .inter_gbs = 23.0, .inter_us = 5.0, .price_per_hour = 1.79,
     .sms = 108, .tile_m = 128, .tile_n = 128, .hbm_eff = 0.85, .attention_eff = 0.55, .launch_us = 3.0, .nvls_gbs = 0,
     .tree_eff = 0.9, .currency = "USD"},
    {.name = "dgx-h100", .devices_per_node = 8, .nodes = 1, .peak_tflops = 989.0, .matmul_eff = 0.801, .hbm_gbs = 3350.0,
     .memory_gb = 80.0, .intra_gbs = 360.0, .intra_us = 1.0, .inter_gbs = 45.0, .inter_us = 5.0, .price_per_hour = 2.99,
     .sms = 132, .tile_m = 128, .tile_n = 256, .hbm_eff = 0.85, .attention_eff = 0.45, .launch_us = 3.0, .nvls_gbs = 480.0,
     .tree_eff = 0.9, .currency = "USD"},
    {.name = "dgx-h200", .devices_per_node = 8, .nodes = 1, .peak_tflops = 989.0, .matmul_eff = 0.803, .hbm_gbs = 4800.0,
     .memory_gb = 141.0, .intra_gbs = 360.0, .intra_us = 1.0, .inter_gbs = 45.0, .inter_us = 5.0, .price_per_hour = 3.79,
     .sms = 132, .tile_m = 128, .tile_n = 256, .hbm_eff = 0.85, .attention_eff = 0.45, .launch_us = 3.0, .nvls_gbs = 480.0,
     .tree_eff = 0.9, .currency = "USD"},
    {.name = "dgx-b200", .devices_per_node = 8, .nodes = 1, .peak_tflops = 2250.0, .matmul_eff = 0.776, .hbm_gbs = 8000.0,
     .memory_gb = 180.0, .intra_gbs = 720.0, .intra_us = 1.0, .inter_gbs = 45.0, .inter_us = 5.0, .price_per_hour = 5.99,
     .sms = 148, .tile_m = 128, .tile_n = 256, .hbm_eff = 0.85, .attention_eff = 0.45, .launch_us = 3.0, .nvls_gbs = 900.0,
     .tree_eff = 0.9, .currency = "USD"},
};

// A preset by name, or a cluster file (read through file_io.h's open_input:
// a FIFO or a directory is refused, one line, exit 2); 0 on success, else 1
// with why in err (file:line where a line is at fault).
static int cluster_load(const char *spec, Cluster *c, char *err, size_t errlen) {
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < sizeof(CLUSTER_PRESETS) / sizeof(CLUSTER_PRESETS[0]); i++)
        if (strcmp(spec, CLUSTER_PRESETS[i].name) == 0) { *c = CLUSTER_PRESETS[i]; return 0; }
    if (strcmp(spec, "local") == 0) {
        snprintf(c->name, sizeof(c->name), "local");
        c->local = 1, c->cpu_trainer = 1, c->nodes = 1;
        snprintf(c->currency, sizeof(c->currency), "USD");
        return 0;  // (plan.c measures the rest)
    }
    if (access(spec, F_OK) != 0) {
        snprintf(err, errlen, "--cluster '%s': neither a preset (dgx-a100, dgx-h100, dgx-h200, dgx-b200, local) nor a "
                 "readable file", spec);
        return 1;
    }
    FILE *f = open_input(spec, "--cluster", NULL);
    c->from_file = 1;
    snprintf(c->currency, sizeof(c->currency), "USD");
    const char *base = strrchr(spec, '/');
    snprintf(c->name, sizeof(c->name), "%s", base ? base + 1 : spec);
    char line[512];
    int lineno = 0, seen[CLUSTER_NUM_KEYS] = {0}, bad = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char key[64], text[64], tail = 0;
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(err, errlen, "%s:%d: a line longer than %d characters", spec, lineno, (int)sizeof(line) - 2);
            bad = 1;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        if (sscanf(line, " %63s", key) != 1) continue;  // blank or a comment
        if (strcmp(key, "name") == 0 && sscanf(line, " name = %63s", c->name) == 1) continue;
        if (strcmp(key, "currency") == 0 && sscanf(line, " currency = %7s", c->currency) == 1) continue;
        char trainer[16];
        if (strcmp(key, "trainer") == 0 && sscanf(line, " trainer = %15s", trainer) == 1 &&
            (strcmp(trainer, "cpu") == 0 || strcmp(trainer, "gpu") == 0)) {
            c->cpu_trainer = strcmp(trainer, "cpu") == 0;
            continue;
        }
        size_t k = 0;
        while (k < CLUSTER_NUM_KEYS && strcmp(key, CLUSTER_KEYS[k].key) != 0) k++;
        char *end = NULL;
        if (k == CLUSTER_NUM_KEYS || sscanf(line, " %*s = %63s %c", text, &tail) != 1) {
            snprintf(err, errlen, "%s:%d: want 'key = value' with a key of name, trainer (cpu|gpu), currency, "
                     "devices_per_node, nodes, peak_tflops, matmul_efficiency, hbm_gbs, memory_gb, intra_node_gbs, intra_node_us, "
                     "inter_node_gbs, inter_node_us, price_per_hour, sms, gemm_tile_m, gemm_tile_n, hbm_efficiency, "
                     "attention_efficiency, launch_us, nvls_gbs, tree_efficiency", spec, lineno);
            bad = 1;
            break;
        }
        const ClusterKey *ck = &CLUSTER_KEYS[k];
        double value = strtod(text, &end);
        if (*end != '\0' || !(value >= ck->min && value <= ck->max) || (ck->is_int && value != (double)(int)value)) {
            snprintf(err, errlen, "%s:%d: %s = %s: want %s from %.10g to %.10g", spec, lineno, ck->key, text,
                     ck->is_int ? "an integer" : "a number", ck->min, ck->max);
            bad = 1;
        } else if (seen[k]) {
            snprintf(err, errlen, "%s:%d: %s is given a second time", spec, lineno, ck->key);
            bad = 1;
        }
        if (bad) break;
        seen[k] = 1;
        if (ck->is_int) *(int *)((char *)c + ck->offset) = (int)value;
        else *(double *)((char *)c + ck->offset) = value;
    }
    fclose(f);
    if (bad) return 1;
    for (size_t k = 0; k < CLUSTER_NUM_KEYS; k++) {
        const ClusterKey *ck = &CLUSTER_KEYS[k];
        if (!seen[k] && !ck->optional) {
            snprintf(err, errlen, "%s: no '%s = ...' line", spec, ck->key);
            return 1;
        }
        if (seen[k]) continue;
        if (ck->is_int) *(int *)((char *)c + ck->offset) = (int)ck->dflt;
        else *(double *)((char *)c + ck->offset) = ck->dflt;
    }
    return 0;
}

// The ranks, nodes x devices_per_node after plan.c's --nodes and
// --devices-per-node (utils.h's checked arithmetic), at most
// CLUSTER_MAX_RANKS, with a network between several nodes; else one line
// naming the cluster, exit 2.
static int cluster_ranks(const Cluster *c) {
    int64_t ranks = checked_mul_i64(c->nodes, c->devices_per_node, "nodes x devices_per_node");
    if (ranks > CLUSTER_MAX_RANKS)
        die_usage("cluster %s: %d nodes x %d devices = %lld ranks, more than %d (nodes and devices_per_node, or "
                  "--nodes and --devices-per-node)", c->name, c->nodes, c->devices_per_node, (long long)ranks,
                  CLUSTER_MAX_RANKS);
    if (c->nodes > 1 && !(c->inter_gbs >= CLUSTER_MIN_NETWORK_GBS))
        die_usage("cluster %s: %d nodes need an inter_node_gbs of at least %g (it is %g)", c->name, c->nodes,
                  CLUSTER_MIN_NETWORK_GBS, c->inter_gbs);
    return (int)ranks;
}

#endif  // LLMC_PLAN_CLUSTER_H
