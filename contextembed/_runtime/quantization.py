"""int8 inference for frozen encoders: per-token activation scales, per-channel weight scales.

``precision="int8"`` replaces every linear layer of a model (``nn.Linear`` and the transposed
``Conv1D`` of GPT-2-style models) by :class:`Int8Linear`. Its weights are symmetric int8 with one
scale per output channel; each input row (one token) is quantized with its own scale, then the
product runs on integer units (``torch._int_mm``: VNNI on x86 CPUs that have it) and is rescaled.

Why per token. torch's dynamic quantization uses one activation scale for the whole batch: a token
with large activations (the separator tokens of BERT-family models) coarsens every other token's
grid, which costs feature quality (mean cosine 0.970 to fp32 on MiniLM-L6, concat of the last four
layers) and makes a sentence's vectors depend on its batch neighbours. With a scale per token the
cosine is 0.998 and a token's result depends only on its own row, like fp32. Embeddings, layer
norms, attention and activations stay fp32.
"""

from __future__ import annotations

import torch

from .precisions import PRECISION_NAMES

#: largest magnitude of the symmetric int8 grid
_QMAX = 127.0
#: floor of a row's largest magnitude: its scale's reciprocal stays finite (rows below it quantize to 0)
_SMALLEST = 1e-30


def _symmetric_scales(values: torch.Tensor, dim: int) -> torch.Tensor:
    """Largest magnitude along ``dim`` over 127, kept positive (all-zero rows get a tiny one).

    A row with a NaN or an infinity gets a non-finite scale, which makes its output non-finite too
    instead of quietly quantizing garbage.
    """
    largest = torch.maximum(values.amax(dim, keepdim=True), values.amin(dim, keepdim=True).neg_())
    return largest.clamp_min_(_SMALLEST).div_(_QMAX)


