/* TensorBoard's event-file format, written by hand: CRC32C, the record framing (length, its
 * masked CRC, data, the data's masked CRC) and the few protocol-buffer messages a summary
 * writer needs (Event, Summary.Value with simple_value, HistogramProto, a text TensorProto).
 * A reader of records is here too, for the tests: it checks both CRCs. Internal to src/train. */
#ifndef KILN_TRAIN_TFEVENTS_H
#define KILN_TRAIN_TFEVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/text.h"

/* CRC-32C (Castagnoli), as TFRecord uses; crc32c("123456789") == 0xE3069283. With SSE4.2's
 * crc32 instruction where the CPU has it, else by table; both ways are exported for the tests
 * (by_instruction: false when the CPU lacks it). */
uint32_t kiln__crc32c(const void *data, size_t n);
uint32_t kiln__crc32c_by_table(const void *data, size_t n);
bool kiln__crc32c_by_instruction(const void *data, size_t n, uint32_t *crc);
/* TFRecord's mask: rotated right by 15, plus a constant, so a CRC over data that holds CRCs
 * does not degenerate. */
uint32_t kiln__crc32c_masked(const void *data, size_t n);


/* The histogram as HistogramProto holds it; bucket_limit[i] is bucket i's right edge. */
typedef struct {
    double min, max, num, sum, sum_squares;
    const double *bucket_limit, *bucket;
    size_t buckets;
} kiln__histogram_proto;

/* Appends one serialized Event to b: the common fields and one of the payloads. */
void kiln__event_file_version(kiln__text *b, double wall_time);
void kiln__event_scalar(kiln__text *b, double wall_time, int64_t step, const char *tag, float value);
void kiln__event_histogram(kiln__text *b, double wall_time, int64_t step, const char *tag, const kiln__histogram_proto *h);
void kiln__event_text(kiln__text *b, double wall_time, int64_t step, const char *tag, const char *text);

/* Appends data framed as one record to out (out->failed on out of memory). */
void kiln__record_append(kiln__text *out, const void *data, size_t n);
/* Writes data as one record: false on a write error (errno set). */
bool kiln__record_write(FILE *f, const void *data, size_t n);
/* Reads the next record into *out (malloc'd, *n bytes). 1: a record; 0: a clean end of file;
 * -1: a truncated record or a CRC mismatch (corrupt); -2: out of memory or too large. */
int kiln__record_read(FILE *f, uint8_t **out, size_t *n);

#endif
