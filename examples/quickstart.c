/* The README's usage example, compiled against the installed library by scripts/test.sh. */
#include <kiln.h>
#include <stdio.h>

int main(void) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(128, 2048), 0);
    kiln_tensor w = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(512, 2048), 1);
    kiln_tensor h = kiln_relu(kiln_linear(kiln_ref(x), w, KILN_NONE)); /* x kept, w consumed */
    kiln_tensor p = kiln_softmax(h, -1);                               /* h consumed: in place */
    kiln_tensor s = kiln_sum(p);
    float total;
    if (kiln_into_scalar(s, &total) != KILN_OK) {                      /* the first blocking call */
        fprintf(stderr, "%s\n", kiln_last_error());
        return 1;
    }
    printf("%.1f\n", total);                                           /* 128.0 */
    kiln_release(x);
    return 0;
}
