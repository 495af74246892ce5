/* The growing buffer of core/text.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"

/* Room for n more bytes and the NUL; false (oom set) when there is none to be had. */
static bool reserve(kiln__text *t, size_t n) {
    if (t->oom) return false;
    if (n > SIZE_MAX / 2 - t->len) return t->oom = true, false;
    if (t->len + n + 1 <= t->cap) return true;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->len + n + 1) cap *= 2;
    char *s = realloc(t->s, cap);
    if (!s) return t->oom = true, false;
    t->s = s;
    t->cap = cap;
    return true;
}

void kiln__text_put(kiln__text *t, const void *bytes, size_t n) {
    if (!reserve(t, n)) return;
    if (n) memcpy(t->s + t->len, bytes, n);
    t->len += n;
    t->s[t->len] = '\0';
}

void kiln__text_vprintf(kiln__text *t, const char *fmt, va_list ap) {
    va_list again;
    va_copy(again, ap);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < 0) {
        t->oom = true;
    } else if ((size_t)n < sizeof small) {
        kiln__text_put(t, small, (size_t)n);
    } else if (reserve(t, (size_t)n)) {
        vsnprintf(t->s + t->len, (size_t)n + 1, fmt, again);
        t->len += (size_t)n;
    }
    va_end(again);
}

void kiln__text_printf(kiln__text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kiln__text_vprintf(t, fmt, ap);
    va_end(ap);
}

void kiln__text_clear(kiln__text *t) {
    t->len = 0;
    t->oom = false;
    if (t->s) t->s[0] = '\0';
}

void kiln__text_free(kiln__text *t) {
    free(t->s);
    *t = (kiln__text){0};
}
