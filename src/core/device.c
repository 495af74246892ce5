/* Device names: kiln_device_name ("cpu", "opencl:1") and its inverse kiln_device_parse, both
 * from the one list of device kinds (KILN_DEVICE_KINDS in kiln/core.h), so a new kind needs no
 * edit here. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core-impl.h"

/* Each kind's name and whether device 0's name carries its index, from the one list of kinds. */
static const struct {
    const char *name;
    bool index0;
} kinds[KILN_KIND_COUNT] = {
#define KIND_NAME(NAME, kind, id, index0) [kind] = {#id, index0},
    KILN_DEVICE_KINDS(KIND_NAME)
#undef KIND_NAME
};

/* "cpu", "opencl:15": names built once, so the pointers stay valid for the process. */
static char device_names[KILN__DEVICE_SLOTS][24];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void names_init(void) {
    for (int k = 0; k < KILN_KIND_COUNT; k++)
        for (int i = 0; kinds[k].name && i < KILN_MAX_DEVICES; i++) {
            int slot = kiln__device_slot((kiln_device)(k << 8 | i));
            if (slot < 0) continue;
            if (i || kinds[k].index0)
                snprintf(device_names[slot], sizeof device_names[0], "%s:%d", kinds[k].name, i);
            else
                snprintf(device_names[slot], sizeof device_names[0], "%s", kinds[k].name);
        }
}

const char *kiln_device_name(kiln_device dev) {
    int slot = kiln__device_slot(dev);
    if (slot < 0) return "invalid";
    pthread_once(&names_once, names_init);
    return device_names[slot];
}

kiln_status kiln_device_parse(const char *name, kiln_device *out) {
    if (!name || !out) return kiln__report(KILN_ERR_NULL, "kiln_device_parse", "name or out is NULL");
    for (int k = 0; k < KILN_KIND_COUNT; k++) {
        if (!kinds[k].name) continue;
        size_t n = strlen(kinds[k].name);
        if (strncmp(name, kinds[k].name, n) != 0) continue;
        int idx = 0;
        if (name[n] == ':') {
            char *end;
            long v = strtol(name + n + 1, &end, 10);
            if (end == name + n + 1 || *end || v < 0 || v >= KILN_MAX_DEVICES) break;
            idx = (int)v;
        } else if (name[n]) {
            continue;
        }
        kiln_device d = (kiln_device)(k << 8 | idx);
        if (kiln__device_slot(d) < 0) break;
        *out = d;
        return KILN_OK;
    }
    return kiln__report(KILN_ERR_INVALID_ARGUMENT, "kiln_device_parse", "unknown device \"%s\"", name);
}
