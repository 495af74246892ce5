"""kiln.nn.utils: gradient clipping."""
import kiln


def clip_grad_norm_(parameters, max_norm):
    """Scales every .grad so that their joint L2 norm is at most max_norm; returns the norm
    before clipping (a 0-d tensor; reading it waits)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return kiln.tensor(0.0)
    with kiln.no_grad():
        total = sum((g * g).sum() for g in grads).sqrt()
        scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g *= scale
    return total
