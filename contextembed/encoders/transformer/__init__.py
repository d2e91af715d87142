"""BERT-style transformer encoders: any local Hugging Face encoder that ``AutoModel`` loads.

Layers are the embedding output followed by every hidden layer (``hidden_states`` of
``output_hidden_states=True``): 13 for BERT-base, 7 for MiniLM-L6.

The package holds what the transformer family alone uses: the encoder (``_encoder``), the choice of
its runtime (``_runtime_choice``), the one planner of every path's model inputs and batches
(``_plan``: words, pieces, texts, pairs, document context, piece means), each path's loop over
chunks (``_paths``), what each takes from a batch (``_jobs``; piece means: ``_means``), their pooling
settings (``_pooled``) and chunking (``_chunking``), the flat forward (``_unpadded``), the layers
not run (``_pruning``), the OpenVINO engine (``_engine``) and how its precision is chosen
(``_engine_choice``), copies to the host (``_host_copies``) and
sentence-transformers' pooling configuration (``_sentence_config``).
"""



def __getattr__(name: str):
    """``TransformerEncoder`` is imported when first asked for: ``import contextembed`` reaches this
    package for the runtime choice alone, and pays for the encoder's modules only when one is
    loaded."""
    if name == "TransformerEncoder":
        from ._encoder import TransformerEncoder

        return TransformerEncoder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TransformerEncoder"]
