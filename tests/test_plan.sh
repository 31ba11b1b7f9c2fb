#!/usr/bin/env bash
# test_plan.sh: the layout planner (./plan, llmc/plan_*.h). On a small case
# (2 layers of 2 heads, 4 ranks, a 64-token batch of T 32, B 1: dp 4 does not divide it) every layout the planner
# lists as valid starts on the CPU trainer (--steps 0) and every one it
# rejects for not dividing is refused by the trainer with exit 2: the
# enumeration finds every valid layout and no invalid one. For each valid
# layout the trainer's memory line (rank 0: params, grads, AdamW state,
# activations) equals the planner's prediction, and so does an interleaved
# pipeline's (4 layers, 2 chunks a rank); on a GPU cluster the
# planner's weights, gradients and AdamW state are the GPU trainer's line
# (emulated), its activations the line's to its 3 decimals, and the
# workspace: recompute full, cp 2 alone and with a 1f1b pipeline of 2
# stages, zb1p, interleaved and gpipe pipelines. The local cluster's
# measurements run (plan under mpirun over 2 ranks) and give a prediction
# for each valid layout; the cost table's hours and cost follow from its
# tokens/s, the run's tokens and the price. Context parallel (cp layouts are
# among those): its attention and collectives against hand-computed values at
# T 4096, a cp that does not divide T/2 rejected. Bad input: one line, exit 2.
# SKIPs the trainer runs without MPI.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
PLAN=$BUILD/plan
TRAIN=$BUILD/train_gpt
P=plan_
export OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1

MODEL=(--n-layer 2 --n-embd 32 --n-head 2 --vocab-size 257 --max-seq-len 32 --seq-len 32 --total-batch-tokens 64)
cat >"$tmp/four.cluster" <<'EOF'
# four CPU-trainer ranks of ample memory: every layout that divides fits
name = four
trainer = cpu
devices_per_node = 4
nodes = 1
peak_tflops = 1
matmul_efficiency = 0.5
hbm_gbs = 100
memory_gb = 1000
intra_node_gbs = 10
intra_node_us = 5
inter_node_gbs = 1
inter_node_us = 10
price_per_hour = 2.5
EOF

# --- bad input ---
expect_usage_error "an unknown cluster" "neither a preset" "$PLAN" "${MODEL[@]}" --cluster dgx-a9
printf 'devices_per_node = 4\nnodes = two\n' >"$tmp/bad.cluster"
expect_usage_error "a malformed cluster file, by line" "bad.cluster:2:" "$PLAN" "${MODEL[@]}" --cluster "$tmp/bad.cluster"
head -5 "$tmp/four.cluster" >"$tmp/short.cluster"
expect_usage_error "a cluster file without a key" "no 'peak_tflops = ...' line" "$PLAN" "${MODEL[@]}" \
    --cluster "$tmp/short.cluster"
expect_usage_error "a plan without a batch" "total-batch-tokens is required" "$PLAN" --n-layer 2 --n-embd 32 \
    --n-head 2 --vocab-size 257 --max-seq-len 32 --seq-len 32 --cluster dgx-h100
expect_usage_error "several nodes of the local machine" "local cluster is this one machine" "$PLAN" "${MODEL[@]}" \
    --cluster local --nodes 2
expect_usage_error "an unknown flag" "unknown flag" "$PLAN" --warp-speed 9

# --- the enumeration of the small case ---
"$PLAN" "${MODEL[@]}" --cluster "$tmp/four.cluster" --max-micro-batch 1 --rejected 0 --csv "$tmp/four.csv" \
    >"$tmp/four.log" 2>&1
rc=$?
check lists_the_small_case "[ $rc -eq 0 ] && grep -q '^cluster four: 1 node x 4 CPU ranks = 4 ranks' '$tmp/four.log'" \
    "exit $rc: $(tail -2 "$tmp/four.log")"
# every (dp, cp, tp, pp) of 4 ranks, each schedule, ZeRO stage (with dp x cp > 1), sequence parallel (tp > 1), B 1,
# --recompute none, selective and full
python3 - "$tmp/four.csv" >"$tmp/count.txt" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
want = 0
for tp in (1, 2, 4):
    for pp in (1, 2, 4):
        for cp in (1, 2, 4):
            if 4 % (tp * pp * cp):
                continue
            dp = 4 // tp // pp // cp
            scheds = {1: 1, 2: 4, 4: 4}[pp]  # interleaved: 2 chunks (L/pp <= 2)
            want += (2 if tp > 1 else 1) * scheds * (4 if dp * cp > 1 else 1) * 3
