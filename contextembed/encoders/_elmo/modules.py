"""The ELMo biLM as plain torch modules: character CNN token embedder and projected, clipped LSTMs.

The forward pass (TF conventions of the original bilm-tf, which AllenNLP's weights follow):

* token layer: character embedding (id 0 is a zero vector), valid 1-D convolutions with bias,
  max over positions, the ``char_cnn.activation``; highway layers
  ``y = c * relu(x W_t + b_t) + (1 - c) * x`` with ``c = sigmoid(x W_c + b_c)``; a projection.
* each LSTM step: ``c = clip(sigmoid(f + 1) * c_prev + sigmoid(i) * tanh(j), cell_clip)``,
  ``h = clip((sigmoid(o) * tanh(c)) W_P, proj_clip)``; ``h`` is both output and recurrent state.
* the backward LSTMs run over each sentence reversed (markers included); directions never mix;
  layers after the first add their input to their output (skip connections).

Padding never reaches a recurrence: sequences are packed (as ``torch.nn.utils.rnn`` does), so a
step only computes the rows still inside their sentence, and the backward direction starts at each
sentence's own last token. State starts at zero for every sentence. The forward and backward
LSTMs of a layer run in lockstep (one batched matmul per step for both, see :func:`run_lstms`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .characters import MAX_CHARACTERS, N_CHARACTERS, PAD_CHAR
from .options import check_options, n_filters

_ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh}


class CharCNNTokenEmbedder(nn.Module):
    """Character ids -> one context-independent vector per token.

    Parameters
    ----------
    options : mapping
        A validated ELMo options dict.
    chunk_size : int
        Tokens convolved at once (bounds the memory of the convolution outputs).
    """

    def __init__(self, options: Mapping, chunk_size: int = 256) -> None:
        super().__init__()
        cnn = options["char_cnn"]
        width = n_filters(options)
        self.activation = cnn["activation"]
        self.chunk_size = chunk_size
        #: row 0 is the padding id, kept at zero
        self.char_embedding = nn.Embedding(N_CHARACTERS, cnn["embedding"]["dim"], padding_idx=0)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(cnn["embedding"]["dim"], n, kernel_size=w, bias=True) for w, n in cnn["filters"]
        )
        #: each highway layer is one Linear: rows [W_transform^T ; -W_carry^T] (AllenNLP's convention)
        self.highways = nn.ModuleList(nn.Linear(width, 2 * width) for _ in range(cnn["n_highway"]))
        self.projection = nn.Linear(width, options["lstm"]["projection_dim"])
        self.output_dim = options["lstm"]["projection_dim"]

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Embed tokens.

        Parameters
        ----------
        char_ids : torch.Tensor
            ``(*, MAX_CHARACTERS)`` long character ids (see :mod:`.characters`).

        Returns
        -------
        torch.Tensor
            ``(*, projection_dim)``.
        """
        if char_ids.shape[-1] != MAX_CHARACTERS:
            raise ValueError(
                f"char_ids must end in a dimension of {MAX_CHARACTERS} characters, got shape "
                f"{tuple(char_ids.shape)}"
            )
        # (tokens, chars)
        flat = char_ids.reshape(-1, MAX_CHARACTERS)
        if not len(flat):
            return self.char_embedding.weight.new_zeros((*char_ids.shape[:-1], self.output_dim))
        # slots before the padding: the word's bytes + 2 marks (all 50 for an all-zero row)
        used = (flat != PAD_CHAR + 1).sum(dim=-1)
        # similar lengths together, so that each chunk convolves only the slots it needs
        order = torch.argsort(used, stable=True)
        parts = [self._embed(flat[index], int(used[index].max())) for index in order.split(self.chunk_size)]
        out = torch.cat(parts)[torch.argsort(order)]
        return out.reshape(*char_ids.shape[:-1], -1)

    def _embed(self, char_ids: torch.Tensor, used: int) -> torch.Tensor:
        """Token vectors ``(tokens, projection_dim)`` of ``char_ids`` whose slots from ``used`` on are padding.

        A window lying wholly in the padding has the same value for every token, so the
        convolution runs over the first ``used + width - 1`` slots and that shared value joins
        the max: exactly the max over all 50 slots.
        """
        activation = _ACTIVATIONS[self.activation]
        longest = max(conv.kernel_size[0] for conv in self.convolutions)
        # (tokens, embed_dim, slots)
        chars = self.char_embedding(char_ids[:, : min(MAX_CHARACTERS, used + longest - 1)]).transpose(1, 2)
        # (1, embed_dim, 1)
        pad = self.char_embedding.weight[PAD_CHAR + 1].reshape(1, -1, 1)
        features = []
        for conv in self.convolutions:
            width = conv.kernel_size[0]
            span = min(MAX_CHARACTERS, used + width - 1)
            # (tokens, n): max over positions
            best = conv(chars[:, :, :span]).amax(dim=-1)
            if span < MAX_CHARACTERS:  # every token has windows of padding only
                best = torch.maximum(best, conv(pad.expand(1, -1, width))[:, :, 0])
            features.append(activation(best))
        # (tokens, n_filters)
        x = torch.cat(features, dim=-1)
        for highway in self.highways:
            # (tokens, 2 * n_filters)
            transform, gate = highway(x).chunk(2, dim=-1)
            # gate = sigmoid(-(x W_carry + b_carry)) = 1 - c
            gate = torch.sigmoid(gate)
            x = gate * x + (1 - gate) * torch.relu(transform)
        # (tokens, projection_dim)
        return self.projection(x)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """bilm-tf's initialisation: uniform char embeddings, small convolutions, carry bias -2."""
        nn.init.uniform_(self.char_embedding.weight, -1.0, 1.0)
        self.char_embedding.weight[0].zero_()
        for conv in self.convolutions:
            if self.activation == "relu":
                nn.init.uniform_(conv.weight, -0.05, 0.05)
            else:
                nn.init.normal_(conv.weight, std=math.sqrt(1.0 / (conv.kernel_size[0] * conv.in_channels)))
            conv.bias.zero_()
        for highway in self.highways:
            width = highway.in_features
            nn.init.normal_(highway.weight, std=math.sqrt(1.0 / width))
            highway.bias.zero_()
            highway.bias[width:] = 2.0  # b_carry = -2 (the gate is stored negated)
        nn.init.normal_(self.projection.weight, std=math.sqrt(1.0 / self.projection.in_features))
        self.projection.bias.zero_()


