// fuzz_safetensors.c: the Hugging Face model reader (llmc/safetensors.h,
// llmc/hf_gpt2.h) on an arbitrary safetensors file: the header's length,
// JSON, dtypes, shapes and offsets are checked before any tensor is read; a
// file whose GPT-2 shape passes (heads: 1, as --n-head 1 gives) loads.
#include "llmc/hf_gpt2.h"
#include "tests/fuzz/fuzz_harness.h"

#define FUZZ_MODEL_MAX_ELEMENTS (1 << 22)  // a shape that passes but needs more is not loaded (memory)

static void fuzz_one(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("model.safetensors", data, size);
    GPTConfig cfg;
    hf_read_config(path, 1, &cfg);
    ParamLayout pl;
    param_layout_init(&pl, &cfg);
    if (pl.num_elements <= FUZZ_MODEL_MAX_ELEMENTS) {
        float *params = (float *)mallocCheck(sizeof(float) * (size_t)pl.num_elements);
        hf_load(path, &pl, params);
        free(params);
    }
    param_layout_free(&pl);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_run(fuzz_one, NULL, data, size);
    return 0;
}
