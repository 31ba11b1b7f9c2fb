# gpu_trainer.sh (sourced by the GPU trainer's test scripts): picks the binary
# and the check-name prefix, and SKIPs (exit 0) when there is nothing to test.
#   EMULATED=1: $BUILD/emu/train_gptcu, train_gpt.cu compiled for
#               tests/cuda_emulator.h (kernels, cuBLASLt, streams and copies on
#               the CPU; no GPU needed); check names start with "emulated_".
#   otherwise:  $BUILD/train_gptcu on the machine's GPU.
# Sets TRAIN, P (the helpers of tests/checks.sh prefix their names with it) and
# quick; takes the suite's name ($1) for the SKIP lines. Sourced after tests/lib.sh.
EMULATED=${EMULATED:-0}
# quick: the emulated trainer in a sanitizer build (tests/lib.sh's sanitizer_build), where scripts run
# their first layouts only (CI's time)
quick=0
[ "$EMULATED" = 1 ] && [ "${sanitizer_build:-0}" = 1 ] && quick=1
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
