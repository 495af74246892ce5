/* Public masked fills (masked_fill, tril, triu): take the handles, then autodiff's decorated op when x is tracked (the
 * mask never is: it has no gradient), the op layer's otherwise. */
#include "kiln/tensor.h"
#include "autodiff/autodiff-impl.h"

kiln_tensor kiln_masked_fill(kiln_tensor x, kiln_tensor mask, double value) {
    KILN__OP_BEGIN("kiln_masked_fill");
    kiln__tensor *tx = kiln__arg(&c, x); /* in order: the first stale handle is the one named */
    kiln__tensor *tm = kiln__arg(&c, mask);
    if (KILN__UNLIKELY(kiln__ad_active(1, &tx))) return kiln__result(&c, kiln__ad_masked_fill(&c, tx, tm, value));
    return kiln__result(&c, kiln__t_masked_fill(&c, tx, tm, value));
}

static kiln_tensor tri(const char *name, kiln_tensor x, int64_t diagonal, bool upper) {
    KILN__OP_BEGIN(name);
    kiln__tensor *tx = kiln__arg(&c, x);
    if (KILN__UNLIKELY(kiln__ad_active(1, &tx))) return kiln__result(&c, kiln__ad_tri(&c, tx, diagonal, upper));
    return kiln__result(&c, kiln__t_tri(&c, tx, diagonal, upper));
}

kiln_tensor kiln_tril(kiln_tensor x, int64_t diagonal) { return tri("kiln_tril", x, diagonal, false); }

kiln_tensor kiln_triu(kiln_tensor x, int64_t diagonal) { return tri("kiln_triu", x, diagonal, true); }
