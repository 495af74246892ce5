/* Loading a shared library of users' ops (kiln_custom_op_load_library), torch.ops.load_library's
 * counterpart: the library's kiln_* calls must reach this process's kiln (its registry, engine
 * and streams), not a second copy, so kiln's own object is made global before the library is
 * opened and a library that brought its own kiln is refused. Libraries are never closed: the
 * registry keeps pointers to their callbacks until the process ends. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core-impl.h"
#include "kiln/custom_op.h"

static const char *const me = "kiln_custom_op_load_library";

/* The libraries whose entry point ran, by dlopen handle (one per library however it is named). */
typedef struct loaded_lib {
    void *handle;
    kiln_status status; /* what its entry point returned */
    struct loaded_lib *next;
} loaded_lib;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER; /* also serialises the entry points */
static loaded_lib *loaded;                                     /* guarded by load_lock */

/* Makes the object kiln lives in (libkiln.so, or a program or Python extension that links kiln
 * statically) a provider of symbols to libraries opened later, as RTLD_GLOBAL would have. */
static void export_kiln_symbols(void) {
    Dl_info self;
    if (!dladdr((void *)(uintptr_t)&kiln_custom_op_register, &self) || !self.dli_fname) return;
    void *h = dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_GLOBAL);
    if (h) dlclose(h); /* drops the count RTLD_NOLOAD took; the object stays loaded */
}

static loaded_lib *find_loaded(void *handle) {
    for (loaded_lib *l = loaded; l; l = l->next)
        if (l->handle == handle) return l;
    return NULL;
}

static kiln_status load_locked(const char *path) {
    export_kiln_symbols();
    dlerror();
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        return kiln__report(KILN_ERR_IO, me, "cannot load %s: %s", path, why ? why : "unknown reason");
    }
    loaded_lib *seen = find_loaded(handle);
    if (seen) { /* a second load: its entry point ran once, and is not run again */
        dlclose(handle);
        if (seen->status == KILN_OK) return KILN_OK;
        return kiln__report(seen->status, me, "kiln_register_ops of %s failed when it was first loaded", path);
    }
    void *their_register = dlsym(handle, "kiln_custom_op_register");
    if (their_register && their_register != (void *)(uintptr_t)&kiln_custom_op_register) {
        Dl_info other = {0};
        dladdr(their_register, &other);
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, me,
                            "%s uses its own copy of kiln (%s), whose ops this process would not see: build it "
                            "without linking kiln (its kiln_* calls then resolve to the kiln that loads it)",
                            path, other.dli_fname ? other.dli_fname : "another library");
    }
    loaded_lib *entry = malloc(sizeof *entry);
    if (!entry) return kiln__report(KILN_ERR_OUT_OF_MEMORY, me, "cannot record library %s", path);
    *entry = (loaded_lib){.handle = handle, .status = KILN_OK, .next = loaded};
    loaded = entry; /* recorded before the entry point runs: a failing one is not run twice */
    kiln_status (*entry_point)(void) = (kiln_status(*)(void))(uintptr_t)dlsym(handle, "kiln_register_ops");
    if (!entry_point) return KILN_OK; /* it registers from a constructor */
    kiln_clear_error();
    kiln_status st = entry->status = entry_point();
    if (st == KILN_OK) return KILN_OK;
    char detail[384];
    snprintf(detail, sizeof detail, "%s", kiln_last_error()[0] ? kiln_last_error() : kiln_status_str(st));
    return kiln__report(st, me, "kiln_register_ops of %s failed: %s", path, detail);
}

kiln_status kiln_custom_op_load_library(const char *path) {
    if (!path || !path[0]) return kiln__report(KILN_ERR_INVALID_ARGUMENT, me, "path must be a non-empty string");
    pthread_mutex_lock(&load_lock);
    kiln_status st = load_locked(path);
    pthread_mutex_unlock(&load_lock);
    return st;
}
