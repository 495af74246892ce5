/* libFuzzer target for the flat JSON reader behind kiln_bert_load's config.json and
 * 1_Pooling/config.json (src/models/json.c): any bytes, parsed with room for few and for many
 * members; a parse that succeeds must give keys and kept strings that are NUL-terminated. */
#include <stdint.h>
#include <string.h>

#include "models/models-impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static kiln__json_member members[256];
    char why[256];
    for (int cap = 2; cap <= 256; cap *= 128) {
        int n = -1;
        if (!kiln__json_parse_flat((const char *)data, size, members, cap, &n, why, sizeof why)) continue;
        if (n < 0 || n > cap) __builtin_trap();
        for (int i = 0; i < n; i++) {
            if (!memchr(members[i].key, 0, sizeof members[i].key)) __builtin_trap();
            if (members[i].type == KILN__JSON_STRING && !memchr(members[i].string, 0, sizeof members[i].string))
                __builtin_trap();
            if (kiln__json_find(members, n, members[i].key) != &members[i]) __builtin_trap(); /* keys are unique */
        }
    }
    return 0;
}