print(len(rows), want, sum(r["valid"] == "1" for r in rows))
EOF
read -r listed want valid <"$tmp/count.txt"
check enumerates_every_candidate "[ '$listed' = '$want' ] && [ '$valid' -gt 0 ]" "listed $listed, want $want"
check says_the_least_memory_without_and_with_context_parallel \
    "grep -q '^  memory a rank, the least of any layout: [0-9.]* GB without context parallel, [0-9.]* GB with it' '$tmp/four.log'"
check says_why_tp_4_dp_4_and_pp_4_do_not_divide "grep -q 'tp 4: .*' '$tmp/four.log' &&
    grep -q 'more than the model.s 2 layers' '$tmp/four.log' && grep -q 'not a multiple of B x T x dp = 128' '$tmp/four.log'"

# --- the GPU model's output: one layout explained, the listing's command, reasons, legend, ties ---
D12=(--model d12 --seq-len 1024 --total-batch-tokens 524288)
"$PLAN" "${D12[@]}" --cluster dgx-h100 --layout dp=8,tp=1,pp=1,cp=1,zero=1,mb=16,schedule=1f1b,recompute=none \
    >"$tmp/explain.log" 2>&1
rc=$?
python3 - "$tmp/explain.log" "$rc" <<'EOF'
import re, sys
text, rc = open(sys.argv[1]).read(), int(sys.argv[2])
step = re.search(r"predicted step ([0-9.]+) ms = fwd ([0-9.]+) \+ bwd ([0-9.]+)", text)
fams = [float(x) for x in re.findall(r"^    [A-Za-z][A-Za-z +()]+? +([0-9.]+) ms +[0-9.]+%$", text, re.M)]
ok = rc == 0 and step and len(fams) >= 6 and abs(sum(fams) - float(step.group(2)) - float(step.group(3))) < 0.01 * sum(fams)
print("%s: plan_layout_splits_compute_by_kernel_family (families %.1f ms, fwd + bwd %s)" % (
    "PASS" if ok else "FAIL", sum(fams), step and float(step.group(2)) + float(step.group(3))))
want = ["data parallel over 8 ranks on 1 node: ZeRO-1 reduce-scatter", "data parallel: all-gather",
        "run it: mpirun -np 8 ./train_gptcu --data-train", "--batch-size 16 --zero 1", "NOTE: GPU figures are predictions"]
missing = [w for w in want if w not in text]
print("%s: plan_layout_explains_collectives_and_prints_its_command%s" % ("FAIL" if missing else "PASS",
      " (missing: %s)" % missing if missing else ""))
EOF
"$PLAN" "${D12[@]}" --total-batch-tokens 196608 --cluster dgx-a100 --layout dp=16,zero=2,mb=12 >"$tmp/nodes.log" 2>&1
check layout_takes_any_micro_batch_and_sets_the_nodes "grep -q '^cluster dgx-a100: 2 nodes x 8 devices' '$tmp/nodes.log' &&
    grep -q 'B 12 x 1' '$tmp/nodes.log' && grep -q 'over 16 ranks on 2 nodes: ZeRO-2 reduce-scatter' '$tmp/nodes.log' &&
    grep -q -- '-npernode 8 --hostfile HOSTS' '$tmp/nodes.log'" "$(head -12 "$tmp/nodes.log")"
expect_usage_error "a layout of cp 0" "want dp, cp, tp, pp, mb >= 1" "$PLAN" "${D12[@]}" --cluster dgx-h100 --layout dp=8,cp=0
expect_usage_error "an unknown layout key" "unknown key 'ep'" "$PLAN" "${D12[@]}" --cluster dgx-h100 --layout dp=8,ep=2
expect_usage_error "a layout of 2^40 ranks" "more than 16777216" "$PLAN" "${D12[@]}" --cluster dgx-h100 \
    --layout dp=1048576,tp=1048576
