// fuzz_modelfile.c: the llm.c model file reader (llmc/modelfile.h) on
// arbitrary contents: the header's shape is bounded and the file's size
// checked against it before any tensor is read; a file that passes loads.
#include "llmc/modelfile.h"
#include "tests/fuzz/fuzz_harness.h"

#define FUZZ_MODEL_MAX_ELEMENTS (1 << 22)  // a header that passes but needs more is not loaded (memory)

static void fuzz_one(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("model.bin", data, size);
    GPTConfig cfg;
    modelfile_read_config(path, &cfg);
    ParamLayout pl;
    param_layout_init(&pl, &cfg);
    if (pl.num_elements <= FUZZ_MODEL_MAX_ELEMENTS) {
        float *params = (float *)mallocCheck(sizeof(float) * (size_t)pl.num_elements);
        modelfile_load(path, &pl, params);
        free(params);
    }
    param_layout_free(&pl);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_run(fuzz_one, NULL, data, size);
    return 0;
}
