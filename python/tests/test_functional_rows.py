"""kiln.nn.functional's norms and losses, made from the rows of the C row-op table
(src/ir/row_table.h): every row is a function (softmax and log_softmax Tensor methods too),
each called as torch.nn.functional's function of its name against PyTorch, with torch's
keywords (reduction, beta, delta, log_target, eps, weight, ignore_index, label_smoothing), and
bad arguments raise."""
import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from conftest import needs_torch, optable_json


def row_table():
    return optable_json()["row_ops"]


def test_every_row_of_the_c_row_table_is_a_python_function():
    rows = row_table()
    assert len(rows) >= 14
    x = kiln.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    for r in rows:
        if r["dims"] == "DIM":  # softmax, log_softmax: t.name(dim) and kiln.name(t, dim)
            assert callable(getattr(x, r["py"])) and callable(getattr(kiln, r["py"])), r["name"]
        else:
            assert callable(getattr(F, r["py"])), r["name"]
            assert r["py"] in kiln._C._row_functions(), r["name"]


def rand(*shape, seed=0, lo=-2.0, hi=2.0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


def close(got, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=rtol, atol=atol)


@needs_torch
def test_norms_against_torch():
    import torch
    import torch.nn.functional as TF
    x, w, b = rand(2, 4, 5), rand(5, seed=1), rand(5, seed=2)
    tx, tw, tb = torch.tensor(x), torch.tensor(w), torch.tensor(b)
    close(F.layer_norm(kiln.tensor(x), (5,), kiln.tensor(w), kiln.tensor(b), 1e-5), TF.layer_norm(tx, (5,), tw, tb, 1e-5))
    close(F.layer_norm(kiln.tensor(x), [5]), TF.layer_norm(tx, [5]))
    close(F.rms_norm(kiln.tensor(x), (5,), weight=kiln.tensor(w)), TF.rms_norm(tx, (5,), weight=tw))
    close(F.rms_norm(kiln.tensor(x), (4, 5), eps=1e-3), TF.rms_norm(tx, (4, 5), eps=1e-3))
    gw, gb = rand(4, seed=3), rand(4, seed=4)
    close(F.group_norm(kiln.tensor(x), 2, kiln.tensor(gw), kiln.tensor(gb)),
          TF.group_norm(tx, 2, torch.tensor(gw), torch.tensor(gb)))
    close(F.group_norm(kiln.tensor(x), num_groups=4, eps=1e-3), TF.group_norm(tx, num_groups=4, eps=1e-3))


@needs_torch
@pytest.mark.filterwarnings("ignore:reduction")  # torch's note on kl_div's 'mean'
def test_losses_against_torch_with_every_reduction():
    import torch
    import torch.nn.functional as TF
    a, b = rand(3, 4), rand(3, 4, seed=1)
    p, q = rand(3, 4, seed=2, lo=0.05, hi=0.95), rand(3, 4, seed=3, lo=0.05, hi=0.95)
    cases = [("mse_loss", a, b, {}), ("l1_loss", a, b, {}), ("smooth_l1_loss", a, b, {"beta": 0.5}),
             ("huber_loss", a, b, {"delta": 0.75}), ("binary_cross_entropy_with_logits", a, q, {}),
             ("binary_cross_entropy", p, q, {}), ("kl_div", np.log(p), q, {}),
             ("kl_div", np.log(p), np.log(q), {"log_target": True})]
    for name, u, v, kw in cases:
        for reduction in ("mean", "sum", "none"):
            got = getattr(F, name)(kiln.tensor(u), kiln.tensor(v), reduction=reduction, **kw)
            want = getattr(TF, name)(torch.tensor(u), torch.tensor(v), reduction=reduction, **kw)
            close(got, want, rtol=1e-5, atol=1e-6)
        if "log_target" not in kw:  # the defaults are torch's (the mean; beta, delta 1; log_target False)
            close(getattr(F, name)(kiln.tensor(u), kiln.tensor(v)), getattr(TF, name)(torch.tensor(u), torch.tensor(v)))
    close(F.kl_div(kiln.tensor(np.log(p)), kiln.tensor(q), reduction="batchmean"),
          TF.kl_div(torch.tensor(np.log(p)), torch.tensor(q), reduction="batchmean"))


@needs_torch
def test_class_losses_against_torch():
    import torch
    import torch.nn.functional as TF
    logits, target = rand(5, 3), np.array([0, 2, 1, 2, 0])
    weight = rand(3, seed=5, lo=0.5, hi=1.5)
    tl, tt, tw = torch.tensor(logits), torch.tensor(target), torch.tensor(weight)
    kt = kiln.tensor(target)
    close(F.cross_entropy(kiln.tensor(logits), kt), TF.cross_entropy(tl, tt))
    close(F.cross_entropy(kiln.tensor(logits), kt, label_smoothing=0.1), TF.cross_entropy(tl, tt, label_smoothing=0.1))
    close(F.cross_entropy(kiln.tensor(logits), kt, kiln.tensor(weight), reduction="sum"),
          TF.cross_entropy(tl, tt, tw, reduction="sum"))
    close(F.cross_entropy(kiln.tensor(logits), kt, ignore_index=2, reduction="none"),
          TF.cross_entropy(tl, tt, ignore_index=2, reduction="none"))
    lp = TF.log_softmax(tl, 1)
    close(F.nll_loss(kiln.tensor(lp.numpy()), kt), TF.nll_loss(lp, tt))
    close(F.nll_loss(kiln.tensor(lp.numpy()), kt, weight=kiln.tensor(weight), reduction="none"),
          TF.nll_loss(lp, tt, weight=tw, reduction="none"))


def test_row_functions_refuse_bad_arguments():
    a, b = kiln.tensor(rand(2, 3)), kiln.tensor(rand(2, 3, seed=1))
    with pytest.raises(ValueError, match="reduction"):
        F.mse_loss(a, b, reduction="average")
    with pytest.raises(TypeError, match="positional"):
        F.huber_loss(a, b, "mean")  # torch's third positional is not delta: keywords only
    with pytest.raises(TypeError, match="unexpected keyword"):
        F.l1_loss(a, b, size_average=True)
    with pytest.raises(TypeError, match="kiln.Tensor"):
        F.mse_loss(a, [1.0, 2.0])
    with pytest.raises(TypeError, match="normalized_shape"):
        F.layer_norm(a)
    with pytest.raises(kiln.InvalidArgumentError, match="kiln_group_norm"):
        F.group_norm(kiln.tensor(rand(2, 3, 4)), 2).numpy()  # 3 channels in 2 groups
