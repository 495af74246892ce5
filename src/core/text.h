/* A growing buffer of bytes or text: what kiln builds before it writes or compiles it (OpenCL
 * sources, printed tensors, safetensors headers, TensorBoard records). An append that cannot
 * grow it sets `oom`, which sticks, so a builder appends freely and checks once at the end.
 * The bytes are always followed by a NUL (not counted in len): a text is a C string as it is. */
#ifndef KILN_CORE_TEXT_H
#define KILN_CORE_TEXT_H

#include <stdarg.h>
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct kiln__text {
    char *s;
    size_t len, cap;
    bool oom;
} kiln__text;

void kiln__text_put(kiln__text *t, const void *bytes, size_t n);
void kiln__text_printf(kiln__text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kiln__text_vprintf(kiln__text *t, const char *fmt, va_list ap);
/* Empties t for reuse, keeping its memory (and clearing oom). */
void kiln__text_clear(kiln__text *t);
void kiln__text_free(kiln__text *t);

#endif
