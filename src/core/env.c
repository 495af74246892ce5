/* Settings read from the environment (KILN_ENGINE_THREADS, KILN_CACHE_LIMIT_MB,
 * KILN_DDP_BUCKET_KB, KILN_SYNC, ...), parsed one strict way. A setting is either unset (or
 * empty), or valid: the whole value a number in the setting's range, or for a switch one of
 * 0/1/true/false/yes/no/on/off. Anything else ("64abc", "-5" where sizes start at 1, a value
 * past the range or past int64) is not half-read: kiln says so once per setting on stderr,
 * naming the variable, its value and the range, and uses the default. A warning and not a
 * failure because settings are read lazily by whichever call first needs them (often inside
 * an unrelated op or a worker thread), where no status can reach the user; the default keeps
 * the program correct. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/core-impl.h"

#define MAX_WARNED 64

static struct {
    pthread_mutex_t lock;
    char names[MAX_WARNED][48];
    int n;
} warned = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Tells the user once per variable (a setting is often read more than once) that its value was
 * not used. */
static void warn_once(const char *name, const char *value, const char *wanted, const char *fallback) {
    pthread_mutex_lock(&warned.lock);
    bool seen = false;
    for (int i = 0; i < warned.n && !seen; i++) seen = strcmp(warned.names[i], name) == 0;
    if (!seen && warned.n < MAX_WARNED) snprintf(warned.names[warned.n++], sizeof warned.names[0], "%s", name);
    pthread_mutex_unlock(&warned.lock);
    if (!seen) fprintf(stderr, "kiln: ignoring %s=\"%s\": not %s; using %s\n", name, value, wanted, fallback);
}

/* The value of name, or NULL when unset or empty (both mean "the default"). */
static const char *value_of(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int64_t kiln__env_int_range(const char *name, int64_t min, int64_t max, int64_t fallback) {
    const char *v = value_of(name);
    if (!v) return fallback;
    char *end;
    errno = 0;
    long long x = isspace((unsigned char)v[0]) ? 0 : strtoll(v, &end, 10);
    bool ok = !isspace((unsigned char)v[0]) && end != v && *end == '\0' && errno == 0 && x >= min && x <= max;
    if (ok) return (int64_t)x;
    char wanted[96], dflt[32];
    if (max == INT64_MAX) snprintf(wanted, sizeof wanted, "a whole number >= %lld", (long long)min);
    else snprintf(wanted, sizeof wanted, "a whole number in [%lld, %lld]", (long long)min, (long long)max);
    snprintf(dflt, sizeof dflt, fallback < min ? "the default" : "%lld", (long long)fallback);
    warn_once(name, v, wanted, dflt);
    return fallback;
}

int64_t kiln__env_int(const char *name, int64_t min, int64_t fallback) {
    return kiln__env_int_range(name, min, INT64_MAX, fallback);
}

double kiln__env_double(const char *name, double min, double max, double fallback) {
    const char *v = value_of(name);
    if (!v) return fallback;
    char *end;
    errno = 0;
    double x = isspace((unsigned char)v[0]) ? NAN : strtod(v, &end);
    bool ok = !isnan(x) && end != v && *end == '\0' && errno == 0 && x >= min && x <= max;
    if (ok) return x;
    char wanted[96], dflt[32];
    snprintf(wanted, sizeof wanted, "a number in [%g, %g]", min, max);
    snprintf(dflt, sizeof dflt, "%g", fallback);
    warn_once(name, v, wanted, dflt);
    return fallback;
}

bool kiln__env_flag(const char *name, bool fallback) {
    const char *v = value_of(name);
    if (!v) return fallback;
    static const char *const on[] = {"1", "true", "yes", "on"}, *const off[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(v, on[i]) == 0) return true;
        if (strcasecmp(v, off[i]) == 0) return false;
    }
    warn_once(name, v, "a switch (0/1, true/false, yes/no, on/off)", fallback ? "1" : "0");
    return fallback;
}
