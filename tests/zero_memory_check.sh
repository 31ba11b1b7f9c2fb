# zero_memory_check.sh: sourced by the distributed tests. check_zero_memory_line
# NAME LOG STAGE RANKS P G O reads the trainer's "memory per rank" line from LOG
# and checks it against the ZeRO formula (llmc/zero_shard.h): S = ceil(N / RANKS)
# rounded up to 64 elements; params P B x (N, or S at stage 3), grads G B x (N,
# or S at 2+), optimizer O B x (N, or S at 1+). Prints PASS or FAIL (also
# FAIL when LOG has no such line, or one without N, S and the three sizes).
check_zero_memory_line() {
    local name=$1 log=$2 stage=$3 np=$4 pb=$5 gb=$6 ob=$7 line
    line=$(grep -m1 '^memory per rank' "$log" 2>/dev/null)
    if [ -n "$line" ] && echo "$line" | awk -v z="$stage" -v np="$np" -v pb="$pb" -v gb="$gb" -v ob="$ob" '{
            if (!match($0, /N = [0-9]+/)) exit 1
            n = substr($0, RSTART + 4, RLENGTH - 4) + 0
            if (!match($0, /shard S = [0-9]+/)) exit 1
            s = substr($0, RSTART + 10, RLENGTH - 10) + 0
            if (n <= 0 || split($0, mb, / MB/) < 4) exit 1
            want_s = int((n + np - 1) / np); want_s = int((want_s + 63) / 64) * 64
            p = mb[1]; sub(/.*\): params /, "", p)
            g = mb[2]; sub(/.*grads /, "", g); o = mb[3]; sub(/.*AdamW m,v /, "", o)
            ep = pb * (z >= 3 ? s : n) / 1e6; eg = gb * (z >= 2 ? s : n) / 1e6; eo = ob * (z >= 1 ? s : n) / 1e6
            ok = s == want_s && (p - ep)^2 < 1e-6 && (g - eg)^2 < 1e-6 && (o - eo)^2 < 1e-6
            exit !ok }'; then
        echo "PASS: ${name}_memory_line_follows_zero_formula"
    else
        echo "FAIL: ${name}_memory_line_follows_zero_formula ($line)"
    fi
}