def quantize_rows(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(int8 rows, float scale per row)`` such that ``int8 * scale`` approximates each row."""
    scales = _symmetric_scales(values, dim=1)
    # |value / scale| <= 127 by construction of the scale (up to one ulp, which rounding absorbs)
    quantized = torch.mul(values, scales.reciprocal()).round_().to(torch.int8)
    return quantized, scales


class Int8Linear(torch.nn.Module):
    """``y = x W^T + b`` with int8 ``W`` (a scale per output channel) and int8 ``x`` (a scale per row).

    Parameters
    ----------
    weight : Tensor (out_features, in_features)
        The float weight to quantize.
    bias : Tensor (out_features,) or None
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, source: torch.Tensor | None = None) -> None:
        super().__init__()
        #: the float weight as the model holds it (``Conv1D``: transposed), so that an encoder
        #: running in int8 still saves the model's own weights (not part of this module's state)
        self.source_weight = (weight if source is None else source).detach()
        weight = weight.detach().float()
        scales = _symmetric_scales(weight, dim=1)  # (out, 1)
        quantized = torch.round(weight / scales).clamp_(-_QMAX, _QMAX).to(torch.int8)
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.register_buffer("weight_int8", quantized.t().contiguous())  # (in, out), as _int_mm takes it
        self.register_buffer("weight_scale", scales.reshape(-1))
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())

    @classmethod
    def stacked(cls, layers: list["Int8Linear"]) -> "Int8Linear":
        """One layer computing ``layers`` side by side on the same input (their outputs
        concatenated), bit for bit: the input is quantized once and multiplied once."""
        fused = cls.__new__(cls)
        torch.nn.Module.__init__(fused)
        fused.source_weight = None  # computes only: never saved
        fused.in_features, fused.out_features = layers[0].in_features, sum(layer.out_features for layer in layers)
        fused.register_buffer("weight_int8", torch.cat([layer.weight_int8 for layer in layers], dim=1))
        fused.register_buffer("weight_scale", torch.cat([layer.weight_scale for layer in layers]))
        biases = [layer.bias for layer in layers]
        fused.register_buffer("bias", None if all(b is None for b in biases) else torch.cat(
            [layer.weight_scale.new_zeros(layer.out_features) if b is None else b for layer, b in zip(layers, biases)]))
        return fused

    @classmethod
    def from_linear(cls, linear: torch.nn.Module) -> "Int8Linear":
        """From an ``nn.Linear`` (weight ``(out, in)``) or a transformers ``Conv1D`` (weight ``(in, out)``)."""
        weight = linear.weight if isinstance(linear, torch.nn.Linear) else linear.weight.t()
        return cls(weight, linear.bias, source=linear.weight)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.shape[-1] != self.in_features:
            raise ValueError(f"Int8Linear expects inputs of width {self.in_features}, got shape {tuple(inputs.shape)}")
        rows = inputs.reshape(-1, self.in_features).float()
        quantized, scales = quantize_rows(rows)
        out = torch._int_mm(quantized, self.weight_int8).float().mul_(scales)
        out = torch.mul(out, self.weight_scale, out=out) if self.bias is None else torch.addcmul(
            self.bias, out, self.weight_scale, out=out)
        return out.reshape(*inputs.shape[:-1], self.out_features).to(inputs.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _is_linear(module: torch.nn.Module) -> bool:
    if isinstance(module, torch.nn.Linear):
        return True
    # transformers' Conv1D (GPT-2, GPT-Neo-style): a linear layer with a transposed weight
    return type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None and module.weight.dim() == 2


def quantize_int8(model: torch.nn.Module, model_type: str = "") -> torch.nn.Module:
    """Replace every linear layer of ``model`` (in place) by an :class:`Int8Linear`; returns ``model``.

    Raises
    ------
    ValueError
        If the model has no linear layer (naming its type and the precisions that do apply).
    """
    targets = [(parent, name, child) for parent in model.modules()
               for name, child in parent.named_children() if _is_linear(child)]
    if not targets:
        raise ValueError(
            f"precision='int8' quantizes linear layers and the {model_type or type(model).__name__} model has none; "
            f"use one of {', '.join(repr(p) for p in PRECISION_NAMES if p != 'int8')} for it"
        )
    for parent, name, child in targets:
        setattr(parent, name, Int8Linear.from_linear(child).to(child.weight.device))
    return model


def original_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` with each :class:`Int8Linear` given back as the layer it replaced
    (``weight`` and ``bias`` as the model had them), so a quantized model saves its own weights."""
    state = dict(model.state_dict())
    for name, module in model.named_modules():
        if isinstance(module, Int8Linear):
            prefix = f"{name}." if name else ""
            for key in ("weight_int8", "weight_scale"):
                del state[prefix + key]
            state[prefix + "weight"] = module.source_weight
    return state


#: ``precision="auto"`` keeps int8 only if every layer's features keep this mean cosine to fp32
INT8_MIN_COSINE = 0.99
#: what that check encodes: short and long, cased, digits and punctuation
PROBE_TEXTS = (
    "EU rejects German call to boycott British lamb .",
    "Peter Blackburn reported from BRUSSELS on 1996-08-22 that the European Commission disagreed.",
    "The quick brown fox jumps over the lazy dog, and contextual embeddings turn pretrained encoders "
    "into features for classifiers, taggers and sentence-pair models.",
)


@torch.inference_mode()
def int8_fidelity(reference: torch.nn.Module, quantized: torch.nn.Module, tokenizer, max_length: int = 64) -> float:
    """The lowest, over hidden states (embeddings included), of the mean cosine between the pieces'
    vectors of ``quantized`` and of the fp32 ``reference`` on :data:`PROBE_TEXTS` (each text alone,
    cut to ``max_length`` pieces: nothing padded)."""
    lowest = 1.0
    for text in PROBE_TEXTS:
        encoded = tokenizer(text, return_tensors="pt", truncation=True, max_length=max_length)
        # single texts: token types are all 0, the models' default
        inputs = {k: encoded[k] for k in ("input_ids", "attention_mask")}
        expected = reference(**inputs, output_hidden_states=True).hidden_states
        actual = quantized(**inputs, output_hidden_states=True).hidden_states
        for a, b in zip(expected, actual):
            cosine = torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1, eps=1e-12).mean()
            lowest = min(lowest, float(cosine))
    return lowest