# --- context parallel against the model's formulas by hand: 2 layers, C 64, T 4096, dp 2 x cp 2 on the
# four cluster (1 TFLOP/s, attention at the default 0.35, 100 GB/s, 4 us a kernel, links 10 GB/s 5 us) ---
CPM=(--n-layer 2 --n-embd 64 --n-head 2 --vocab-size 257 --max-seq-len 4096 --seq-len 4096 --total-batch-tokens 16384)
"$PLAN" "${CPM[@]}" --cluster "$tmp/four.cluster" --layout dp=2,cp=2,zero=1,mb=1 >"$tmp/cp.log" 2>&1
python3 - "$tmp/cp.log" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
B, T, cp, Cl, L, accum = 1, 4096, 2, 64, 2, 2  # (16384 tokens / (B T dp) = 2 micro-batches)
# attention of a rank: its T/cp queries, 1/cp of the causal FLOPs (2 B T^2 Cl forward, 2.5x backward), or
# q, out local and k, v whole at the HBM bandwidth, whichever is longer, plus the launch gaps
def att(backward):
    flops = 2.0 * B * T * T * Cl * (2.5 if backward else 1) / cp / (1e12 * 0.35)
    nbytes = 2.0 * B * Cl * (4 if backward else 2) * (T / cp + T) / 100e9
    return max(flops, nbytes) + 4e-6 * (2 if backward else 1)
want_att = L * accum * (att(0) + att(1)) * 1e3
# a layer's all-gather of K | V (B T 2Cl fp32) and reduce-scatter of their gradients over 2 ranks: the ring's
# p-1 steps of 5 us and (p-1)/p of the bytes at 10 GB/s each
kv = B * T * 2 * Cl * 4
ring = 5e-6 + 0.5 * kv / 10e9
want_cp = L * accum * 2 * ring * 1e3
got_att = re.search(r"flash attention +([0-9.]+) ms", text)
got_cp = re.search(r"context parallel over 2 ranks on 1 node: all-gather of K and V \(([0-9.]+) MB a layer\).*: ([0-9.]+) ms", text)
ok = got_att and got_cp and abs(float(got_att.group(1)) / want_att - 1) < 0.005 and \
    abs(float(got_cp.group(2)) / want_cp - 1) < 0.01 and abs(float(got_cp.group(1)) - kv / 1e6) < 0.05
print("%s: plan_cp_attention_and_collectives_are_the_hand_computed (attention %s ms, want %.2f; cp %s ms, want %.3f)" % (
    "PASS" if ok else "FAIL", got_att and got_att.group(1), want_att, got_cp and got_cp.group(2), want_cp))
EOF
"$PLAN" "${CPM[@]}" --cluster dgx-h100 --layout dp=4,cp=2,zero=1,mb=1 >"$tmp/cp_gpu.log" 2>&1
check cp_gpu_command_runs_the_default_attention "grep 'run it' '$tmp/cp_gpu.log' | grep -q -- '--zero 1 --cp 2' &&
    ! grep -q -- '--attention' '$tmp/cp_gpu.log'" \
    "$(grep -a 'run it' "$tmp/cp_gpu.log")"
check cp_layout_runs_with_cp "grep -q 'layout dp 2 cp 2 tp 1' '$tmp/cp.log' && grep -q -- '--zero 1 --cp 2' '$tmp/cp.log' &&
    grep -q 'data parallel over 4 ranks (data x context)' '$tmp/cp.log'" "$(sed -n 3,6p "$tmp/cp.log")"
"$PLAN" "${MODEL[@]}" --max-seq-len 36 --seq-len 36 --total-batch-tokens 144 --cluster "$tmp/four.cluster" \
    --layout cp=4 >"$tmp/cp_odd.log" 2>&1
check cp_not_dividing_half_the_sequence_is_rejected \
    "grep -q 'rejected: context parallel: seq-len 36 is not a multiple of 2 x cp = 8' '$tmp/cp_odd.log'" "$(sed -n 3,4p "$tmp/cp_odd.log")"
"$PLAN" "${D12[@]}" --cluster dgx-h100 --top 3 --csv "$tmp/list.csv" >"$tmp/list.log" 2>&1
# the GPU trainer refuses over NCCL a pipeline whose fused lists deadlock (interleaved with more micro-batches than
# ranks): the planner neither offers one nor prints its command, and says why
python3 - "$tmp/list.csv" <<'EOF'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["schedule"] == "interleaved"]
dead = [r for r in rows if int(r["accum"]) > int(r["pp"])]
nccl = [r for r in dead if "over NCCL: with its receives fused the lists deadlock" in r["why_not"]]
ok = dead and all(r["valid"] == "0" and (r in nccl or "stages, more than the model" in r["why_not"]) for r in dead) \
    and len(nccl) > len(dead) / 2 and any(r["valid"] == "1" for r in rows)
