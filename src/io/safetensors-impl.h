/* What the safetensors reader (safetensors.c) and writer (safetensors_write.c) share from
 * safetensors_format.c: the format's details below the public kiln__st_* calls of safetensors.h. */
#ifndef KILN_IO_SAFETENSORS_IMPL_H
#define KILN_IO_SAFETENSORS_IMPL_H

#include "io/safetensors.h"

/* kiln's metadata entry: the CRC-32 of the whole file with its value read as "00000000" */
#define KILN__ST_CRC_KEY "kiln.crc32"

/* Writes the message into why (when given) and returns st. */
kiln_status kiln__st_fail(kiln_status st, char *why, size_t size, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The CRC of bytes[0, size) with the 8 bytes at hole read as "00000000", then of each part. */
uint32_t kiln__st_file_crc(const unsigned char *bytes, size_t size, size_t hole, const unsigned char *const *parts,
                           const size_t *part_sizes, int n_parts);
/* The file's tag of a kiln dtype ("F32"), NULL for one the format lacks. */
const char *kiln__st_dtype_tag(kiln_dtype d);
/* A tag's element size (0: no such tag) and its kiln dtype in *dtype (-1: kiln has none). */
unsigned kiln__st_dtype_size(const char *tag, int *dtype);
/* Parses the n header bytes at hdr into f's tensors and metadata, decoded strings in
 * f->strings (n + 1 bytes); *crc_at: the file position of kiln's CRC value, 0 if absent. */
kiln_status kiln__st_parse_header(const unsigned char *hdr, size_t n, kiln__st_file *f, size_t *crc_at, char *why,
                                  size_t why_size);
/* Once f->bytes holds the whole file: its CRC against kiln's entry at crc_at, if any. */
kiln_status kiln__st_check_crc(const kiln__st_file *f, size_t crc_at, char *why, size_t why_size);

#endif
