#!/usr/bin/env bash
# test_zero_api.sh: the two ZeRO backends (llmc/zero_cpu.h, llmc/zero_gpu.cuh)
# provide one API: exactly the verbs llmc/zero_shard.h lists, no other public
# zero_* function (a backend's helpers are zero_cpu_* / zero_gpu_*), a struct
# named Zero whose fields begin with the listed common ones in their order,
# the models own their state: neither backend runs AdamW or stages
# checkpoints, and both trainers finish a step's gradients with the same
# calls in the same order. Reads the sources only (no build).
set -u
cd "$(dirname "$0")/.."
fails=0
result() {  # ok name detail
    if [ "$1" = 1 ]; then echo "PASS: $2"; else echo "FAIL: $2 ($3)"; fails=$((fails + 1)); fi
}

# the verbs: zero_shard.h's block, one `//   zero_NAME(` or `//   Zero ` a line
listed=$(sed -n '/^\/\/ Ownership:/,/^#ifndef/p' llmc/zero_shard.h | grep -o '^//   zero_[a-z_]*' | sed 's|^//   ||' | sort -u)
[ -n "$listed" ] && ok=1 || ok=0
result $ok zero_shard_h_lists_the_verbs "no verbs found in zero_shard.h's Ownership block"
# the fields every backend's Zero begins with: the `Zero { ... }` of that block
common=$(sed -n '/^\/\/   Zero {/,/}/p' llmc/zero_shard.h | sed 's|^//||; s|}.*||; s|.*{||' | tr ',' '\n' |
    tr -d ' .' | grep -v '^$')

for f in llmc/zero_cpu.h llmc/zero_gpu.cuh; do
    b=$(basename "$f")
    public=$(grep -oE '^(static |__global__ )+[a-zA-Z_ ]*[ *]zero_[a-z_]+\(' "$f" | grep -oE 'zero_[a-z_]+\($' |
        tr -d '(' | grep -vE '^zero_(cpu|gpu)_' | sort -u)
    missing=$(comm -23 <(echo "$listed") <(echo "$public") | tr '\n' ' ')
    extra=$(comm -13 <(echo "$listed") <(echo "$public") | tr '\n' ' ')
    [ -z "$missing$extra" ] && ok=1 || ok=0
    result $ok "${b}_provides_exactly_the_listed_verbs" "missing: ${missing:-none}; not listed: ${extra:-none}"
    # the struct's fields in order: each declaration's names (comments, types, pointers, sizes dropped)
    fields=$(sed -n '/^typedef struct {$/,/^} Zero;$/p' "$f" | tac | sed -n '/^} Zero;$/,/^typedef struct {$/p' | tac |
        sed 's|//.*||; s|\[[^]]*\]||g' | grep '^ .*;' | tr -d ';' | tr ',' '\n' | sed 's/[[:space:]]*$//' |
        grep -oE '[A-Za-z_][A-Za-z_0-9]*$')
    prefix=$(echo "$fields" | head -n "$(echo "$common" | wc -l)")
    [ -n "$common" ] && [ "$prefix" = "$common" ] && ok=1 || ok=0
    result $ok "${b}_struct_Zero_begins_with_the_common_fields" "$(echo $prefix) vs $(echo $common)"
    grep -qE 'adamw_update|ckpt_stage|stage_state|m->adam_|z->m\b|z->v\b' "$f" && ok=0 || ok=1
    result $ok "${b}_leaves_adamw_and_checkpoint_state_to_the_model" "$(grep -nE 'adamw_update|ckpt_stage|stage_state' "$f" | head -1)"
done
# one order of finishing a step's gradients: the same calls in pipeline_cpu.h's and pipeline_gpu.cuh's finish_grads
order() {  # file function: the ZeRO verbs, the tie and the norm's sum in the order the function calls them
    sed -n "/^static float $2(/,/^}/p" "$1" | grep -oE '\b(zero_[a-z_]+|pipeline_tie_grads|comm_all_reduce)\(' | tr -d '(' | tr '\n' ' '
}
cpu=$(order llmc/pipeline_cpu.h pipeline_finish_grads)
gpu=$(order llmc/pipeline_gpu.cuh pipeline_gpu_finish_grads)
[ -n "$cpu" ] && [ "$cpu" = "$gpu" ] && ok=1 || ok=0
result $ok both_trainers_finish_gradients_in_one_order "CPU: $cpu; GPU: $gpu"
exit $((fails > 0))