class ProjectedLSTM(nn.Module):
    """One direction of one layer: an LSTM with cell clip and a clipped projection of its output.

    Gate blocks are in torch order (input, forget, cell, output). The bias is the TF bias (gate
    blocks reordered); TF's constant forget-gate +1 is added at run time, so loading and saving
    only reorder and transpose (a bit-exact round trip).

    Parameters
    ----------
    input_size, cell_size, projection_size : int
        Widths of the input, the memory cell and the projected output (= recurrent state).
    cell_clip, proj_clip : float or None
        Clip the cell / the projected output to ``[-clip, clip]``; 0 or ``None`` disables.
    """

    def __init__(
        self,
        input_size: int,
        cell_size: int,
        projection_size: int,
        cell_clip: Optional[float] = None,
        proj_clip: Optional[float] = None,
    ) -> None:
        super().__init__()
        self.input_size = input_size
        self.cell_size = cell_size
        self.projection_size = projection_size
        self.cell_clip = float(cell_clip) if cell_clip else None
        self.proj_clip = float(proj_clip) if proj_clip else None
        self.input_linearity = nn.Linear(input_size, 4 * cell_size, bias=True)
        self.state_linearity = nn.Linear(projection_size, 4 * cell_size, bias=False)
        self.projection = nn.Linear(cell_size, projection_size, bias=False)
        forget = torch.zeros(4 * cell_size)
        forget[cell_size : 2 * cell_size] = 1.0
        self.register_buffer("forget_offset", forget, persistent=False)

    def forward(self, inputs: torch.Tensor, batch_sizes: Sequence[int]) -> torch.Tensor:
        """Run the recurrence over packed sequences.

        Parameters
        ----------
        inputs : torch.Tensor
            ``(packed, input_size)``: the ``data`` of a :class:`PackedSequence` (time-major, longest
            sequences first).
        batch_sizes : sequence of int
            Rows at each time step (``PackedSequence.batch_sizes``).

        Returns
        -------
        torch.Tensor
            ``(packed, projection_size)`` in the same packed order.
        """
        return run_lstms([self], inputs.unsqueeze(0), batch_sizes)[0]

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """TF's defaults for ``LSTMCell``: Glorot-uniform kernels, zero bias."""
        fan_in = self.input_size + self.projection_size
        bound = math.sqrt(6.0 / (fan_in + 4 * self.cell_size))
        nn.init.uniform_(self.input_linearity.weight, -bound, bound)
        nn.init.uniform_(self.state_linearity.weight, -bound, bound)
        self.input_linearity.bias.zero_()
        bound = math.sqrt(6.0 / (self.cell_size + self.projection_size))
        nn.init.uniform_(self.projection.weight, -bound, bound)


