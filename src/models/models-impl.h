/* kiln models internals: a reader of flat JSON objects (config.json) that keeps the top-level
 * members whose values are numbers, strings, booleans or null, and checks (then skips) nested
 * arrays and objects. The text is hostile until parsed: bounded nesting, bounded sizes, every
 * byte checked, no allocation. */
#ifndef KILN_MODELS_IMPL_H
#define KILN_MODELS_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#define KILN__JSON_MAX_DEPTH 32 /* deeper nesting is refused, so hostile text cannot exhaust the stack */
#define KILN__JSON_KEY_MAX 64   /* bytes of a kept key or string value, NUL included */

typedef enum { KILN__JSON_NUMBER, KILN__JSON_STRING, KILN__JSON_BOOL, KILN__JSON_NULL, KILN__JSON_OTHER } kiln__json_type;

typedef struct {
    char key[KILN__JSON_KEY_MAX]; /* decoded */
    kiln__json_type type;         /* OTHER: an array, an object, or a string too long to keep */
    double number;
    bool boolean;
    char string[KILN__JSON_KEY_MAX];
} kiln__json_member;

/* Parses text (len bytes, need not be NUL-terminated) as one JSON object, keeping up to cap of
 * its top-level members in out (*count of them). Members whose key is longer than
 * KILN__JSON_KEY_MAX - 1 bytes are checked and dropped. False, with the reason and byte offset
 * in why, for malformed JSON, a duplicate key, more than cap members or nesting deeper than
 * KILN__JSON_MAX_DEPTH. */
bool kiln__json_parse_flat(const char *text, size_t len, kiln__json_member *out, int cap, int *count, char *why,
                           size_t why_size);
/* The member named key, or NULL. */
const kiln__json_member *kiln__json_find(const kiln__json_member *m, int count, const char *key);

#endif
