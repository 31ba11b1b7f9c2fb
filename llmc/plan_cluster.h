// plan_cluster.h: the machines the planner (plan.c) places a run on. A
// cluster is nodes of devices with a peak, a memory, the bandwidth and
// latency of the links inside a node and between nodes, and a price per
// device-hour. Presets: dgx-h100 and dgx-h200 (datasheet figures,
// docs/planner.md gives each one's source) and local, this machine running
// the CPU trainer, whose figures plan.c measures (plan_measure.h). Or a file
// of "key = value" lines (docs/planner.md): every key the table below names,
// and optionally name and trainer (gpu, the default, or cpu).
#ifndef LLMC_PLAN_CLUSTER_H
#define LLMC_PLAN_CLUSTER_H

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "utils.h"

typedef struct {
    char name[64];
    int local;             // 1: this machine (figures measured)
    int cpu_trainer;       // 1: the CPU trainer runs on it (fp32, every activation kept), 0: the GPU trainer
    int devices_per_node;  // GPUs (local: ranks, which share the cores)
    int nodes;
    int cores;             // local: the cores the ranks share
    double peak_tflops;    // dense bf16 per device (local: the sgemm peak measured, one thread)
    double matmul_eff;     // the fraction of the peak a training matmul reaches (local: measured per shape)
    double hbm_gbs;        // device memory bandwidth, GB/s (element-wise kernels)
    double memory_gb;      // per device (local: what the host has available, shared by the ranks)
    double intra_gbs, intra_us;  // one device's link bandwidth (GB/s) and latency (us) inside a node
    double inter_gbs, inter_us;  // ... between nodes
    double price_per_hour;       // per device-hour, any currency
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

// The file keys, in Cluster's fields.
typedef struct { const char *key; size_t offset; int is_int; } ClusterKey;
#define CK(f) offsetof(Cluster, f)
static const ClusterKey CLUSTER_KEYS[] = {
    {"devices_per_node", CK(devices_per_node), 1}, {"nodes", CK(nodes), 1},
    {"peak_tflops", CK(peak_tflops), 0},           {"matmul_efficiency", CK(matmul_eff), 0},
    {"hbm_gbs", CK(hbm_gbs), 0},                   {"memory_gb", CK(memory_gb), 0},
    {"intra_node_gbs", CK(intra_gbs), 0},          {"intra_node_us", CK(intra_us), 0},
    {"inter_node_gbs", CK(inter_gbs), 0},          {"inter_node_us", CK(inter_us), 0},
    {"price_per_hour", CK(price_per_hour), 0},
};
#undef CK
#define CLUSTER_NUM_KEYS (sizeof(CLUSTER_KEYS) / sizeof(CLUSTER_KEYS[0]))

// Datasheet figures (docs/planner.md). The matmul efficiency is what large
// bf16 GEMMs of a GPT layer reach on these parts; the prices are on-demand
// cloud rates per GPU-hour, to be replaced by yours (--price-per-hour).
static const Cluster CLUSTER_PRESETS[] = {
    {.name = "dgx-h100", .devices_per_node = 8, .nodes = 1, .peak_tflops = 989.0, .matmul_eff = 0.70, .hbm_gbs = 3350.0,
     .memory_gb = 80.0, .intra_gbs = 450.0, .intra_us = 3.0, .inter_gbs = 50.0, .inter_us = 8.0, .price_per_hour = 3.00},
    {.name = "dgx-h200", .devices_per_node = 8, .nodes = 1, .peak_tflops = 989.0, .matmul_eff = 0.70, .hbm_gbs = 4800.0,
     .memory_gb = 141.0, .intra_gbs = 450.0, .intra_us = 3.0, .inter_gbs = 50.0, .inter_us = 8.0, .price_per_hour = 3.80},
};

// A preset by name, or a cluster file; 0 on success, else 1 with why in err.
static int cluster_load(const char *spec, Cluster *c, char *err, size_t errlen) {
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < sizeof(CLUSTER_PRESETS) / sizeof(CLUSTER_PRESETS[0]); i++)
        if (strcmp(spec, CLUSTER_PRESETS[i].name) == 0) { *c = CLUSTER_PRESETS[i]; return 0; }
    if (strcmp(spec, "local") == 0) {
        snprintf(c->name, sizeof(c->name), "local");
        c->local = 1, c->cpu_trainer = 1, c->nodes = 1;
        return 0;  // (plan.c measures the rest)
    }
    FILE *f = fopen(spec, "r");
    if (!f) {
        snprintf(err, errlen, "--cluster '%s': neither a preset (dgx-h100, dgx-h200, local) nor a readable file", spec);
        return 1;
    }
    const char *base = strrchr(spec, '/');
    snprintf(c->name, sizeof(c->name), "%s", base ? base + 1 : spec);
    char line[512];
    int lineno = 0, seen[CLUSTER_NUM_KEYS] = {0};
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char key[64], tail = 0;
        double value;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        if (sscanf(line, " %63s", key) != 1) continue;  // blank or a comment
        if (strcmp(key, "name") == 0 && sscanf(line, " name = %63s", c->name) == 1) continue;
        char trainer[16];
        if (strcmp(key, "trainer") == 0 && sscanf(line, " trainer = %15s", trainer) == 1 &&
            (strcmp(trainer, "cpu") == 0 || strcmp(trainer, "gpu") == 0)) {
            c->cpu_trainer = strcmp(trainer, "cpu") == 0;
            continue;
        }
        size_t k = 0;
        while (k < CLUSTER_NUM_KEYS && strcmp(key, CLUSTER_KEYS[k].key) != 0) k++;
        if (k == CLUSTER_NUM_KEYS || sscanf(line, " %*s = %lf %c", &value, &tail) != 1 || !(value >= 0)) {
            snprintf(err, errlen, "%s:%d: want 'key = value' with a key of name, trainer (cpu|gpu), "
                     "devices_per_node, nodes, peak_tflops, matmul_efficiency, hbm_gbs, memory_gb, intra_node_gbs, intra_node_us, "
                     "inter_node_gbs, inter_node_us, price_per_hour", spec, lineno);
            fclose(f);
            return 1;
        }
        seen[k] = 1;
        if (CLUSTER_KEYS[k].is_int) *(int *)((char *)c + CLUSTER_KEYS[k].offset) = (int)value;
        else *(double *)((char *)c + CLUSTER_KEYS[k].offset) = value;
    }
    fclose(f);
    for (size_t k = 0; k < CLUSTER_NUM_KEYS; k++)
        if (!seen[k]) {
            snprintf(err, errlen, "%s: no '%s = ...' line", spec, CLUSTER_KEYS[k].key);
            return 1;
        }
    if (c->devices_per_node < 1 || c->nodes < 1 || c->peak_tflops <= 0 || c->matmul_eff <= 0 || c->matmul_eff > 1 ||
        c->hbm_gbs <= 0 || c->memory_gb <= 0 || c->intra_gbs <= 0 || (c->nodes > 1 && c->inter_gbs <= 0)) {
        snprintf(err, errlen, "%s: devices_per_node and nodes must be >= 1, matmul_efficiency in (0, 1], and the "
                 "peak, memory and bandwidths above 0", spec);
        return 1;
    }
    return 0;
}

#endif  // LLMC_PLAN_CLUSTER_H
