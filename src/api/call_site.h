/* Defines the call-site wrappers that the public headers declare from their "call sites"
 * lists (KILN__AT_DECLARE in kiln/core.h): kiln__<name>_at(args..., file, line) records the
 * caller's location on this thread, after the caller evaluated the arguments, then calls
 * kiln_<name>. Each layer expands its own header's list, so no layer includes a higher one. */
#ifndef KILN_API_CALL_SITE_H
#define KILN_API_CALL_SITE_H

#include "core/core-impl.h"

/* The static assertion keeps a list entry from drifting from its prototype: a parameter
 * declared int in the list but int64_t in the prototype would otherwise convert silently. */
#define KILN__AT_DEFINE(ret, name, params, args)                                            \
    _Static_assert(__builtin_types_compatible_p(__typeof__(kiln_##name), ret params),       \
                   "the call-site list entry of kiln_" #name " differs from its prototype"); \
    ret kiln__##name##_at KILN__AT_PARAMS params {                                          \
        kiln__site_set_op(kiln__file, kiln__line, "kiln_" #name);                         \
        return kiln_##name args;                                                            \
    }
#define KILN__AT_DEFINE0(ret, name)                                                          \
    _Static_assert(__builtin_types_compatible_p(__typeof__(kiln_##name), ret(void)),        \
                   "the call-site list entry of kiln_" #name " differs from its prototype"); \
    ret kiln__##name##_at(const char *kiln__file, int kiln__line) {                         \
        kiln__site_set_op(kiln__file, kiln__line, "kiln_" #name);                         \
        return kiln_##name();                                                               \
    }

/* The wrapper of a free function (void: not an entry of the lists), recording where the object
 * was freed (core/object.c names it when the object is used again). */
#define KILN__FREE_AT_DEFINE(type, name)                                              \
    void kiln__##name##_at(type *obj, const char *kiln__file, int kiln__line) {       \
        kiln__site_set_op(kiln__file, kiln__line, "kiln_" #name);                     \
        kiln_##name(obj);                                                             \
    }

#endif
