/* libFuzzer target for the safetensors reader: every input is a whole file's bytes, parsed
 * and checked by the same code kiln_checkpoint_load runs, then looked up the way a load does. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

volatile unsigned char fuzz_sink; /* each tensor byte read lands here, so ASan sees a bad offset */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln__st_file f;
    char why[256];
    if (kiln__st_parse(data, size, &f, why, sizeof why) != KILN_OK) return 0;
    /* what a load touches: every tensor found by name, its bytes inside the data */
    for (int i = 0; i < f.n_tensors; i++) {
        const kiln__st_tensor *t = kiln__st_find(&f, f.tensors[i].name);
        if (t != &f.tensors[i] || t->end > f.data_len) __builtin_trap();
        for (uint64_t b = t->begin; b < t->end; b += 64) fuzz_sink = f.data[b];
    }
    for (int i = 0; i < f.n_meta; i++)
        if (kiln__st_meta_get(&f, f.meta[i].key) != f.meta[i].value) __builtin_trap();
    kiln__st_free(&f);
    return 0;
}
