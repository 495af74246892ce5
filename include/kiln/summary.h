/* kiln summary: TensorBoard event files, as torch.utils.tensorboard.SummaryWriter writes them
 * (`tensorboard --logdir runs` shows them as they are). Adding never waits for the device: a
 * scalar may still be a tensor being computed, a histogram is computed where its tensor lives,
 * and a writer thread reads what is pending in one transaction per batch of events, then
 * appends them to the file.
 *
 *   kiln_summary_writer *w = kiln_summary_writer_open("runs/mlp");  // NULL: see kiln_last_error
 *   kiln_tensor loss = kiln_sum(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(10), 1));
 *   kiln_tensor weight = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(256, 784), 2);
 *   kiln_summary_writer_add_scalar_tensor(w, "train/loss", kiln_ref(loss), 1);  // no wait
 *   kiln_summary_writer_add_scalar(w, "train/lr", 1e-3, 1);
 *   kiln_summary_writer_add_histogram(w, "fc1.weight", kiln_ref(weight), 1);    // on its device
 *   kiln_summary_writer_add_text(w, "notes", "first run", 1);
 *   if (kiln_summary_writer_close(w) != KILN_OK)     // everything written, or why not
 *       fprintf(stderr, "%s\n", kiln_last_error());
 *   kiln_summary_writer_free(w);
 *   kiln_release(loss);
 *   kiln_release(weight);
 *
 * Errors never stop training: a directory that cannot be written fails the open (NULL, the
 * message names the call and its line); an event that fails later (a poisoned tensor, a full
 * disk) is dropped and its error returned once by the writer's next call, naming the add that
 * queued it. A NULL writer is KILN_ERR_NULL; using a closed one is KILN_ERR_INVALID_ARGUMENT
 * naming where it was closed. Under MPI only rank 0 writes: elsewhere the writer is open but
 * writes nothing and releases what it is given. The writer's thread takes events about a second
 * after they are added and flushes the file every flush_secs; close (or free) the writer before
 * the program ends, since events still queued at exit are lost. */
#ifndef KILN_SUMMARY_H
#define KILN_SUMMARY_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_summary_writer kiln_summary_writer;

typedef struct {
    double flush_secs;           /* events reach the file at least this often (default 120, as torch) */
    int max_queue;               /* pending events before an add waits for the writer (default 10000) */
    const char *filename_suffix; /* appended to the file name, as torch's (default none) */
} kiln_summary_writer_options;
KILN_API kiln_summary_writer_options kiln_summary_writer_defaults(void);

/* Creates logdir (and its parents) and a new event file in it named
 * events.out.tfevents.<seconds>.<host>.<pid>.<n>, whose first record is the file version.
 * logdir NULL: runs/<Mon>DD_HH-MM-SS_<host>, as torch. NULL on failure (kiln_last_error). */
KILN_API kiln_summary_writer *kiln_summary_writer_open(const char *logdir);
KILN_API kiln_summary_writer *kiln_summary_writer_open_ex(const char *logdir, kiln_summary_writer_options options);
/* The event file's path ("" on a rank other than 0); NULL for a NULL writer. Does not wait. */
KILN_API const char *kiln_summary_writer_path(const kiln_summary_writer *w);

/* One value at a step, stored as TensorBoard's float simple_value. */
KILN_API kiln_status kiln_summary_writer_add_scalar(kiln_summary_writer *w, const char *tag, double value, int64_t step);
/* The same from a tensor of one element (consumed) that may still be queued: read later. */
KILN_API kiln_status kiln_summary_writer_add_scalar_tensor(kiln_summary_writer *w, const char *tag, kiln_tensor value, int64_t step);
/* The distribution of values (consumed; any float or integer dtype, at least one element) in
 * TensorBoard's default buckets (edges +-1e-12 * 1.1^k and 0, as torch's bins="tensorflow"),
 * with min, max, count, sum and sum of squares. Computed by kiln ops on the tensor's device;
 * only the counts are read back. Values outside +-1.1e20, NaN and inf are not counted. */
KILN_API kiln_status kiln_summary_writer_add_histogram(kiln_summary_writer *w, const char *tag, kiln_tensor values, int64_t step);
/* UTF-8 text (Markdown in TensorBoard's text tab), as torch's add_text. */
KILN_API kiln_status kiln_summary_writer_add_text(kiln_summary_writer *w, const char *tag, const char *text, int64_t step);
/* Waits until everything added before is in the file (written and flushed). */
KILN_API kiln_status kiln_summary_writer_flush(kiln_summary_writer *w);
/* Flushes, stops the writer thread and closes the file. Closing twice is harmless; other
 * calls on a closed writer are errors. */
KILN_API kiln_status kiln_summary_writer_close(kiln_summary_writer *w);
KILN_API void kiln_summary_writer_free(kiln_summary_writer *w); /* closes first if needed */

/* ---- call sites ------------------------------------------------------------------------- */
#define KILN_SUMMARY_API(X) \
    X(kiln_summary_writer *, summary_writer_open, (const char *logdir), (logdir)) \
    X(kiln_summary_writer *, summary_writer_open_ex, (const char *logdir, kiln_summary_writer_options options), (logdir, options)) \
    X(kiln_status, summary_writer_add_scalar, (kiln_summary_writer *w, const char *tag, double value, int64_t step), (w, tag, value, step)) \
    X(kiln_status, summary_writer_add_scalar_tensor, (kiln_summary_writer *w, const char *tag, kiln_tensor value, int64_t step), (w, tag, value, step)) \
    X(kiln_status, summary_writer_add_histogram, (kiln_summary_writer *w, const char *tag, kiln_tensor values, int64_t step), (w, tag, values, step)) \
    X(kiln_status, summary_writer_add_text, (kiln_summary_writer *w, const char *tag, const char *text, int64_t step), (w, tag, text, step)) \
    X(kiln_status, summary_writer_flush, (kiln_summary_writer *w), (w)) \
    X(kiln_status, summary_writer_close, (kiln_summary_writer *w), (w))
KILN_SUMMARY_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_summary_writer_open(...) KILN__AT(summary_writer_open, __VA_ARGS__)
#define kiln_summary_writer_open_ex(...) KILN__AT(summary_writer_open_ex, __VA_ARGS__)
#define kiln_summary_writer_add_scalar(...) KILN__AT(summary_writer_add_scalar, __VA_ARGS__)
#define kiln_summary_writer_add_scalar_tensor(...) KILN__AT(summary_writer_add_scalar_tensor, __VA_ARGS__)
#define kiln_summary_writer_add_histogram(...) KILN__AT(summary_writer_add_histogram, __VA_ARGS__)
#define kiln_summary_writer_add_text(...) KILN__AT(summary_writer_add_text, __VA_ARGS__)
#define kiln_summary_writer_flush(...) KILN__AT(summary_writer_flush, __VA_ARGS__)
#define kiln_summary_writer_close(...) KILN__AT(summary_writer_close, __VA_ARGS__)
#endif
/* The free call records its file:line too: a later use of the freed writer names it. */
KILN__FREE_AT_DECLARE(kiln_summary_writer, summary_writer_free)
#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#define kiln_summary_writer_free(...) KILN__AT(summary_writer_free, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif
