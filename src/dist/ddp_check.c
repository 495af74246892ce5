/* kiln_ddp_new's check that every rank wraps the same model: the list of parameters and
 * buffers (count, then each one's name, kind, dtype and shape, in order) hashed on each rank and
 * the hashes all-gathered, one small collective when they agree. When they do not, two more
 * find and describe the first difference, so every rank fails at once naming it, rather than
 * the first step's all-reduces pairing buckets of different sizes (an opaque MPI error, or a
 * hang until the watchdog when the counts differ). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/ddp-impl.h"

enum { DESC_WORDS = 24 }; /* one entry's description for the message: 192 bytes */

static const char *kind_of(const kiln_param *p, const kiln__tensor *t) {
    const kiln__ad_meta *m = t ? t->autodiff : NULL;
    return p->buffer ? "buffer" : m && m->leaf ? "parameter" : "frozen parameter";
}

static void describe(const kiln_param *p, char *out, size_t cap) {
    kiln__error *err = NULL;
    kiln__tensor *t = kiln__handle_peek(*p->slot, "kiln_ddp_new", &err);
    kiln__error_unref(err);
    char shape[96] = "?";
    if (t) kiln__shape_str(shape, sizeof shape, t->ndim, t->shape);
    snprintf(out, cap, "'%s' (%s %s %s)", p->name, kind_of(p, t), t ? kiln_dtype_name(t->dtype) : "?", shape);
}

static uint64_t hash_of(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Gathers n int64 from every rank into out[world * n]; false + c's error on failure. */
static bool gather(kiln__opctx *c, const int64_t *mine, int64_t n, int64_t *out) {
    int world = kiln__dist_size();
    kiln_tensor all = kiln_dist_all_gather(kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(n), mine));
    if (kiln_into_data(all, out, sizeof(int64_t) * (size_t)(n * world)) == KILN_OK) return true;
    kiln__fail(c, kiln_last_status(), "rank %d: comparing the model across ranks: %s", kiln__dist_rank(),
               kiln_last_error());
    return false;
}

void kiln__ddp_check_structure(kiln__opctx *c, const kiln_param *ps, int n) {
    int world = kiln__dist_size();
    if (world < 2) return;
    int64_t *mine = calloc((size_t)n + 2, sizeof *mine);
    int64_t *all = calloc(((size_t)n + 2) * (size_t)world, sizeof *all);
    if (!mine || !all) {
        free(mine), free(all);
        /* (the peers wait in their all-gather until the watchdog: memory for a few words) */
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "rank %d: cannot compare the model across ranks", kiln__dist_rank());
        return;
    }
    char desc[DESC_WORDS * 8];
    uint64_t total = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        describe(&ps[i], desc, sizeof desc);
        mine[i + 2] = (int64_t)hash_of(desc);
        total = (total ^ (uint64_t)mine[i + 2]) * 1099511628211ull;
    }
    int64_t head[2] = {n, (int64_t)total};
    bool same = gather(c, head, 2, all);
    for (int r = 1; same && r < world; r++) same = all[2 * r] == all[0] && all[2 * r + 1] == all[1];
    if (same || c->err) {
        free(mine), free(all);
        return;
    }
    /* every rank knows every count: the per-entry hashes (0 past a rank's end) */
    int64_t most = 0;
    for (int r = 0; r < world; r++) most = all[2 * r] > most ? all[2 * r] : most;
    int64_t *hashes = calloc((size_t)(most ? most : 1), sizeof *hashes);
    int64_t *every = calloc((size_t)(most ? most : 1) * (size_t)world, sizeof *every);
    if (!hashes || !every) {
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "rank %d: the model differs across ranks", kiln__dist_rank());
    } else {
        memcpy(hashes, mine + 2, sizeof *hashes * (size_t)n);
        if (gather(c, hashes, most ? most : 1, every)) {
            /* the first entry in which some rank differs from rank 0, the same on every rank */
            int64_t at = 0;
            int other = 1;
            for (at = 0; at < most; at++) {
                for (other = 1; other < world && every[other * most + at] == every[at]; other++) {}
                if (other < world) break;
            }
            if (at == most) at = 0, other = 1; /* (a hash collision of the totals only) */
            int64_t text[DESC_WORDS] = {0};
            if (at < n) describe(&ps[at], (char *)text, sizeof text);
            else snprintf((char *)text, sizeof text, "nothing (%d entries)", n);
            int64_t *texts = calloc((size_t)world * DESC_WORDS, sizeof *texts);
            if (texts && gather(c, text, DESC_WORDS, texts)) {
                char *a = (char *)texts, *b = (char *)(texts + other * DESC_WORDS);
                a[DESC_WORDS * 8 - 1] = b[DESC_WORDS * 8 - 1] = '\0';
                kiln__fail(c, KILN_ERR_INVALID_ARGUMENT,
                           "the model differs across ranks: rank 0 has %lld parameters and buffers, rank %d %lld; "
                           "the first difference is entry %lld: rank 0 has %s, rank %d has %s",
                           (long long)all[0], other, (long long)all[2 * other], (long long)at, a, other, b);
            } else if (!texts) {
                kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "rank %d: the model differs across ranks", kiln__dist_rank());
            }
            free(texts);
        }
    }
    free(hashes), free(every), free(mine), free(all);
}