def run_lstms(layers: Sequence[ProjectedLSTM], inputs: torch.Tensor, batch_sizes: Sequence[int]) -> torch.Tensor:
    """Run several same-shaped :class:`ProjectedLSTM` in lockstep (e.g. the forward and backward
    LSTMs of one layer, over their own inputs): one batched matmul per step for all of them.

    Parameters
    ----------
    layers : sequence of ProjectedLSTM
        ``D`` layers with the same sizes and clips.
    inputs : torch.Tensor
        ``(D, packed, input_size)``: packed sequences (time-major, longest first) sharing
        ``batch_sizes``.
    batch_sizes : sequence of int
        Rows at each time step (``PackedSequence.batch_sizes``).

    Returns
    -------
    torch.Tensor
        ``(D, packed, projection_size)`` in the same packed order.
    """
    first = layers[0]
    cell_clip, proj_clip, dtype = first.cell_clip, first.proj_clip, inputs.dtype
    if any((layer.cell_clip, layer.proj_clip) != (cell_clip, proj_clip) for layer in layers):
        raise ValueError("run_lstms needs layers with the same cell_clip and proj_clip")
    # (D, 1, 4 * cell): TF's forget-gate +1 added here, never stored
    bias = torch.stack([layer.input_linearity.bias + layer.forget_offset.to(dtype) for layer in layers]).unsqueeze(1)
    # (D, input, 4 * cell), (D, projection, 4 * cell), (D, cell, projection)
    w_in = torch.stack([layer.input_linearity.weight.t() for layer in layers])
    recurrent = torch.stack([layer.state_linearity.weight.t() for layer in layers])
    projection = torch.stack([layer.projection.weight.t() for layer in layers])
    # (D, packed, 4 * cell): the input part of every step at once
    gates_in = torch.baddbmm(bias, inputs, w_in)
    # without autograd the recurrent part is added in place (saves a copy per step); not under
    # autocast, which computes in another dtype than the tensors it is given (in-place ops refuse that)
    in_place = not torch.is_grad_enabled() and gates_in.dtype == dtype == recurrent.dtype
    add = torch.Tensor.baddbmm_ if in_place else torch.baddbmm
    n0 = batch_sizes[0] if len(batch_sizes) else 0
    h = inputs.new_zeros((len(layers), n0, first.projection_size))
    c = inputs.new_zeros((len(layers), n0, first.cell_size))
    outputs = []
    start = 0
    for n in batch_sizes:
        # (D, n, 4 * cell)
        gates = add(gates_in[:, start : start + n], h[:, :n], recurrent)
        i, f, g, o = gates.chunk(4, dim=-1)
        # (D, n, cell)
        c = torch.sigmoid(f) * c[:, :n] + torch.sigmoid(i) * torch.tanh(g)
        if cell_clip is not None:
            c = c.clamp(-cell_clip, cell_clip)
        # (D, n, projection)
        h = torch.bmm(torch.sigmoid(o) * torch.tanh(c), projection)
        if proj_clip is not None:
            h = h.clamp(-proj_clip, proj_clip)
        outputs.append(h)
        start += n
    if not outputs:
        return inputs.new_zeros((len(layers), 0, first.projection_size))
    return torch.cat(outputs, dim=1)