print("%s: plan_gpu_refuses_what_deadlocks_over_nccl (%d interleaved layouts, %d with more micro-batches than ranks)"
      % ("PASS" if ok else "FAIL", len(rows), len(dead)))
EOF
"$PLAN" "${D12[@]}" --cluster dgx-h100 --layout dp=4,pp=2,v=2,schedule=interleaved,mb=16,zero=1 >"$tmp/nccl.log" 2>&1
check layout_says_the_fused_lists_deadlock_over_nccl "grep -q 'rejected: interleaved with 8 micro-batches over NCCL: with its receives fused the lists deadlock (deadlock: rank' '$tmp/nccl.log' &&
    ! grep -q 'run it' '$tmp/nccl.log'" "$(sed -n 4,5p "$tmp/nccl.log")"
python3 - "$tmp/list.log" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
total = re.search(r"(\d+) layouts: (\d+) valid, (\d+) rejected", text)
groups = [int(x) for x in re.findall(r"^ +(\d+)  \S.*[:.]$", text.split("rejected, by reason:")[-1], re.M)]
print("%s: plan_groups_rejected_layouts_by_reason (%s of %s)" % (
    "PASS" if total and len(groups) >= 2 and sum(groups) == int(total.group(3)) else "FAIL", groups,
    total and total.group(3)))
first = re.search(r"^   1\. (.*?) \|", text, re.M)
ok = first and "ZeRO-3" not in first.group(1) and "a tie" in text and "run it: mpirun -np 8 ./train_gptcu" in text
print("%s: plan_prefers_the_simpler_smaller_layout_in_a_tie (%s)" % ("PASS" if ok else "FAIL", first and first.group(1)))
legend = ["B 64 x 4: micro-batches of 64", "rcsel: --recompute selective", "+sp: sequence parallel", "'-': none", "USD a device-hour"]
missing = [w for w in legend if w not in text] + ([] if re.search(r"[0-9.]+ USD  dp", text) else ["cost currency"])
print("%s: plan_legend_explains_the_notation_and_currency%s" % ("FAIL" if missing else "PASS",
      " (missing: %s)" % missing if missing else ""))
EOF
"$PLAN" "${D12[@]}" --cluster dgx-a100,dgx-h200,dgx-b200 --top 1 >"$tmp/presets.log" 2>&1
check lists_every_preset "[ \$(grep -c '^  GPU model: GEMMs at' '$tmp/presets.log') = 3 ]" "$(tail -3 "$tmp/presets.log")"
{ sed '/^name/d; s/^trainer = cpu$/trainer = gpu/' "$tmp/four.cluster"; printf 'nvls_gbs = 123\nsms = 7\ncurrency = EUR\n'; } \
    >"$tmp/curves.cluster"
"$PLAN" "${MODEL[@]}" --cluster "$tmp/curves.cluster" --top 1 >"$tmp/curves.log" 2>&1
check cluster_file_sets_the_curves "grep -q 'over 7 SMs' '$tmp/curves.log' && grep -q 'NVLS' '$tmp/curves.log' &&
    grep -q 'EUR a device-hour' '$tmp/curves.log'" "$(head -4 "$tmp/curves.log")"
PLAN="$PLAN" bash scripts/plan_validate.sh >"$tmp/validate.log" 2>&1
rc=$?
check validates_against_published_runs "[ $rc -eq 0 ] && grep -qE '^(1[0-9]|[2-9][0-9]) published runs on dgx-a100, dgx-h100 \([1-9][0-9]* on several nodes\): mean absolute error' '$tmp/validate.log' &&
    ! grep -q 'NO REASON' '$tmp/validate.log'" "exit $rc: $(tail -3 "$tmp/validate.log")"

if ! have_mpi; then
    echo "SKIP: ${P}the trainer on each layout, the local cluster (built without MPI or no mpirun)"
    exit 0
