/* kiln io: tensors to and from safetensors files outside checkpoints (checkpoints of a module
 * and its optimizer: kiln/optim.h, which includes this header). The files are the format of
 * Hugging Face's safetensors, read by numpy, PyTorch (safetensors.torch.load_file) and kiln alike.
 *
 *   kiln_tensors_save("xy.safetensors", 2, (const char *[]){"x", "y"}, (kiln_tensor[]){x, y});
 *   kiln_tensor y2 = kiln_load_tensor("xy.safetensors", "y", KILN_CPU);  // numpy: load_file(...)["y"]
 */
#ifndef KILN_IO_H
#define KILN_IO_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Saves n tensors (not consumed; any layout, waited for) under their names (unique, 1 to 127
 * bytes) to a safetensors file, as a checkpoint is saved (a temporary file renamed over path):
 * e.g. the embeddings of a corpus for numpy or PyTorch's safetensors.load_file. Statuses:
 * KILN_ERR_NULL, KILN_ERR_INVALID_ARGUMENT (a bad, empty or repeated name), a tensor's own
 * error, KILN_ERR_IO. */
KILN_API kiln_status kiln_tensors_save(const char *path, int n, const char *const *names, const kiln_tensor *tensors);
/* torch.save / torch.load of one tensor, in the same format: kiln_save_tensor writes t (not
 * consumed; any layout, waited for) under the name "tensor", atomically (a failed save leaves
 * any earlier file at path as it was). kiln_load_tensor reads the tensor called name, or with
 * name NULL the file's only tensor (a file of any safetensors writer), into a new dense tensor
 * on dev. The whole file is checked first: a damaged, truncated or hostile file gives a
 * poisoned tensor (KILN_ERR_IO cannot read, KILN_ERR_CORRUPT malformed or damaged,
 * KILN_ERR_UNSUPPORTED a dtype kiln lacks or over 8 dims, KILN_ERR_INVALID_ARGUMENT no such
 * name or several tensors and no name), naming the call and its file:line.
 *
 *   kiln_save_tensor("w.safetensors", w);
 *   kiln_tensor w2 = kiln_load_tensor("w.safetensors", NULL, KILN_CPU);
 */
#define KILN_SAVED_TENSOR_NAME "tensor"
KILN_API kiln_status kiln_save_tensor(const char *path, kiln_tensor t);
KILN_API kiln_tensor kiln_load_tensor(const char *path, const char *name, kiln_device dev);

/* ---- call sites ------------------------------------------------------------------------- */
/* The calls that record the caller's file:line, as in core.h's list; kiln/optim.h's list
 * includes this one, so optim/call_site.c defines their wrappers. */
#define KILN_IO_API(X) \
    X(kiln_status, tensors_save, (const char *path, int n, const char *const *names, const kiln_tensor *tensors), (path, n, names, tensors)) \
    X(kiln_status, save_tensor, (const char *path, kiln_tensor t), (path, t)) \
    X(kiln_tensor, load_tensor, (const char *path, const char *name, kiln_device dev), (path, name, dev))
KILN_IO_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_tensors_save(...) KILN__AT(tensors_save, __VA_ARGS__)
#define kiln_save_tensor(...) KILN__AT(save_tensor, __VA_ARGS__)
#define kiln_load_tensor(...) KILN__AT(load_tensor, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif

#endif
