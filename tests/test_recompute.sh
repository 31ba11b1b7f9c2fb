#!/usr/bin/env bash
# test_recompute.sh: activation recompute (--recompute, llmc/recompute.h) on the CPU trainer. Each policy
# (selective, full, full:2) trains 4 steps of a 4-layer model to the model file of --recompute none, byte
# for byte (the recomputed forward is the forward's code: the same bits), with evaluation; so do they at
# tp 2 with sequence parallel, pp 2 (1f1b, and zb1p: its weight gradients recompute again), cp 2 and data 2
# at ZeRO-3 (CPU ranks under mpirun; without MPI those SKIP). The activation bytes the trainer reports fall
# as the formula (llmc/gpt_activation_sizes.h) says: a full layer keeps only its output, one shared copy
# of the rest; selective drops the probabilities and the GELU output; at T 512 (the probabilities 8 MB a
# layer) the measured peak RSS falls by the formula's bytes within 10%; at cp 2 the attention state a
# rank keeps falls too. A checkpoint written under full resumes under none to none's model. Bad values
# end with one line and exit 2. The sanitizer builds run one process and cp 2.
set -u
cd "$(dirname "$0")/.."
P=recompute_
. tests/lib.sh
TRAIN=$CPU

byte_corpus "$tmp" d 20000 llmc/*.h
# 4 layers of 2 heads; global batch 4 x 32 tokens x 2 micro-batches
COMMON=(--data-train "$tmp/d_train_*.bin" --data-val "$tmp/d_val_*.bin" --eval-every 2 --eval-batches 2
        --n-layer 4 --n-embd 32 --n-head 2 --vocab-size 257 --max-seq-len 64 --seq-len 32 --batch-size 4
        --total-batch-tokens 256 --steps 4 --lr 1e-3 --seed 5 --peak-tflops 1 --comm-timeout 60)

# run NAME NP ARGS...: a run of NP ranks (1: no mpirun) into $tmp/NAME.{bin,json,log}
run() {
    local name=$1 np=$2; shift 2
    local launch=()
    [ "$np" -gt 1 ] && launch=("${MPIRUN[@]}" -np "$np")
    "${launch[@]}" "$TRAIN" "${COMMON[@]}" "$@" --save-model "$tmp/$name.bin" --log-json "$tmp/$name.json" \
        >"$tmp/$name.log" 2>&1 || fail "${name}_runs" "exit $?: $(grep -a -m2 -i error "$tmp/$name.log" | tr '\n' ' ')"
}
# same_as_none LAYOUT NP ARGS...: each policy's model file and validation losses are --recompute none's
same_as_none() {
    local lay=$1 np=$2; shift 2
    run "${lay}_none" "$np" "$@"
    for r in $POLICIES; do
        local name="${lay}_${r/:/_}"
        run "$name" "$np" "$@" --recompute "$r"
        check "${lay}_${r}_model_equals_none_bit_for_bit" "cmp -s '$tmp/${lay}_none.bin' '$tmp/$name.bin'"
        check "${lay}_${r}_validation_losses_equal_none" \
            "[ -n \"\$(val_losses '$tmp/$name.json')\" ] && [ \"\$(val_losses '$tmp/$name.json')\" = \"\$(val_losses '$tmp/${lay}_none.json')\" ]"
    done
}
POLICIES="selective full full:2" OMP_NUM_THREADS=2 same_as_none one 1
# a checkpoint written under full resumes under none (the policy is no part of the state): none's model
OMP_NUM_THREADS=2 run ck_full 1 --recompute full --ckpt-dir "$tmp/ck" --ckpt-every 2
mkdir -p "$tmp/ck2" && cp -r "$tmp/ck/step_00000002" "$tmp/ck2/"
OMP_NUM_THREADS=2 run ck_resumed 1 --ckpt-dir "$tmp/ck2" --resume auto
check "a_full_checkpoint_resumed_under_none_equals_none_bit_for_bit" \
    "grep -aq 'resume: continuing at step 2' '$tmp/ck_resumed.log' && cmp -s '$tmp/one_none.bin' '$tmp/ck_resumed.bin'"

# the activation bytes of the memory line against the formula: per layer (floats, N = B*T = 128, C = 32)
# ln1 N*C, means and rstds 4N, qkv 3NC, atty NC, att B*NH*T*T, residual2 NC, ln2 NC, fch 4NC, fch_gelu 4NC,
# residual3 NC; selective drops att and fch_gelu (one shared copy of each); full keeps residual3 and one
# shared copy of all the others
acts() { grep -o 'activations [0-9.]* MB' "$tmp/$1.log" | awk '{print $2 * 1e6 / 4}'; }
python3 - "$(acts one_none)" "$(acts one_selective)" "$(acts one_full)" "$(acts one_full_2)" <<'EOF'
import sys
none, sel, full, full2 = (float(x) for x in sys.argv[1:])
L, N, C, B, NH, T = 4, 128, 32, 4, 2, 32
att, gelu = B * NH * T * T, 4 * N * C
layer = N * C + 4 * N + 3 * N * C + N * C + att + N * C + N * C + 4 * N * C + gelu + N * C
want = {"selective": none - (L - 1) * (att + gelu), "full": none - (L - 1) * (layer - N * C),
        "full:2": none - (L // 2 - 1) * (layer - N * C)}
for name, got in (("selective", sel), ("full", full), ("full:2", full2)):
    ok = abs(got - want[name]) <= 0.001e6 / 4 * 2  # (the line's 3 decimals of MB)
    print("%s: recompute_%s_activation_floats_as_the_formula (%.0f, want %.0f; none %.0f, %.0f%% of it)" % (
        "PASS" if ok else "FAIL", name, got, want[name], none, 100 * got / none))
EOF

# the measured peak (host RSS) at T 512, one step: it falls by what the activations' formula drops (not
# in the sanitizer builds: their shadow memory)
for r in none selective full; do
    [ $sanitizer_build = 1 ] && break
    "$TRAIN" "${COMMON[@]}" --max-seq-len 512 --seq-len 512 --total-batch-tokens 0 --steps 1 --eval-every 0 \
        --recompute $r >"$tmp/rss_$r.log" 2>&1 || fail "rss_${r}_runs" "$(tail -1 "$tmp/rss_$r.log")"
done
rss() { grep -o 'peak memory (host RSS), MB by rank: [0-9.]*' "$tmp/rss_$1.log" | awk '{print $NF}'; }
mb() { grep -o 'activations [0-9.]* MB' "$tmp/rss_$1.log" | awk '{print $2}'; }
for r in selective full; do
    [ $sanitizer_build = 1 ] && break
    check "${r}_peak_rss_falls_as_the_formula" "awk -v f=\$(mb none) -v fr=\$(mb $r) -v m=\$(rss none) -v mr=\$(rss $r) \
        'BEGIN{d = f - fr; e = m - mr; exit !(d > 10 && e > 0.9 * d && e < 1.1 * d)}'" \
        "activations $(mb none) -> $(mb $r) MB, peak RSS $(rss none) -> $(rss $r) MB"
done

expect_usage_error "--recompute full:0" "^error: --recompute 'full:0': want none, selective, full or full:K" \
    "$TRAIN" "${COMMON[@]}" --recompute full:0
expect_usage_error "--recompute bogus" "^error: --recompute 'bogus'" "$TRAIN" "${COMMON[@]}" --recompute bogus
expect_usage_error "--recompute 2 (the older GPU level)" "^error: --recompute '2'" "$TRAIN" "${COMMON[@]}" --recompute 2

if ! have_mpi; then
    echo "SKIP: recompute under tp, pp, cp and ZeRO-3 (built without MPI or no mpirun)"
    exit 0
fi
need_mpi "recompute under mpirun" 120
# (full:2: full and none layers side by side, each next to the other kind)
POLICIES="selective full full:2" same_as_none cp2 2 --cp 2
check "cp2_attention_state_falls_with_recompute ($(acts cp2_none) > $(acts cp2_selective) > $(acts cp2_full) floats)" \
    "awk -v a=$(acts cp2_none) -v b=$(acts cp2_selective) -v c=$(acts cp2_full) 'BEGIN{exit !(a > b && b > c)}'"
[ $sanitizer_build = 1 ] && exit 0  # (CI's time: the sanitizer builds stop at cp 2)
POLICIES="selective full:2"
same_as_none tp2_sp 2 --tp 2 --sequence-parallel 1
same_as_none pp2_1f1b 2 --pp 2
same_as_none pp2_zb1p 2 --pp 2 --pp-schedule zb1p
same_as_none dp2_zero3 2 --batch-size 2 --zero 3