fi
export ASAN_OPTIONS=detect_leaks=0  # (MPI's own allocations)
tokenize_sources "$tmp/data" llmc/plan_*.h
# layouts on the trainer: valid ones start and print the planner's memory, rejected ones exit 2 naming why.
# The smallest set that covers every value of each feature: the valid layouts chosen greedily until each
# dp x cp x tp x pp, ZeRO stage, sequence parallel setting and schedule has run once, and one rejected layout of
# each reason (the reason's text without its numbers).
python3 - "$tmp/four.csv" "$TRAIN" "$tmp/data/src_train_*.bin" "${MODEL[@]}" <<'EOF'
import csv, re, subprocess, sys
path, train, data, model = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
mpirun = ["timeout", "120", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4", "-x", "OMP_NUM_THREADS",
          "-x", "ASAN_OPTIONS"]
rows = list(csv.DictReader(open(path)))
def features(r):
    return {("dims", r["dp"], r["cp"], r["tp"], r["pp"]), ("zero", r["zero"]), ("sp", r["sp"]), ("schedule", r["schedule"], r["v"])}
want = set().union(*(features(r) for r in rows if r["valid"] == "1"))
chosen = []
while want:
    best = max((r for r in rows if r["valid"] == "1"), key=lambda r: len(features(r) & want))
    chosen.append(best)
    want -= features(best)
reasons = {}
for r in rows:
    if r["valid"] != "1":
        reasons.setdefault(re.sub(r"[0-9]+", "N", r["why_not"]), r)
chosen += list(reasons.values())
bad_valid, bad_rejected, bad_memory, runs = [], [], [], 0
for r in chosen:
    flags = ["--cp", r["cp"], "--tp", r["tp"], "--pp", r["pp"], "--zero", r["zero"], "--batch-size", r["B"]]
    if r["sp"] == "1":
        flags += ["--sequence-parallel", "1"]
    if int(r["pp"]) > 1:
        flags += ["--pp-schedule", r["schedule"], "--virtual-stages", r["v"]]
    name = " ".join(flags)
    p = subprocess.run(mpirun + [train, "--data-train", data, "--steps", "0", "--comm-timeout", "60"] + model + flags,
                       capture_output=True, text=True)
    runs += 1
    if r["valid"] == "1":
        if p.returncode != 0:
            bad_valid.append("%s: exit %d %s" % (name, p.returncode, p.stderr.strip()[-200:]))
            continue
        m = re.search(r"params ([0-9.]+) MB .* grads ([0-9.]+) MB .* AdamW m,v ([0-9.]+) MB .* activations ([0-9.]+) MB",
                      p.stdout)
        want = [float(r[k]) for k in ("mem0_params_mb", "mem0_grads_mb", "mem0_optimizer_mb", "mem0_activations_mb")]
        if not m or any(abs(float(g) - w) > 0.0015 for g, w in zip(m.groups(), want)):
            bad_memory.append("%s: trainer %s, plan %s" % (name, m.groups() if m else "no memory line", want))
    elif p.returncode != 2:
        bad_rejected.append("%s (%s): exit %d" % (name, r["why_not"], p.returncode))
print("PASS: plan_valid_layouts_start_on_the_trainer (%d runs, %d rejection reasons)" % (runs, len(reasons))
      if not bad_valid else "FAIL: plan_valid_layouts_start_on_the_trainer (%s)" % "; ".join(bad_valid[:3]))
print("PASS: plan_rejected_layouts_are_refused_by_the_trainer" if not bad_rejected else
      "FAIL: plan_rejected_layouts_are_refused_by_the_trainer (%s)" % "; ".join(bad_rejected[:3]))
print("PASS: plan_memory_equals_the_trainers_memory_line" if not bad_memory else
      "FAIL: plan_memory_equals_the_trainers_memory_line (%s)" % "; ".join(bad_memory[:3]))
EOF
# the interleaved schedule, which 2 layers cannot run: 4 layers, 2 chunks of one on each of 2 ranks, rank 0's memory
# at the schedule's peak under selective recompute
MODEL4=(--n-layer 4 "${MODEL[@]:2}")
sed 's/^devices_per_node = 4$/devices_per_node = 2/' "$tmp/four.cluster" >"$tmp/two.cluster"
"$PLAN" "${MODEL4[@]}" --cluster "$tmp/two.cluster" --max-micro-batch 1 --csv "$tmp/two.csv" >/dev/null 2>&1
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$TRAIN" --data-train "$tmp/data/src_train_*.bin" \
    "${MODEL4[@]}" --batch-size 1 --pp 2 --pp-schedule interleaved --virtual-stages 2 --recompute selective --steps 0 \
    --comm-timeout 60 >"$tmp/interleaved.log" 2>&1
