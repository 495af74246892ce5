"""kiln.models: ready models. MiniLM: all-MiniLM-L6-v2 sentence embeddings (kiln/bert.h)."""
from .._C import SentenceEmbedder


class MiniLM:
    """MiniLM.load(model_dir).embed(["a sentence", ...]) -> NumPy float32 [n, 384], as the C
    example examples/embed.c computes them (mean pooling, L2 normalisation)."""

    def __init__(self, embedder):
        self._embedder = embedder

    @classmethod
    def load(cls, model_dir):
        return cls(SentenceEmbedder(str(model_dir)))

    def embed(self, texts):
        if isinstance(texts, str):
            texts = [texts]
        return self._embedder.embed(list(texts))
