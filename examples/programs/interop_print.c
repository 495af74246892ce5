/* Interop and printing: a tensor made from a C array and printed as PyTorch prints it, its text
 * taken as a string, its values read in place through a data view (as tensor.numpy() does),
 * handed out and taken back through DLPack (the struct NumPy, PyTorch and JAX exchange) without
 * a copy, and saved to a safetensors file that numpy or PyTorch read, then loaded back.
 * interop_print.py beside it is the same program in PyTorch.  Usage: interop_print [PATH] */
#include <dlpack/dlpack.h>
#include <kiln.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "interop_print.safetensors";
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3), (float[]){1, -2.5f, 3, 4, 0.125f, 6}), y = kiln_add_scalar(kiln_mul_scalar(x, 2), 1);
    kiln_print(y);
    kiln_tensor r = kiln_arange(KILN_CPU, KILN_I64, 0, 5, 1);
    kiln_print(r); /* printing does not consume its tensor */
    char text[256];
    kiln_to_string(y, text, sizeof text, NULL);
    printf("as a string: %zu characters\n", strlen(text));
    kiln_data_view v;
    kiln_data_view_get(y, &v);
    struct DLManagedTensor *m;
    if (kiln_to_dlpack(kiln_ref(y), &m) != KILN_OK) return fprintf(stderr, "%s\n", kiln_last_error()), 1;
    printf("y[1][2] read in place: %g\n", ((const float *)v.data)[5]);
    printf("DLPack: %d dims, the same memory: %s\n", m->dl_tensor.ndim, m->dl_tensor.data == v.data ? "yes" : "no");
    kiln_data_view_release(&v);
    kiln_tensor z = kiln_from_dlpack(m);
    kiln_save_tensor(path, y);
    kiln_tensor loaded = kiln_load_tensor(path, NULL, KILN_CPU);
    bool same;
    if (kiln_into_data(kiln_all(kiln_eq(loaded, z)), &same, sizeof same) != KILN_OK)
        return fprintf(stderr, "%s\n", kiln_last_error()), 1;
    printf("saved to %s and loaded: equal: %s\n", path, same ? "yes" : "no");
    kiln_release(y);
    kiln_release(r);
    return !same;
}