python3 - "$tmp/two.csv" "$tmp/interleaved.log" <<'EOF'
import csv, re, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if (r["dp"], r["pp"], r["schedule"], r["v"], r["zero"], r["B"],
        r["recompute"]) == ("1", "2", "interleaved", "2", "0", "1", "selective")]
m = re.search(r"params ([0-9.]+) MB .* grads ([0-9.]+) MB .* AdamW m,v ([0-9.]+) MB .* activations ([0-9.]+) MB",
              open(sys.argv[2]).read())
keys = ("mem0_params_mb", "mem0_grads_mb", "mem0_optimizer_mb", "mem0_activations_mb")
plan = [float(rows[0][k]) for k in keys] if len(rows) == 1 else []
ok = m is not None and len(plan) == 4 and all(abs(float(g) - w) <= 0.0015 for g, w in zip(m.groups(), plan))
print("%s: plan_memory_equals_the_trainers_line_interleaved (trainer %s, plan %s)" % (
    "PASS" if ok else "FAIL", m.groups() if m else "no memory line", plan))
EOF

# --- the GPU trainer's memory (the emulated train_gptcu's start line, head size 32 for the flash kernel;
# --peak-tflops: no emulated 8192-wide peak probe; normal build only) ---
if [ -x "$BUILD/emu/train_gptcu" ] && [ "$BUILD" = build ]; then
    sed 's/^trainer = cpu$/trainer = gpu/; s/^devices_per_node = 4$/devices_per_node = 1/' "$tmp/four.cluster" \
        >"$tmp/gpu.cluster"
    GMODEL=(--n-layer 4 --n-embd 64 --n-head 2 --vocab-size 257 --max-seq-len 32 --seq-len 32 --total-batch-tokens 128)
    "$PLAN" "${GMODEL[@]}" --cluster "$tmp/gpu.cluster" --max-micro-batch 4 --csv "$tmp/gpu.csv" >/dev/null 2>&1
    sed 's/^devices_per_node = 1$/devices_per_node = 2/' "$tmp/gpu.cluster" >"$tmp/gpu2.cluster"
    "$PLAN" "${GMODEL[@]}" --cluster "$tmp/gpu2.cluster" --max-micro-batch 4 --csv "$tmp/gpu2.csv" >/dev/null 2>&1
    sed 's/^devices_per_node = 1$/devices_per_node = 4/' "$tmp/gpu.cluster" >"$tmp/gpu4.cluster"
    "$PLAN" "${GMODEL[@]}" --cluster "$tmp/gpu4.cluster" --max-micro-batch 4 --csv "$tmp/gpu4.csv" >/dev/null 2>&1
    # (B recompute cp pp schedule: B 2; full: every buffer the recomputation shares; cp 2 at ZeRO-1 under mpirun:
    # its context buffers too (in the activations), alone and in a 1f1b pipeline of 2 stages (rank 0's: the
    # schedule's peak of micro-batches in flight); pipelines of 2 stages with zb1p (a split backward's buffers),
    # interleaved (2 chunks a rank, over staged MPI: NCCL's fused receives deadlock) and gpipe)
    runs=("2 full 1 1 -")
    have_mpi && runs+=("2 none 2 1 -" "2 full 2 1 -" "2 none 2 2 1f1b" "2 selective 1 2 zb1p" "2 none 1 2 interleaved"
        "2 full 1 2 gpipe")
    for run in "${runs[@]}"; do
        set -- $run
        launch=() flags=() csv="$tmp/gpu$(($3 * $4)).csv"
        [ $(($3 * $4)) = 1 ] && csv="$tmp/gpu.csv"
        if [ $(($3 * $4)) -gt 1 ]; then
            launch=(timeout 120 mpirun --allow-run-as-root --oversubscribe -np $(($3 * $4)))
            flags=(--cp "$3" --pp "$4" --zero $(($3 > 1)))
        fi
        [ "$5" != - ] && flags+=(--pp-schedule "$5")
        [ "$5" = interleaved ] && flags+=(--virtual-stages 2 --comm mpi)
        "${launch[@]}" "$BUILD/emu/train_gptcu" --data-train "$tmp/data/src_train_*.bin" "${GMODEL[@]}" \
            --batch-size "$1" --recompute "$2" "${flags[@]}" --steps 0 --peak-tflops 1 >"$tmp/gpu_$1_$2_$3_$4.log" 2>&1
        python3 - "$csv" "$tmp/gpu_$1_$2_$3_$4.log" "$1" "$2" "$3" "$4" "$5" <<'EOF'