@dataclass
class BiLMStates:
    """Everything the biLM computes for a padded batch.

    Attributes
    ----------
    token : torch.Tensor
        ``(batch, seq, projection_dim)``: the character-CNN token layer.
    forward, backward : list of torch.Tensor
        Per LSTM layer, ``(batch, seq, projection_dim)``, after the skip connection. ``backward``
        is aligned with the input (position ``t`` holds the state after reading ``t..end``).
    mask : torch.Tensor
        ``(batch, seq)`` bool, true at real tokens (markers included).
    """

    token: torch.Tensor
    forward: list[torch.Tensor]
    backward: list[torch.Tensor]
    mask: torch.Tensor

    @property
    def n_layers(self) -> int:
        """ELMo output layers: the token layer plus one per LSTM layer."""
        return 1 + len(self.forward)

    def layer(self, index: int) -> torch.Tensor:
        """ELMo output layer ``index``: ``(batch, seq, 2 * projection_dim)``, zero at padding.

        Layer 0 is the token layer duplicated; layer ``k`` concatenates forward and backward LSTM
        layer ``k``.
        """
        if index == 0:
            pair = (self.token, self.token)
        else:
            pair = (self.forward[index - 1], self.backward[index - 1])
        return torch.cat(pair, dim=-1) * self.mask.unsqueeze(-1).to(self.token.dtype)

    def layers(self, indexes: Optional[Sequence[int]] = None) -> torch.Tensor:
        """Stack output layers: ``(layers, batch, seq, 2 * projection_dim)`` (default: all)."""
        indexes = range(self.n_layers) if indexes is None else indexes
        return torch.stack([self.layer(i) for i in indexes])


