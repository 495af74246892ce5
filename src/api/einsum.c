/* torch.einsum, lowered to differentiable public ops: the equation is parsed and checked
 * against every operand first (letters, counts, sizes, dtypes, devices); then each operand's
 * repeated letters become diagonals (a product with an identity mask, summed), letters no
 * later operand or the output needs are summed out, and operands are contracted left to
 * right, each pair as one batched matmul: A permuted to [batch, left, contracted] and B to
 * [batch, contracted, right], both reshaped to 3-d. A last permute gives the output order.
 * Ellipsis dims get letters of their own (unused by the equation) and broadcast. */
#include <string.h>

#include "kiln/tensor.h"
#include "autodiff/autodiff-impl.h"

#define MAX_OPERANDS 16
#define MAX_LETTERS 52

typedef struct {
    int n;
    char s[KILN_MAX_DIMS]; /* a letter per dim */
    int64_t size[KILN_MAX_DIMS];
} subs;

static int letter_index(char ch) {
    if (ch >= 'a' && ch <= 'z') return ch - 'a';
    if (ch >= 'A' && ch <= 'Z') return 26 + ch - 'A';
    return -1;
}

static uint64_t bit(char ch) { return 1ull << letter_index(ch); }

static uint64_t letters(const subs *s) {
    uint64_t m = 0;
    for (int i = 0; i < s->n; i++) m |= bit(s->s[i]);
    return m;
}

/* One term's letters (spaces skipped) up to a char of `stop` or the end; *ell_at is where its
 * "..." stands among them (-1: none). */
static const char *parse_term(kiln__opctx *c, const char *p, const char *stop, subs *out, int *ell_at, const char *what) {
    out->n = 0;
    *ell_at = -1;
    for (; *p && !strchr(stop, *p); p++) {
        if (*p == ' ') continue;
        if (*p == '.') {
            if (p[1] != '.' || p[2] != '.')
                return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "a '.' in %s that is not part of '...'", what), NULL;
            if (*ell_at >= 0) return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "%s has two ellipses", what), NULL;
            *ell_at = out->n;
            p += 2;
            continue;
        }
        if (letter_index(*p) < 0)
            return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "'%c' in %s: subscripts are letters a-z, A-Z", *p, what), NULL;
        if (out->n == KILN_MAX_DIMS)
            return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "%s has more than %d subscripts", what, KILN_MAX_DIMS), NULL;
        out->s[out->n++] = *p;
    }
    return p;
}

/* s with the letters ell[0..e) inserted at position at. */
static bool insert_ellipsis(kiln__opctx *c, subs *s, int at, const char *ell, int e, const char *what) {
    if (s->n + e > KILN_MAX_DIMS)
        return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "%s would have %d dims (at most %d)", what, s->n + e, KILN_MAX_DIMS), false;
    memmove(s->s + at + e, s->s + at, (size_t)(s->n - at));
    memcpy(s->s + at, ell, (size_t)e);
    s->n += e;
    return true;
}

/* Parses equation for n operands x[], filling in[] and out with letters and the sizes the
 * operands broadcast to (the ellipsis dims broadcast as PyTorch's: right-aligned, size 1
 * against any); *expand[i] tells whether operand i must be expanded to them. The ellipsis dims
 * get letters the equation does not use. False + c's error. */
