# gpu_trainer.sh (sourced by the GPU trainer's test scripts): picks the binary
# and the check-name prefix, and SKIPs (exit 0) when there is nothing to test.
#   EMULATED=1: $BUILD/emu/train_gptcu, train_gpt.cu compiled for
#               tests/cuda_emulator.h (kernels, cuBLASLt, streams and copies on
#               the CPU; no GPU needed); check names start with "emulated_".
#   otherwise:  $BUILD/train_gptcu on the machine's GPU.
# Sets TRAIN and P; takes the suite's name ($1) for the SKIP lines. Sources
# tests/checks.sh (its helpers prefix their names with P).
. tests/checks.sh
EMULATED=${EMULATED:-0}
if [ "$EMULATED" = 1 ]; then
    TRAIN=$BUILD/emu/train_gptcu P=emulated_
else
    TRAIN=$BUILD/train_gptcu P=
fi
if [ ! -x "$TRAIN" ]; then
    echo "SKIP: $P$1 (no $TRAIN: built without CUDA, or a sanitizer build)"
    exit 0
fi
if [ "$EMULATED" != 1 ] && [ "$(gpu_count)" -eq 0 ]; then
    echo "SKIP: $1 (no GPU)"
    exit 0
fi