class BiLMEncoderModule(nn.Module):
    """ELMo's bidirectional language model encoder (without the softmax), trainable.

    Parameters
    ----------
    options : mapping
        An ELMo options dict (see :func:`.options.elmo_options`); validated and copied.
    dropout : float
        Dropout on the input of every LSTM layer in training mode (bilm-tf used 0.1).
    init : bool
        Initialise the weights as bilm-tf does (otherwise torch's defaults until weights are loaded).
    """

    def __init__(self, options: Mapping, dropout: float = 0.0, init: bool = True) -> None:
        super().__init__()
        self.options = check_options(options)
        lstm = self.options["lstm"]
        self.projection_dim = lstm["projection_dim"]
        self.cell_dim = lstm["dim"]
        self.dropout = nn.Dropout(dropout)
        self.token_embedder = CharCNNTokenEmbedder(self.options)

        def layer() -> ProjectedLSTM:
            return ProjectedLSTM(self.projection_dim, self.cell_dim, self.projection_dim,
                                 lstm["cell_clip"], lstm["proj_clip"])

        self.forward_layers = nn.ModuleList(layer() for _ in range(lstm["n_layers"]))
        self.backward_layers = nn.ModuleList(layer() for _ in range(lstm["n_layers"]))
        if init:
            self.reset_parameters()

    @property
    def n_lstm_layers(self) -> int:
        return len(self.forward_layers)

    @property
    def n_output_layers(self) -> int:
        """ELMo output layers: ``n_lstm_layers + 1``."""
        return self.n_lstm_layers + 1

    @property
    def output_width(self) -> int:
        """Width of every output layer: ``2 * projection_dim``."""
        return 2 * self.projection_dim

    def reset_parameters(self) -> None:
        self.token_embedder.reset_parameters()
        for layer in [*self.forward_layers, *self.backward_layers]:
            layer.reset_parameters()

    def embed_tokens(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Character ids ``(*, 50)`` -> token vectors ``(*, projection_dim)``."""
        return self.token_embedder(char_ids)

    def forward(self, char_ids: torch.Tensor, dedupe: bool = True) -> BiLMStates:
        """Run the biLM on padded character ids.

        Parameters
        ----------
        char_ids : torch.Tensor
            ``(batch, seq, 50)`` long, sentence markers included, each sentence left-aligned and
            followed only by all-zero positions (as :func:`.characters.sentence_char_ids` builds).
        dedupe : bool
            Embed each distinct token once (gradients still reach every occurrence).

        Returns
        -------
        BiLMStates
        """
        # (batch, seq)
        mask = (char_ids > 0).any(dim=-1)
        lengths = mask.sum(dim=1)
        if dedupe and char_ids.numel():
            unique, inverse = torch.unique(char_ids.reshape(-1, MAX_CHARACTERS), dim=0, return_inverse=True)
            # (batch, seq, projection)
            tokens = self.embed_tokens(unique)[inverse].reshape(*char_ids.shape[:2], -1)
        else:
            tokens = self.embed_tokens(char_ids)
        return self.contextualize(tokens, lengths)

    def contextualize(self, tokens: torch.Tensor, lengths: torch.Tensor) -> BiLMStates:
        """Run the forward and backward LSTM stacks over token vectors.

        Parameters
        ----------
        tokens : torch.Tensor
            ``(batch, seq, projection_dim)``; positions at or after a sentence's length are ignored.
        lengths : torch.Tensor
            ``(batch,)`` long: tokens per sentence, markers included (0 is allowed).

        Returns
        -------
        BiLMStates
        """
        batch, seq, _ = tokens.shape
        lengths_cpu = lengths.to("cpu", torch.int64)
        # (batch, seq)
        mask = torch.arange(seq).unsqueeze(0) < lengths_cpu.unsqueeze(1)
        mask = mask.to(tokens.device)
        reverse = _reverse_index(lengths_cpu, seq).to(tokens.device)
        # (2, batch, seq, projection): the forward LM's input and each sentence reversed
        both = torch.stack([tokens, _gather_time(tokens, reverse)])
        layers = self._run_stacks(both, lengths_cpu)
        forward = [x[0] for x in layers]
        backward = [_gather_time(x[1], reverse) for x in layers]
        return BiLMStates(tokens, forward, backward, mask)

    def _run_stacks(self, both: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
        """Both LSTM stacks in lockstep over left-aligned sequences.

        ``both`` is ``(2, batch, seq, projection_dim)`` (forward input, reversed input); returns
        per layer ``(2, batch, seq, projection_dim)`` (zeros at padding).
        """
        _, batch, seq, width = both.shape
        nonempty = lengths > 0
        if not bool(nonempty.any()):
            return [both.new_zeros((2, batch, seq, width)) for _ in self.forward_layers]
        rows = nonempty.nonzero().squeeze(1).to(both.device)
        # packed over (batch, seq); data (packed, 2, width)
        packed = pack_padded_sequence(both[:, rows].permute(1, 2, 0, 3), lengths[nonempty], batch_first=True,
                                      enforce_sorted=False)
        batch_sizes = packed.batch_sizes.tolist()
        # (2, packed, width)
        data = packed.data.transpose(0, 1)
        outputs = []
        for index, pair in enumerate(zip(self.forward_layers, self.backward_layers)):
            inputs = self.dropout(data)
            # (2, packed, projection)
            out = run_lstms(pair, inputs, batch_sizes)
            if index > 0:
                out = out + inputs
            data = out
            repacked = PackedSequence(out.transpose(0, 1), packed.batch_sizes, packed.sorted_indices,
                                      packed.unsorted_indices)
            # (rows, seq, 2, projection)
            padded, _ = pad_packed_sequence(repacked, batch_first=True, total_length=seq)
            outputs.append(_scatter_rows(padded, rows, batch).permute(2, 0, 1, 3))
        return outputs


def _reverse_index(lengths: torch.Tensor, seq: int) -> torch.Tensor:
    """``(batch, seq)`` time index reversing each sequence within its length (padding stays put)."""
    steps = torch.arange(seq).unsqueeze(0)
    reverse = lengths.unsqueeze(1) - 1 - steps
    return torch.where(reverse >= 0, reverse, steps)


def _gather_time(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x[b, index[b, t]]`` for ``x`` of shape ``(batch, seq, width)``."""
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def _scatter_rows(padded: torch.Tensor, rows: torch.Tensor, batch: int) -> torch.Tensor:
    """Put the rows of non-empty sequences back into a zero ``(batch, seq, width)`` tensor."""
    if len(rows) == batch:
        return padded
    full = padded.new_zeros((batch, *padded.shape[1:]))
    return full.index_copy(0, rows, padded)


__all__ = ["BiLMEncoderModule", "BiLMStates", "CharCNNTokenEmbedder", "ProjectedLSTM", "run_lstms"]