static bool parse(kiln__opctx *c, const char *eq, int n, kiln__tensor *const *x, subs *in, subs *out, bool *expand) {
    int ell_at[MAX_OPERANDS], out_ell = -1;
    bool has_out = false;
    const char *p = eq;
    uint64_t used = 0;
    for (int i = 0; i < n; i++) {
        char what[32];
        snprintf(what, sizeof what, "operand %d", i);
        if (!(p = parse_term(c, p, ",-", &in[i], &ell_at[i], what))) return false;
        if (i < n - 1 && *p != ',')
            return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "'%s' has %d operand terms, %d tensors were given", eq, i + 1, n), false;
        if (i < n - 1) p++;
        used |= letters(&in[i]);
    }
    if (*p == ',') return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "'%s' has more operand terms than the %d tensors", eq, n), false;
    if (*p == '-') {
        if (p[1] != '>') return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "'-' not followed by '>' in '%s'", eq), false;
        if (!(p = parse_term(c, p + 2, ",-", out, &out_ell, "the output"))) return false;
        if (*p) return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "'%c' after the output in '%s'", *p, eq), false;
        has_out = true;
        used |= letters(out);
    }
    /* the ellipsis dims: e[i] of operand i, right-aligned against the most, E */
    int e[MAX_OPERANDS], most = 0;
    for (int i = 0; i < n; i++) {
        e[i] = x[i]->ndim - in[i].n;
        if (e[i] < 0 || (e[i] > 0 && ell_at[i] < 0))
            return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "operand %d has %d subscripts for a %d-d tensor", i, in[i].n,
                              x[i]->ndim), false;
        most = e[i] > most ? e[i] : most;
    }
    char ell[KILN_MAX_DIMS];
    for (int k = 0, got = 0; got < most; k++) {
        if (k == MAX_LETTERS) return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "too many subscripts for the ellipsis"), false;
        if (!(used & (1ull << k))) ell[got++] = (char)(k < 26 ? 'a' + k : 'A' + k - 26);
    }
    uint64_t ell_bits = 0;
    for (int k = 0; k < most; k++) ell_bits |= bit(ell[k]);
    int64_t size[MAX_LETTERS];
    int count[MAX_LETTERS] = {0};
    for (int i = 0; i < n; i++) {
        if (ell_at[i] >= 0) insert_ellipsis(c, &in[i], ell_at[i], ell + most - e[i], e[i], "an operand");
        for (int d = 0; d < in[i].n; d++) {
            int k = letter_index(in[i].s[d]);
            int64_t got = x[i]->shape[d];
            bool broadcast = (ell_bits & bit(in[i].s[d])) != 0;
            if (count[k] && size[k] != got && !(broadcast && (got == 1 || size[k] == 1))) {
                if (broadcast)
                    return kiln__fail(c, KILN_ERR_SHAPE, "the ellipsis dims of the operands do not broadcast (%lld against %lld)",
                                      (long long)size[k], (long long)got), false;
                return kiln__fail(c, KILN_ERR_SHAPE, "subscript '%c' has sizes %lld and %lld", in[i].s[d], (long long)size[k],
                                  (long long)got), false;
            }
            if (!count[k] || size[k] == 1) size[k] = got;
            count[k]++;
        }
    }
    for (int i = 0; i < n; i++) {
        expand[i] = false;
        for (int d = 0; d < in[i].n; d++) {
            in[i].size[d] = size[letter_index(in[i].s[d])];
            expand[i] = expand[i] || in[i].size[d] != x[i]->shape[d];
        }
    }
    if (has_out) {
        for (int d = 0; d < out->n; d++) {
            if (!count[letter_index(out->s[d])])
                return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "output subscript '%c' is in no operand", out->s[d]), false;
            if (memchr(out->s, out->s[d], (size_t)d))
                return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "output subscript '%c' appears twice", out->s[d]), false;
        }
        /* without "..." in the output, the ellipsis dims are summed (as PyTorch) */
        if (out_ell >= 0 && !insert_ellipsis(c, out, out_ell, ell, most, "the output")) return false;
    } else { /* implicit: the ellipsis dims, then the letters seen once in ASCII order (as PyTorch) */
        out->n = 0;
        insert_ellipsis(c, out, 0, ell, most, "the output");
        for (int pass = 0; pass < 2; pass++)
            for (int k = pass ? 0 : 26; k < (pass ? 26 : MAX_LETTERS); k++) {
                if (count[k] != 1 || (ell_bits & (1ull << k))) continue;
                if (out->n == KILN_MAX_DIMS)
                    return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "the output would have over %d dims", KILN_MAX_DIMS), false;
                out->s[out->n++] = (char)(k < 26 ? 'a' + k : 'A' + k - 26);
            }
    }
    for (int d = 0; d < out->n; d++) out->size[d] = size[letter_index(out->s[d])];
    return true;
}

/* ---- the lowering (public ops, in kiln_einsum's scope) -------------------------------------- */

static void drop_dim(subs *s, int d) {
    for (int i = d; i + 1 < s->n; i++) s->s[i] = s->s[i + 1], s->size[i] = s->size[i + 1];
    s->n--;
}

/* Repeated letters: x * I (the identity over dims p and q, broadcast) summed over q. */
static kiln_tensor diagonals(kiln_tensor h, subs *s, kiln_device dev, kiln_dtype dt) {
    for (int p = 0; p < s->n; p++)
        for (int q = p + 1; q < s->n; q++) {
            if (s->s[q] != s->s[p]) continue;
            kiln_shape m = {s->n, {0}};
            for (int d = 0; d < s->n; d++) m.dims[d] = d == p || d == q ? s->size[p] : 1;
            kiln_tensor eye = kiln_reshape(kiln_eye(dev, dt, s->size[p], s->size[p]), m);
            h = kiln_sum_dims(kiln_mul(h, eye), KILN_DIMS(q), false);
            drop_dim(s, q--);
        }
    return h;
}

/* Sums the dims whose letters are not in keep. */
static kiln_tensor sum_unneeded(kiln_tensor h, subs *s, uint64_t keep) {
    kiln_dims dims = {0, {0}};
    for (int d = s->n - 1; d >= 0; d--)
        if (!(keep & bit(s->s[d]))) dims.d[dims.n++] = d, drop_dim(s, d);
    return dims.n ? kiln_sum_dims(h, dims, false) : h;
}

/* h permuted so its letters follow `order` (the same set). */
static kiln_tensor permute_to(kiln_tensor h, subs *s, const char *order) {
    kiln_dims perm = {s->n, {0}};
    subs next = *s;
    bool same = true;
    for (int i = 0; i < s->n; i++) {
        perm.d[i] = (int32_t)((const char *)memchr(s->s, order[i], (size_t)s->n) - s->s);
        next.s[i] = order[i], next.size[i] = s->size[perm.d[i]];
        same = same && perm.d[i] == i;
    }
    *s = next;
    return same ? h : kiln_permute(h, perm);
}

static int64_t product(const subs *s, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= s->size[i];
    return p;
}

/* A poisoned result for a lowering that cannot be expressed (consumes a and b). */
static kiln_tensor too_many_dims(kiln_tensor a, kiln_tensor b, int dims) {
    kiln_release(a);
    kiln_release(b);
    KILN__OP_BEGIN("kiln_einsum");
    return kiln__result(&c, kiln__fail(&c, KILN_ERR_UNSUPPORTED, "an intermediate result would have %d dims (at most %d)",
                                       dims, KILN_MAX_DIMS));
}

/* a (letters *sa) with b (*sb), keeping the letters in keep: batch letters (in both, kept),
 * contracted (in both, not kept), left (a only) and right (b only). One batched matmul
 * [batch, left, contracted] @ [batch, contracted, right], or a broadcast product when nothing
 * is contracted. *sa becomes the result's letters: batch, left, right. */
static kiln_tensor contract(kiln_tensor a, subs *sa, kiln_tensor b, subs *sb, uint64_t keep) {
    a = sum_unneeded(a, sa, keep | letters(sb));
    b = sum_unneeded(b, sb, keep | letters(sa));
    uint64_t in_b = letters(sb), in_a = letters(sa);
    char batch[KILN_MAX_DIMS], left[KILN_MAX_DIMS], con[KILN_MAX_DIMS], right[KILN_MAX_DIMS];
    int nb = 0, nl = 0, nk = 0, nr = 0;
    for (int i = 0; i < sa->n; i++) {
        char ch = sa->s[i];
        if (!(in_b & bit(ch))) left[nl++] = ch;
        else if (keep & bit(ch)) batch[nb++] = ch;
        else con[nk++] = ch;
    }
    for (int i = 0; i < sb->n; i++)
        if (!(in_a & bit(sb->s[i]))) right[nr++] = sb->s[i];
    if (nb + nl + nr > KILN_MAX_DIMS) {
        sa->n = -1; /* tells lower to stop */
        return too_many_dims(a, b, nb + nl + nr);
    }
    char oa[KILN_MAX_DIMS], ob[KILN_MAX_DIMS];
    memcpy(oa, batch, (size_t)nb), memcpy(oa + nb, left, (size_t)nl), memcpy(oa + nb + nl, con, (size_t)nk);
    memcpy(ob, batch, (size_t)nb), memcpy(ob + nb, con, (size_t)nk), memcpy(ob + nb + nk, right, (size_t)nr);
    a = permute_to(a, sa, oa);
    b = permute_to(b, sb, ob);
    subs r = {nb + nl + nr, {0}, {0}};
    for (int i = 0; i < nb + nl; i++) r.s[i] = sa->s[i], r.size[i] = sa->size[i];
    for (int i = 0; i < nr; i++) r.s[nb + nl + i] = sb->s[nb + nk + i], r.size[nb + nl + i] = sb->size[nb + nk + i];
    kiln_shape shape = {r.n, {0}};
    for (int i = 0; i < r.n; i++) shape.dims[i] = r.size[i];
    kiln_tensor p;
    if (nk == 0) { /* a [batch, left, 1...] * b [batch, 1..., right] */
        kiln_shape ea = shape, eb = shape;
        for (int i = nb + nl; i < r.n; i++) ea.dims[i] = 1;
        for (int i = nb; i < nb + nl; i++) eb.dims[i] = 1;
        p = kiln_mul(kiln_reshape(a, ea), kiln_reshape(b, eb));
    } else {
        int64_t bs = product(sa, 0, nb), ls = product(sa, nb, nb + nl), ks = product(sa, nb + nl, sa->n);
        int64_t rs = product(sb, nb + nk, sb->n);
        p = kiln_matmul(kiln_reshape(a, KILN_SHAPE(bs, ls, ks)), kiln_reshape(b, KILN_SHAPE(bs, ks, rs)));
        p = kiln_reshape(p, shape);
    }
    *sa = r;
    return p;
}

static kiln_tensor lower(int n, kiln_tensor *h, subs *in, const subs *out, kiln_device dev, kiln_dtype dt) {
    for (int i = 0; i < n; i++) h[i] = diagonals(h[i], &in[i], dev, dt);
    uint64_t want = letters(out);
    kiln_tensor cur = h[0];
    subs cs = in[0];
    for (int i = 1; i < n; i++) {
        uint64_t keep = want; /* what the output and the operands after i need */
        for (int j = i + 1; j < n; j++) keep |= letters(&in[j]);
        cur = contract(cur, &cs, h[i], &in[i], keep);
        if (cs.n < 0) {
            for (int j = i + 1; j < n; j++) kiln_release(h[j]);
            return cur;
        }
    }
    cur = sum_unneeded(cur, &cs, want);
    return permute_to(cur, &cs, out->s);
}

kiln_tensor kiln_einsum(const char *equation, int n, const kiln_tensor *ts) {
    KILN__OP_BEGIN("kiln_einsum");
    kiln__tensor *x[MAX_OPERANDS] = {0};
    if (!ts || n < 1 || n > MAX_OPERANDS) {
        for (int i = 0; ts && i < n && i < MAX_OPERANDS; i++) kiln_release(ts[i]);
        if (!ts) return kiln__result(&c, kiln__fail(&c, KILN_ERR_NULL, "ts is NULL"));
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "%d operands: 1 to %d", n, MAX_OPERANDS));
    }
    for (int i = 0; i < n; i++) x[i] = kiln__arg(&c, ts[i]);
    subs in[MAX_OPERANDS], out;
    bool expand[MAX_OPERANDS];
    for (int i = 0; i < n && !c.err; i++) {
        if (!kiln__ok(&c, x[i])) break;
        if (x[i]->dtype != x[0]->dtype)
            kiln__fail(&c, KILN_ERR_DTYPE, "operand %d is %s, operand 0 %s", i, kiln_dtype_name(x[i]->dtype),
                       kiln_dtype_name(x[0]->dtype));
        else kiln__same_device(&c, x[0], x[i]);
    }
    if (!c.err && !equation) kiln__fail(&c, KILN_ERR_NULL, "equation is NULL");
    if (!c.err) parse(&c, equation, n, x, in, &out, expand);
    if (c.err) {
        for (int i = 0; i < n; i++) kiln__tensor_release(x[i]);
        return kiln__result(&c, NULL);
    }
    kiln_device dev = x[0]->device;
    kiln_dtype dt = x[0]->dtype;
    kiln_tensor h[MAX_OPERANDS];
    for (int i = 0; i < n; i++) {
        kiln__opctx ci = {.name = c.name, .err = NULL};
        h[i] = kiln__result(&ci, x[i]);
    }
    const char *outer = kiln__op_scope_enter("kiln_einsum");
    for (int i = 0; i < n; i++) { /* size-1 ellipsis dims broadcast */
        if (!expand[i]) continue;
        kiln_shape full = {in[i].n, {0}};
        for (int d = 0; d < in[i].n; d++) full.dims[d] = in[i].size[d];
        h[i] = kiln_expand(h[i], full);
    }
    kiln_tensor r = lower(n, h, in, &out, dev, dt);
    kiln__op_scope_leave(outer);
    return r;
}
