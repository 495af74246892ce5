/* kiln and DLPack (the tensor exchange struct NumPy, PyTorch and JAX share): a CPU tensor
 * handed out without a copy, and a DLPack tensor taken in without one when it is dense.
 * Declared over `struct DLManagedTensor` (DLPack 0.6's), so including this header does not
 * need dlpack.h; a program that fills or reads the struct includes <dlpack/dlpack.h>
 * (Debian's libdlpack-dev).
 *
 *   struct DLManagedTensor *m = NULL;
 *   kiln_tensor x = kiln_arange(KILN_CPU, KILN_F32, 0, 6, 1);
 *   if (kiln_to_dlpack(kiln_ref(x), &m) == KILN_OK) {   // waits for x's data
 *       kiln_tensor y = kiln_from_dlpack(m);             // the same memory: no copy
 *       kiln_release(y);                                 // calls m's deleter once unused
 *   }
 *   kiln_release(x);
 */
#ifndef KILN_DLPACK_H
#define KILN_DLPACK_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

struct DLManagedTensor;

/* Waits for t's data (a read) and describes it as a DLPack tensor in *out: kiln's buffer
 * itself (shape, strides in elements, kDLCPU), kept alive by a handle the struct holds until
 * its deleter is called; kiln never writes that buffer in place meanwhile (the handle is a
 * second owner). Consumes t. bool is exported as DLPack 0.6's uint8. KILN_ERR_DEVICE for a
 * tensor that is not on the CPU (move it with kiln_to_device first), KILN_ERR_NULL when out
 * is NULL, t's error when it carries one; *out is then NULL. */
KILN_API kiln_status kiln_to_dlpack(kiln_tensor t, struct DLManagedTensor **out);
/* A tensor over m's memory (kDLCPU, lanes 1, a dtype kiln has, at most 8 dims): without a
 * copy when m is dense row-major (kiln then never writes it and calls m->deleter(m) once no
 * tensor or queued op uses it, as kiln_from_borrowed), else as a dense copy, after which the
 * deleter is called at once. On failure (a poisoned result naming the problem) m is still the
 * caller's and its deleter is not called. */
KILN_API kiln_tensor kiln_from_dlpack(struct DLManagedTensor *m);

/* ---- call sites (as in core.h's list) ---- */
#define KILN_DLPACK_API(X)                                                                   \
    X(kiln_status, to_dlpack, (kiln_tensor t, struct DLManagedTensor **out), (t, out))       \
    X(kiln_tensor, from_dlpack, (struct DLManagedTensor *m), (m))
KILN_DLPACK_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header
#define kiln_to_dlpack(...) KILN__AT(to_dlpack, __VA_ARGS__)
#define kiln_from_dlpack(...) KILN__AT(from_dlpack, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif
