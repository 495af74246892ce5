/* What the table-driven device tests (tests/test_backend_ops.c: the op table's rows;
 * tests/test_backend_ops_reduce.c: the reduction table's) share: the public functions of the
 * generated call-site list by name, the KILN_TEST_OPS selection, the inputs' shape, layouts and
 * values, and the normalized error. */
#ifndef KILN_TEST_BACKEND_OPS_H
#define KILN_TEST_BACKEND_OPS_H

#include <kiln.h>
#include <string.h>

#include "backend/backend-impl.h"
#include "gradcheck.h"
#include "ir/expr.h"
#include "ir/opcodes.h"
#include "kiln_test.h"

typedef kiln_tensor (*unary_fn)(kiln_tensor);
typedef kiln_tensor (*binary_fn)(kiln_tensor, kiln_tensor);

/* The public function of each row the table gives a signature, from its generated list (named
 * without a call: the function, not the call-site macro). */
static const struct {
    const char *name;
    void (*fn)(void);
} publics[] = {
#define PUBLIC(ret, name, params, args) {#name, (void (*)(void))kiln_##name},
    KILN_OPS_API(PUBLIC)
#undef PUBLIC
};

static inline void (*public_of(const char *name))(void) {
    for (size_t i = 0; i < sizeof publics / sizeof publics[0]; i++)
        if (strcmp(publics[i].name, name) == 0) return publics[i].fn;
    return NULL;
}

/* KILN_TEST_OPS=softsign,sum: only the rows named (all when unset). */
static inline bool name_selected(const char *name) {
    const char *only = getenv("KILN_TEST_OPS");
    if (!only || !*only) return true;
    size_t n = strlen(name);
    for (const char *p = only; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, name, n) == 0) return true;
        p += len + (p[len] == ',');
    }
    return false;
}

/* ---- inputs ------------------------------------------------------------------------------ */

enum { ROWS = 5, COLS = 37, LAYOUTS = 4 };
static const char *const layout_names[LAYOUTS] = {"contiguous", "transposed", "broadcast", "narrowed"};

static inline uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 11;
}

/* n values of the row's domain, exactly representable in the dtype (floats in f32, integers
 * whole), so the f32 and f64 runs of a case see the same numbers. */
static inline void fill(double *v, int64_t n, kiln__test_domain dom, kiln_dtype dt, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        double u = (double)lcg(&s) / 9007199254740992.0; /* [0, 1) */
        double x = dom == KILN__DOMAIN_POS ? 0.25 + 2.25 * u : dom == KILN__DOMAIN_WIDE ? -6 + 12 * u : -2.5 + 5 * u;
        if (dom == KILN__DOMAIN_AWAY) x = (x < 0 ? -0.25 : 0.25) + x * 0.9;
        if (dom == KILN__DOMAIN_BOOL || dt == KILN_BOOL) x = u < 0.5;
        else if (dt == KILN_I32) x = dom == KILN__DOMAIN_POS ? 1 + (int)(u * 4) : dom == KILN__DOMAIN_AWAY ? (u < 0.5 ? -1 - (int)(u * 8) : 1 + (int)((u - 0.5) * 8)) : (int)(u * 9) - 4;
        else x = (double)(float)x;
        v[i] = x;
    }
}

/* Normalized squared error of got against want, NaN and infinities matching themselves. */
static inline double nmse(const double *got, const double *want, int64_t n) {
    double err = 0, norm = 0;
    for (int64_t i = 0; i < n; i++) {
        if ((isnan(got[i]) && isnan(want[i])) || (isinf(want[i]) && got[i] == want[i])) continue;
        if (!isfinite(got[i]) || !isfinite(want[i])) return INFINITY;
        err += (got[i] - want[i]) * (got[i] - want[i]);
        norm += want[i] * want[i];
    }
    return err / (norm > 0 ? norm : 1);
}

static inline const char *dtype_str(kiln_dtype dt) { return kiln_dtype_name(dt); }

/* KILN_TEST_OPS_UNSUPPORTED=1: each case a device does not run is listed (else counted). */
static inline bool list_unsupported(void) {
    const char *v = getenv("KILN_TEST_OPS_UNSUPPORTED");
    return v && atoi(v);
}

/* The n-th registered device after the CPU (kinds in registry order), KILN_CPU past the last:
 *   for (int n = 0; other_device(n) != KILN_CPU; n++) { kiln_device dev = other_device(n); ... } */
static inline kiln_device other_device(int n) {
    for (int k = 1; k < KILN_KIND_COUNT; k++) {
        int count = kiln_device_count((kiln_device_kind)k);
        if (n < count) return (kiln_device)(k << 8 | n);
        n -= count;
    }
    return KILN_CPU;
}

/* One case on another device, its status st: false when there is nothing to compare (the
 * device does not take it: counted in *unsupported, printed when list; or it failed: a check
 * failure). what names the case ("exp f32 transposed"). */
static inline bool device_case_ran(kiln_device dev, kiln_status st, const char *what, bool list, int *unsupported) {
    if (st == KILN_ERR_UNSUPPORTED || st == KILN_ERR_DTYPE) {
        ++*unsupported;
        if (list) printf("%s: %s: not supported (%s)\n", kiln_device_name(dev), what, kiln_last_error());
        return false;
    }
    KT_CHECK_MSG(st == KILN_OK, "%s: %s: %s", kiln_device_name(dev), what, kiln_last_error());
    return st == KILN_OK;
}

/* A device's normalized error e against the CPU's values: the CPU's own tolerance cpu_tol (0:
 * exact) loosened to another compiler's math and summation order. */
static inline void device_case_matches(kiln_device dev, const char *what, kiln_dtype dt, double e, double cpu_tol) {
    double tol = cpu_tol > 0 ? (dt == KILN_F64 ? 1e-20 : 1e-9) : cpu_tol;
    KT_CHECK_MSG(e <= tol, "%s: %s: normalized error %.3g > %.3g against the cpu", kiln_device_name(dev), what, e, tol);
}

static inline void device_summary(kiln_device dev, const char *kind, int cases, int unsupported, bool list) {
    printf("%s: %d %scases, %d not supported%s\n", kiln_device_name(dev), cases, kind, unsupported,
           unsupported && !list ? " (KILN_TEST_OPS_UNSUPPORTED=1 lists them)" : "");
}

#endif