import csv, re, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["B"] == sys.argv[3] and r["recompute"] == sys.argv[4] and
        r["cp"] == sys.argv[5] and r["pp"] == sys.argv[6] and r["dp"] == "1" and r["tp"] == "1" and
        r["zero"] == ("0" if sys.argv[5] == "1" else "1") and r["schedule"] == sys.argv[7] and
        r["v"] == ("2" if sys.argv[7] == "interleaved" else "1")]
text = open(sys.argv[2]).read()
m = re.search(r"^memory: params ([0-9.]+) MB .*grads ([0-9.]+) MB, AdamW ([0-9.]+) MB, activations ([0-9.]+) MB"
              r".*workspace ([0-9.]+) MB", text, re.M)
ok = len(rows) == 1 and rows[0]["valid"] == "1" and m is not None
plan, got = [], None
if ok:  # weights, grads, AdamW: the same formula; activations (with context buffers) the same bytes (the line's
    # 3 decimals); workspace 1 MB
    r, got = rows[0], [float(x) for x in m.groups()]
    plan = [float(r[k]) for k in ("mem0_params_mb", "mem0_grads_mb", "mem0_optimizer_mb", "mem0_activations_mb")]
    workspace = float(r["mem_max_mb"]) - sum(plan) - float(r["mem0_tied_mb"])
    ok = all(abs(g - w) <= 0.06 for g, w in zip(got[:3], plan)) and abs(workspace - got[4]) <= 1.0 and \
        abs(plan[3] - got[3]) <= 0.0015
print("%s: plan_gpu_memory_is_the_gpu_trainers (B %s recompute %s cp %s pp %s %s: trainer %s, plan %s)" % (
    "PASS" if ok else "FAIL", sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7],
    got if got else "no memory line", plan))
EOF
    done
fi

# --- the local cluster, measured over 2 ranks; the cost table ---
"$PLAN" "${MODEL[@]}" --cluster "local,$tmp/four.cluster" --devices-per-node 2 --max-micro-batch 2 \
    --price-per-hour 0.5 --train-tokens 1000000000 --csv "$tmp/local.csv" >"$tmp/local.log" 2>&1
rc=$?
check measures_the_local_cluster \
    "[ $rc -eq 0 ] && grep -q '^cluster local: 1 node x 2 CPU ranks = 2 ranks .*(measured)' '$tmp/local.log' &&
     grep -q '^  best (predicted)' '$tmp/local.log'" "exit $rc: $(tail -3 "$tmp/local.log")"
python3 - "$tmp/local.csv" "$tmp/local.log" <<'EOF'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["valid"] == "1"]
ok = rows and all(float(r["step_ms"]) > 0 and float(r["tokens_per_s"]) > 0 and
                  abs(float(r["step_ms"]) - sum(float(r[k]) for k in ("fwd_ms", "bwd_ms", "comm_ms", "bubble_ms", "opt_ms")))
                  < 0.01 * float(r["step_ms"]) + 1e-3 for r in rows)
print("%s: plan_predicts_each_valid_layout_and_its_parts_add_up (%d layouts)" % ("PASS" if ok else "FAIL", len(rows)))
lines = open(sys.argv[2]).read().split("a run of 1e+09 tokens, the best layout on each cluster:")[-1].splitlines()
costs = {}
for line in lines:
    f = line.split()
    if len(f) > 5 and f[1].isdigit():
        costs[f[0]] = [float(x) for x in f[1:5]]
good = set(costs) == {"local", "four"}
for name, (devices, tok_s, hours, cost) in costs.items():
    good &= abs(hours - 1e9 / tok_s / 3600) <= 0.006 + 0.01 * hours and abs(cost - hours * devices * 0.5) <= 0.01 + 0.01 * cost
print("%s: plan_costs_each_cluster_from_its_speed_and_price (%s)" % ("PASS" if good else "FAIL", costs))
EOF
