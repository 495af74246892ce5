/* Internals of the summary writer shared by its files (src/train/summary*.c). */
#ifndef KILN_TRAIN_SUMMARY_IMPL_H
#define KILN_TRAIN_SUMMARY_IMPL_H

#include "kiln/core.h"
#include "train/tfevents.h"

/* TensorBoard's default bucket edges (torch's bins="tensorflow"): -1e-12 * 1.1^k mirrored,
 * 0, then 1e-12 * 1.1^k up to 1e20, ascending. Returns how many edges; the buckets are one
 * fewer. */
int kiln__histogram_edges(const double **edges);

/* Queues the histogram of values (consumed) on its device: a 1-d f64 tensor of 4 + buckets
 * values, [min, max, sum, sum of squares, count of bucket 0, ...]. */
kiln_tensor kiln__histogram_compute(kiln_tensor values);

/* From what kiln__histogram_compute read back (stats) and the element count, the proto
 * fields as torch writes them: only the buckets from the one left of the first non-empty to
 * the last non-empty. limits and counts need room for every bucket + 1. false when no value
 * was counted (torch refuses such a histogram too). */
bool kiln__histogram_trim(const double *stats, int64_t numel, double *limits, double *counts, kiln__histogram_proto *out);

#endif
