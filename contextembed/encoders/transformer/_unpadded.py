"""A forward pass of BERT-family encoders that computes nothing for padding, except inside attention.

Every layer of a BERT-style encoder treats each position alone (linear layers, activation, layer
norms), except attention. So the padded positions of a length-sorted batch are wasted work, and the
padding to a multiple of 16 positions that makes bf16 and int8 batch-invariant (attention kernels
sum keys in blocks of 16) wastes a third of the work on short sentences. Here the embeddings and
every per-position operation run on the batch's flat ``(pieces, width)`` matrix; queries, keys and
values are scattered into the padded layout for attention alone (the same kernel and mask as the
stock forward) and gathered back. The results are the stock forward's, bit for bit in fp32, bf16
and int8 (tested), and ``benchmarks/padding.py`` measures the speed.

Only models whose layers have the stock BERT structure take this path (:func:`supports`): BERT
(MiniLM), RoBERTa, XLM-R, CamemBERT and ELECTRA with absolute positions and SDPA attention; any
other model runs its own forward.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from ..._runtime.quantization import Int8Linear

#: model types whose layers are BertLayer's structure (query/key/value, output, intermediate)
_BERT_LAYER_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "camembert", "electra"})


def supports(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a BERT-structured encoder the flat forward reproduces exactly."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) not in _BERT_LAYER_TYPES:
        return False
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        return False
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        return False
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    layers = getattr(getattr(model, "encoder", None), "layer", None)
    if getattr(model, "embeddings", None) is None or not layers:
        return False
    return all(_has_bert_layer_structure(layer) for layer in layers)


def _has_bert_layer_structure(layer: torch.nn.Module) -> bool:
    attention = getattr(getattr(layer, "attention", None), "self", None)
    return (
        attention is not None
        and all(hasattr(attention, name) for name in ("query", "key", "value", "attention_head_size", "scaling"))
        and hasattr(layer.attention, "output")
        and hasattr(layer, "intermediate")
        and hasattr(layer, "output")
        and not hasattr(layer, "crossattention")
        and getattr(layer, "chunk_size_feed_forward", 0) == 0
    )


def forward(model: torch.nn.Module, inputs: dict[str, torch.Tensor], layer_index: tuple[int, ...]) -> list[torch.Tensor]:
    """The hidden states ``layer_index`` (0: embeddings) of ``model`` for a padded batch.

    Parameters
    ----------
    model
        A model :func:`supports` accepts.
    inputs
        ``input_ids``, ``attention_mask`` (1 at real positions) and optionally ``token_type_ids``,
        each ``(batch, seq)``.
    layer_index
        Which hidden states to return.

    Returns
    -------
    list of Tensor
        One ``(batch * seq, width)`` tensor per entry of ``layer_index``; padded rows are zeros.
    """
    mask = inputs["attention_mask"]
    batch, length = mask.shape
    # (pieces,): where each real piece sits in the flat padded layout
    real = mask.reshape(-1).nonzero().reshape(-1)
    # (batch, 1, 1, seq): the key mask of the stock forward (None where nothing is padded, as there)
    key_mask = None if bool(mask.all()) else mask.bool()[:, None, None, :]
    embedded = model.embeddings(input_ids=inputs["input_ids"], token_type_ids=inputs.get("token_type_ids"))
    if getattr(model, "embeddings_project", None) is not None:  # ELECTRA with narrower embeddings
        embedded = model.embeddings_project(embedded)
    # (pieces, width)
    states = [embedded.reshape(batch * length, -1).index_select(0, real)]
    wanted = [i % (len(model.encoder.layer) + 1) for i in layer_index]
    for layer in model.encoder.layer[: max(wanted)]:  # the layers above the last one wanted are not run
        states.append(_layer(layer, states[-1], real, key_mask, batch, length))
    return [states[i].new_zeros(batch * length, states[i].shape[-1]).index_copy_(0, real, states[i]) for i in wanted]


def _layer(layer, x: torch.Tensor, real: torch.Tensor, key_mask, batch: int, length: int) -> torch.Tensor:
    """One post-norm BERT layer on a flat ``(pieces, width)`` matrix."""
    attention = layer.attention.self
    head_size = attention.attention_head_size

    def padded(values: torch.Tensor) -> torch.Tensor:
        # (batch, heads, seq, head size)
        out = values.new_zeros(batch * length, values.shape[-1]).index_copy_(0, real, values)
        return out.view(batch, length, -1, head_size).transpose(1, 2)

    projections = (attention.query, attention.key, attention.value)
    if all(isinstance(p, Int8Linear) for p in projections):  # int8: one quantization, one product
        query, key, value = _stacked_int8(attention, projections)(x).split([p.out_features for p in projections], dim=-1)
    else:
        query, key, value = (p(x) for p in projections)
    context = F.scaled_dot_product_attention(
        padded(query), padded(key), padded(value), attn_mask=key_mask, dropout_p=0.0, scale=attention.scaling,
    )
    # (pieces, width)
    context = context.transpose(1, 2).reshape(batch * length, -1).index_select(0, real)
    x = layer.attention.output(context, x)
    return layer.output(layer.intermediate(x), x)


#: each attention module's stacked int8 query/key/value layer (kept outside the model's modules)
_STACKED: "weakref.WeakKeyDictionary[torch.nn.Module, Int8Linear]" = weakref.WeakKeyDictionary()


def _stacked_int8(attention: torch.nn.Module, projections: tuple) -> Int8Linear:
    stacked = _STACKED.get(attention)
    if stacked is None:
        stacked = _STACKED[attention] = Int8Linear.stacked(list(projections))
    return stacked
