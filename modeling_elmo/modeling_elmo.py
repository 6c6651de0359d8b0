"""ELMo (Peters et al. 2018, "Deep contextualized word representations") for transformers.

Read top to bottom:

1. building blocks: `ElmoHighway`, `ElmoCharacterEncoder` (character CNN -> highway -> projection),
   `ElmoLstmLayer` (LSTM with a clipped projection), `ElmoBiLstm` (separate forward and backward stacks),
   `ElmoScalarMix`;
2. `ElmoPreTrainedModel` with the initialisation of the original training code;
3. the output classes;
4. `ElmoModel`: character ids (batch, tokens, 50) -> all layers (batch, tokens, 2 * hidden_size);
5. heads: `ElmoForBidirectionalLM` (pretraining), `ElmoForSequenceClassification`, `ElmoForTokenClassification`.

Conventions (the converter in `modeling_elmo.convert` maps the original TensorFlow layout to these):
LSTM gates are in PyTorch order (input, forget, cell, output); the LSTM bias already holds TensorFlow's run-time
forget bias of +1; the highway uses TensorFlow's convention, where the gate ("carry" in the original files)
multiplies the transformed branch.

By default the model is **stateless**: a sentence's vectors depend only on that sentence. ``config.stateful``
reproduces the original behaviour of carrying LSTM states from one batch to the next, row by row.

This file is shipped to the Hub as custom code: it imports only torch, transformers and its sibling files.
"""

from __future__ import annotations

import math
import os
import warnings
import weakref
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput
from transformers.utils import ModelOutput, logging

from .configuration_elmo import (
    BEGINNING_OF_SENTENCE_CHARACTER,
    END_OF_SENTENCE_CHARACTER,
    MAX_CHARACTER_ID,
    ElmoConfig,
    sentence_marker_char_ids,
)
from .tokenization_elmo import encode_words

try:  # transformers >= 5: init functions that skip tensors already loaded from a checkpoint
    from transformers import initialization as init
except ImportError:  # pragma: no cover - older transformers
    from torch.nn import init

logger = logging.get_logger(__name__)



# ---------------------------------------------------------------------------------------------------------------
# 1. Building blocks
# ---------------------------------------------------------------------------------------------------------------
#: Per `ElmoLstmLayer`, MKL-packed copies of its recurrent weights for CPU inference (outside the module, so that
#: copying, pickling or saving a model never meets these backend-specific tensors).
_PACKED_WEIGHTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _mkl_packing_available() -> bool:
    """Whether this torch build has MKL's packed-weight GEMM (x86 CPU builds)."""
    return torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")


class ElmoHighway(nn.Module):
    """One highway layer, TensorFlow convention: ``t = sigmoid(gate(x))``, ``x <- t * relu(transform(x)) + (1 - t) * x``.

    The non-linearity is always relu, whatever ``char_cnn_activation`` is (as in the original).
    """

    def __init__(self, size: int):
        super().__init__()
        self.transform = nn.Linear(size, size)
        self.gate = nn.Linear(size, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.gate(x))
        return gate * F.relu(self.transform(x)) + (1.0 - gate) * x


class ElmoCharacterEncoder(nn.Module):
    """Context-insensitive token representation from character ids.

    char ids (N, 50) -> embedding (N, 50, d_c) -> one valid convolution per filter width, max over positions,
    activation -> concatenation (N, F) -> highway layers -> linear projection (N, P).
    Each distinct word of a call is encoded once (duplicates in a batch share the computation).
    """

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.char_embeddings = nn.Embedding(config.num_characters, config.char_embedding_dim, padding_idx=0)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(config.char_embedding_dim, count, kernel_size=width) for width, count in config.char_cnn_filters
        )
        self.activation = torch.relu if config.char_cnn_activation == "relu" else torch.tanh
        self.highways = nn.ModuleList(ElmoHighway(config.num_char_cnn_filters) for _ in range(config.num_highway_layers))
        self.projection = nn.Linear(config.num_char_cnn_filters, config.hidden_size)

    def convolve(self, char_ids: torch.Tensor) -> torch.Tensor:
        """(N, C) character ids -> (N, F): every filter's maximum over the word's positions, then the activation.

        Each convolution is computed as one matrix product over all windows (unfold), which is about twice as fast
        on a CPU as ``Conv1d`` with 16 input channels; the result is the same valid cross-correlation.
        """
        x = self.char_embeddings(char_ids)  # (N, C, d_c)
        n, length, dim = x.shape
        pooled = []
        for conv in self.convolutions:
            width = conv.kernel_size[0]
            windows = x.unfold(1, width, 1).reshape(n * (length - width + 1), dim * width)  # (N * (C-w+1), d_c * w)
            scores = torch.addmm(conv.bias, windows, conv.weight.reshape(conv.out_channels, dim * width).t())
            # bias -> max over all positions -> activation (equal to activation -> max: both are monotone)
            pooled.append(self.activation(scores.view(n, length - width + 1, -1).amax(dim=1)))
        return torch.cat(pooled, dim=-1)  # (N, F)

    def encode(self, char_ids: torch.Tensor) -> torch.Tensor:
        """(N, max_characters_per_token) character ids -> (N, hidden_size), no de-duplication."""
        # chunks bound the memory of the unfolded windows on long inputs
        x = torch.cat([self.convolve(chunk) for chunk in char_ids.split(4096)]) if char_ids.shape[0] else self.convolve(char_ids)
        for highway in self.highways:
            x = highway(x)
        return self.projection(x)  # (N, P)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        unique, inverse = torch.unique(char_ids, dim=0, return_inverse=True)
        if self._word_cache and not torch.is_grad_enabled():
            vectors = self._encode_with_cache(unique)
        elif unique.shape[0] == char_ids.shape[0]:
            return self.encode(char_ids)
        else:
            vectors = self.encode(unique)
        return vectors[inverse]

    # -- optional cache of word vectors (inference) -------------------------------------------------------------
    _word_cache: dict[bytes, torch.Tensor] | None = None

    def cache_words(self, char_ids: torch.Tensor) -> int:
        """Pre-compute the vectors of the words in ``char_ids`` (K, C) and reuse them while gradients are off.

        The cache holds values, not a function of the weights: call `clear_word_cache` (or cache again) after
        the weights change. Returns the number of cached words.
        """
        with torch.no_grad():
            unique = torch.unique(char_ids, dim=0)
            vectors = self.encode(unique)
        cache = dict(self._word_cache or {})
        for row, vector in zip(unique.cpu().numpy(), vectors):
            cache[row.tobytes()] = vector
        self._word_cache = cache
        return len(cache)

    def clear_word_cache(self) -> None:
        self._word_cache = None

    def _encode_with_cache(self, unique: torch.Tensor) -> torch.Tensor:
        keys = [row.tobytes() for row in unique.cpu().numpy()]
        hits = [self._word_cache.get(k) for k in keys]
        missing = [i for i, v in enumerate(hits) if v is None]
        out = torch.empty(unique.shape[0], self.projection.out_features, dtype=self.projection.weight.dtype, device=unique.device)
        if missing:
            index = torch.as_tensor(missing, device=unique.device)
            out[index] = self.encode(unique[index])
        present = [i for i, v in enumerate(hits) if v is not None]
        if present:
            out[torch.as_tensor(present, device=unique.device)] = torch.stack([hits[i] for i in present]).to(out)
        return out


class ElmoLstmLayer(nn.Module):
    """One direction of one layer: an LSTM whose output is projected (H -> P) and optionally clipped.

    Per step (PyTorch gate order)::

        i, f, g, o = split(x_t W_ih^T + h_{t-1} W_hh^T + bias)
        c_t = clip(sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g), cell_clip)      # clip before the tanh below
        h_t = clip((sigmoid(o) * tanh(c_t)) W_hr^T, proj_clip)                  # projection has no bias

    Steps past a row's length keep the state and output zeros. Two implementations share the parameters:
    the explicit loop (input products for all steps in one matrix product, only the recurrent product per step),
    and ``torch.lstm`` with ``proj_size`` (cuDNN on a GPU), which cannot clip.

    Without autograd on an x86 CPU (fp32), the loop's two per-step products use copies of ``weight_hh`` and
    ``weight_hr`` packed once for MKL's small-batch GEMM (``cblas_sgemm_pack``), kept until the weights change:
    a per-step product then no longer re-packs a matrix of up to 32 MB.
    """

    def __init__(self, input_size: int, cell_size: int, hidden_size: int, cell_clip: float | None, proj_clip: float | None):
        super().__init__()
        self.cell_size, self.hidden_size = cell_size, hidden_size
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        self.weight_ih = nn.Parameter(torch.empty(4 * cell_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * cell_size, hidden_size))
        self.bias = nn.Parameter(torch.empty(4 * cell_size))
        self.weight_hr = nn.Parameter(torch.empty(hidden_size, cell_size))

    def _step_products(self, batch: int, inputs: torch.Tensor):
        """The two per-step products of the loop, ``h @ W_hh^T + gates_x[t]`` and ``u @ W_hr^T``, as functions.

        Training (autograd on) or another device or dtype: ``addmm``/``mm`` on (in, out) copies made once per call.
        Inference on an x86 CPU in fp32: MKL-packed weights, cached per batch size and weight version (any in-place
        update, ``load_state_dict`` included, bumps the version and so repacks)."""
        packable = (
            not torch.is_grad_enabled() and inputs.device.type == "cpu" and inputs.dtype == torch.float32
            and self.weight_hh.dtype == torch.float32 and _mkl_packing_available()
            # weights made inside inference_mode track no version, so a cached copy could not tell they changed
            and not self.weight_hh.is_inference() and not self.weight_hr.is_inference()
        )
        if not packable:
            weight_hh_t = self.weight_hh.t().contiguous()  # (P, 4H): the per-step products run faster untransposed
            weight_hr_t = self.weight_hr.t().contiguous()  # (H, P)
            return (lambda h, gx: torch.addmm(gx, h, weight_hh_t)), (lambda u: torch.mm(u, weight_hr_t))
        tag = (self.weight_hh._version, self.weight_hr._version, self.weight_hh.data_ptr(), self.weight_hr.data_ptr())
        cache = _PACKED_WEIGHTS.get(self)
        if cache is None or cache["tag"] != tag:  # first use, or the weights changed: drop every stale copy
            cache = _PACKED_WEIGHTS[self] = {"tag": tag}
        packed = cache.get(batch)
        if packed is None:
            with torch.inference_mode(False), torch.no_grad():  # plain tensors, usable outside inference mode too
                hh, hr = self.weight_hh.detach(), self.weight_hr.detach()
                packed = (hh, hr, torch.ops.mkl._mkl_reorder_linear_weight(hh, batch),
                          torch.ops.mkl._mkl_reorder_linear_weight(hr, batch))
            if len(cache) > 2:  # keep the two most recent batch sizes (a corpus's last batch is smaller)
                cache.pop(next(k for k in cache if k != "tag"))
            cache[batch] = packed
        hh, hr, packed_hh, packed_hr = packed
        linear = torch.ops.mkl._mkl_linear
        return (lambda h, gx: linear(h, packed_hh, hh, None, batch).add_(gx)), (lambda u: linear(u, packed_hr, hr, None, batch))

    def forward(
        self,
        inputs: torch.Tensor,
        mask: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor] | None = None,
        use_torch_lstm: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """inputs (B, T, P), mask (B, T) bool (valid prefix per row), state ((B, P), (B, H)) -> (B, T, P), state."""
        batch, steps, _ = inputs.shape
        if state is None:
            h = inputs.new_zeros(batch, self.hidden_size)
            c = inputs.new_zeros(batch, self.cell_size)
        else:
            h, c = state
        if use_torch_lstm:
            return self._forward_torch(inputs, mask, h, c)
        # Input products of all time steps in one matrix product, time-major so that each step's slice is contiguous.
        # Steps are taken with `unbind` and put back with `stack`: under autograd, indexing one step (or writing into
        # a preallocated output) would cost a zero-filled tensor of every step's size per step in the backward pass.
        gates_x = F.linear(inputs.transpose(0, 1), self.weight_ih, self.bias).unbind(0)  # T x (B, 4H)
        recurrent, project = self._step_products(batch, inputs)
        outputs = []
        full = mask.all(dim=0).tolist()  # per step: no row is padding
        step_mask = mask.t().unsqueeze(-1)  # (T, B, 1)
        for t in range(steps):
            gates = recurrent(h, gates_x[t])  # (B, 4H)
            i, f, g, o = gates.chunk(4, dim=1)
            c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            if self.cell_clip is not None:
                c_new = c_new.clamp(-self.cell_clip, self.cell_clip)
            h_new = project(torch.sigmoid(o) * torch.tanh(c_new))  # (B, P)
            if self.proj_clip is not None:
                h_new = h_new.clamp(-self.proj_clip, self.proj_clip)
            if full[t]:
                h, c = h_new, c_new
                outputs.append(h_new)
            else:  # padded rows keep their state and output zeros
                valid = step_mask[t]  # (B, 1)
                h = torch.where(valid, h_new, h)
                c = torch.where(valid, c_new, c)
                outputs.append(h_new * valid)
        if not outputs:
            return inputs.new_zeros(batch, 0, self.hidden_size), (h, c)
        return torch.stack(outputs, dim=1), (h, c)

    def _forward_torch(self, inputs, mask, h, c):
        params = [self.weight_ih, self.weight_hh, self.bias, torch.zeros_like(self.bias), self.weight_hr]
        # Right padding: valid positions never see padded ones, so no packing is needed for the outputs.
        # (The final state would be the state after the padding: stateful mode always uses the loop.)
        with warnings.catch_warnings():  # "LSTM with projections is not supported with oneDNN": harmless on CPU
            warnings.filterwarnings("ignore", message=".*not supported with oneDNN.*")
            outputs, h_n, c_n = torch.lstm(
                inputs, (h.unsqueeze(0).contiguous(), c.unsqueeze(0).contiguous()), params, True, 1, 0.0, self.training, False, True
            )
        return outputs * mask.unsqueeze(-1), (h_n[0], c_n[0])


def _reverse_each_row(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse the first ``lengths[b]`` steps of every row of ``x`` (B, T, ...), leaving the padding in place."""
    steps = x.shape[1]
    positions = torch.arange(steps, device=x.device).unsqueeze(0)  # (1, T)
    index = torch.where(positions < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - positions, positions)  # (B, T)
    index = index.view(index.shape + (1,) * (x.dim() - 2)).expand_as(x)
    return x.gather(1, index)


class ElmoBiLstm(nn.Module):
    """Two independent stacks of `ElmoLstmLayer`: forward (left to right) and backward (right to left).

    Layer l >= 1 adds its input to its output when ``use_skip_connections`` (the recurrent state does not include
    the residual). Dropout (training only) acts on every layer's input, and the residual adds the dropped-out input,
    as in the original training. The backward stack reads each row reversed over its own length.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.config = config

        def layer() -> ElmoLstmLayer:
            return ElmoLstmLayer(config.hidden_size, config.cell_size, config.hidden_size, config.cell_clip, config.proj_clip)

        self.forward_layers = nn.ModuleList(layer() for _ in range(config.num_hidden_layers))
        self.backward_layers = nn.ModuleList(layer() for _ in range(config.num_hidden_layers))
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self._states: list | None = None  # stateful mode: per direction and layer, (h (rows, P), c (rows, H))

    def reset_states(self) -> None:
        """Forget the LSTM states carried between calls (stateful mode)."""
        self._states = None

    def _run_stack(self, layers: nn.ModuleList, x: torch.Tensor, mask: torch.Tensor, states: list | None, use_torch: bool):
        outputs, finals = [], []
        for index, layer in enumerate(layers):
            layer_input = self.dropout(x)
            y, final = layer(layer_input, mask, None if states is None else states[index], use_torch_lstm=use_torch)
            if index > 0 and self.config.use_skip_connections:
                y = y + layer_input * mask.unsqueeze(-1)
            outputs.append(y)
            finals.append(final)
            x = y
        return outputs, finals

    def forward(self, embeddings: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """embeddings (B, T, P), mask (B, T) bool valid prefix -> one (B, T, 2P) tensor per layer."""
        lengths = mask.sum(dim=1)
        stateful = self.config.stateful
        use_torch = self.config.uses_torch_lstm and not stateful
        forward_states = backward_states = None
        if stateful:
            forward_states, backward_states = self._initial_states(embeddings)
        forward_out, forward_final = self._run_stack(self.forward_layers, embeddings, mask, forward_states, use_torch)
        reversed_embeddings = _reverse_each_row(embeddings, lengths)
        backward_out, backward_final = self._run_stack(
            self.backward_layers, reversed_embeddings, mask, backward_states, use_torch
        )
        if stateful:
            self._store_states(forward_final, backward_final, lengths > 0)
        return [torch.cat([f, _reverse_each_row(b, lengths)], dim=-1) for f, b in zip(forward_out, backward_out)]

    def _initial_states(self, embeddings: torch.Tensor):
        batch = embeddings.shape[0]
        P, H = self.config.hidden_size, self.config.cell_size
        if self._states is None:
            zeros = [[(embeddings.new_zeros(0, P), embeddings.new_zeros(0, H)) for _ in range(self.config.num_hidden_layers)] for _ in range(2)]
            self._states = zeros
        initial = []
        for direction in self._states:
            per_layer = []
            for h, c in direction:
                h = h.to(embeddings)
                c = c.to(embeddings)
                if h.shape[0] < batch:  # a larger batch than ever before: new rows start from zeros
                    h = torch.cat([h, h.new_zeros(batch - h.shape[0], P)])
                    c = torch.cat([c, c.new_zeros(batch - c.shape[0], H)])
                per_layer.append((h[:batch], c[:batch]))
            initial.append(per_layer)
        return initial[0], initial[1]

    def _store_states(self, forward_final, backward_final, used: torch.Tensor) -> None:
        used = used.unsqueeze(1)
        new_states = []
        for direction, finals in zip(self._states, (forward_final, backward_final)):
            per_layer = []
            for (old_h, old_c), (h, c) in zip(direction, finals):
                batch = h.shape[0]
                if old_h.shape[0] < batch:
                    old_h = torch.cat([old_h, old_h.new_zeros(batch - old_h.shape[0], old_h.shape[1])])
                    old_c = torch.cat([old_c, old_c.new_zeros(batch - old_c.shape[0], old_c.shape[1])])
                head_h = torch.where(used, h.detach(), old_h[:batch].to(h))
                head_c = torch.where(used, c.detach(), old_c[:batch].to(c))
                # rows beyond this batch (a smaller batch than before) keep their old state
                per_layer.append((torch.cat([head_h, old_h[batch:].to(h)]), torch.cat([head_c, old_c[batch:].to(c)])))
            new_states.append(per_layer)
        self._states = new_states


class ElmoScalarMix(nn.Module):
    """ELMo's task-specific layer combination: ``gamma * sum_j softmax(w)_j * N(layer_j)``, for one or more outputs.

    ``N`` is the identity, or with ``do_layer_norm`` a normalisation with one mean and variance per layer over all
    unmasked positions of the batch (as the paper's implementations do). With ``fixed_weights`` (pre-softmax), the
    weights and gamma are not trained.

    Args:
        num_layers: number of layers to mix (L + 1).
        num_output_representations: independent mixes (each its own weights and gamma).
        do_layer_norm: normalise each layer before mixing.
        fixed_weights: optional pre-softmax weights, e.g. ``[-9e10, 1, -9e10]`` to select layer 1.
    """

    def __init__(self, num_layers: int, num_output_representations: int = 1, do_layer_norm: bool = False,
                 fixed_weights: list[float] | None = None):
        super().__init__()
        if fixed_weights is not None and len(fixed_weights) != num_layers:
            raise ValueError(f"fixed_weights needs {num_layers} values, got {len(fixed_weights)}: {fixed_weights!r}.")
        self.num_layers = num_layers
        self.do_layer_norm = do_layer_norm
        trainable = fixed_weights is None
        start = torch.zeros(num_output_representations, num_layers) if trainable else torch.tensor([fixed_weights] * num_output_representations, dtype=torch.float)
        self.scalar_parameters = nn.Parameter(start, requires_grad=trainable)  # (K, L + 1)
        self.gamma = nn.Parameter(torch.ones(num_output_representations), requires_grad=trainable)  # (K,)

    @property
    def layer_weights(self) -> torch.Tensor:
        """The normalised weights s = softmax(w), shape (K, L + 1)."""
        return torch.softmax(self.scalar_parameters, dim=-1)

    def forward(self, layers: torch.Tensor, mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """layers (B, L + 1, T, D) (or a list of (B, T, D)), mask (B, T) -> K tensors (B, T, D)."""
        if isinstance(layers, (list, tuple)):
            layers = torch.stack(list(layers), dim=1)
        if layers.dim() != 4 or layers.shape[1] != self.num_layers:
            raise ValueError(f"ScalarMix expects (batch, {self.num_layers}, tokens, dim) layers, got {tuple(layers.shape)}.")
        if self.do_layer_norm:
            if mask is None:
                raise ValueError("ScalarMix with do_layer_norm needs the mask.")
            m = mask.to(layers.dtype)[:, None, :, None]  # (B, 1, T, 1)
            count = (m.sum() * layers.shape[-1]).clamp_min(1.0)
            mean = (layers * m).sum(dim=(0, 2, 3), keepdim=True) / count
            var = (((layers - mean) * m) ** 2).sum(dim=(0, 2, 3), keepdim=True) / count
            layers = (layers - mean) / torch.sqrt(var + 1e-12)
        weights = self.layer_weights.to(layers.dtype)  # (K, L + 1)
        mixed = torch.einsum("kl,bltd->kbtd", weights, layers) * self.gamma.to(layers.dtype)[:, None, None, None]
        if mask is not None:
            mixed = mixed * mask.to(layers.dtype)[None, :, :, None]
        return list(mixed.unbind(0))


# ---------------------------------------------------------------------------------------------------------------
# 2. Pretrained base
# ---------------------------------------------------------------------------------------------------------------
class ElmoPreTrainedModel(PreTrainedModel):
    """Weight initialisation and loading for all ELMo models.

    `_init_weights` follows the original training code (bilm-tf): char table U(-1, 1) with a zero padding row;
    relu convolutions U(-0.05, 0.05) (tanh: N(0, 1/(w d_c))); highway and projection N(0, 1/F) with the highway
    gate bias -2 (leaning towards passing x through); LSTM matrices Glorot-uniform, bias 0 except the forget
    block at +1; softmax N(0, 1/P). The transformers default (N(0, 0.02) everywhere) gives vanishing activations.
    """

    config_class = ElmoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    _no_split_modules = ["ElmoCharacterEncoder", "ElmoLstmLayer"]
    # One checkpoint serves every class: the biLM alone ignores the softmax or a task head's layers silently.
    _keys_to_ignore_on_load_unexpected = [r"^softmax\.", r"^classifier\.", r"^scalar_mix\."]

    def _init_weights(self, module: nn.Module) -> None:
        config = self.config
        if isinstance(module, ElmoCharacterEncoder):
            table = torch.empty_like(module.char_embeddings.weight).uniform_(-1.0, 1.0)
            table[0] = 0.0
            init.copy_(module.char_embeddings.weight, table)
            for conv in module.convolutions:
                width = conv.kernel_size[0]
                if config.char_cnn_activation == "relu":
                    init.uniform_(conv.weight, -0.05, 0.05)
                else:
                    init.normal_(conv.weight, 0.0, math.sqrt(1.0 / (width * config.char_embedding_dim)))
                init.zeros_(conv.bias)
            std = math.sqrt(1.0 / config.num_char_cnn_filters)
            for highway in module.highways:
                init.normal_(highway.transform.weight, 0.0, std)
                init.zeros_(highway.transform.bias)
                init.normal_(highway.gate.weight, 0.0, std)
                init.constant_(highway.gate.bias, -2.0)
            init.normal_(module.projection.weight, 0.0, std)
            init.zeros_(module.projection.bias)
        elif isinstance(module, ElmoLstmLayer):
            H, P = module.cell_size, module.hidden_size
            # Glorot-uniform over the original stacked [x; h] -> 4H matrix, and over the projection
            limit = math.sqrt(6.0 / (module.weight_ih.shape[1] + P + 4 * H))
            init.uniform_(module.weight_ih, -limit, limit)
            init.uniform_(module.weight_hh, -limit, limit)
            init.xavier_uniform_(module.weight_hr)
            bias = torch.zeros(4 * H)
            bias[H : 2 * H] = 1.0  # forget gate
            init.copy_(module.bias, bias)
        elif isinstance(module, ElmoScalarMix):
            if module.scalar_parameters.requires_grad:
                init.zeros_(module.scalar_parameters)
                init.ones_(module.gamma)
            else:
                fixed = torch.tensor([config.scalar_mix_parameters] * module.scalar_parameters.shape[0], dtype=torch.float)
                init.copy_(module.scalar_parameters, fixed)
                init.ones_(module.gamma)
        elif isinstance(module, ElmoForBidirectionalLM):
            init.normal_(module.softmax.weight, 0.0, 1.0 / math.sqrt(config.hidden_size))
            init.zeros_(module.softmax.bias)
        elif isinstance(module, (ElmoForSequenceClassification, ElmoForTokenClassification)):
            init.xavier_uniform_(module.classifier.weight)
            init.zeros_(module.classifier.bias)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """`PreTrainedModel.from_pretrained` restricted to safetensors weights.

        A ``pytorch_model.bin`` is a pickle, and loading a pickle can run code its author put in it: ELMo models
        load ``model.safetensors`` only (``use_safetensors=False`` must be asked for explicitly).
        """
        kwargs.setdefault("use_safetensors", True)
        location = str(args[0] if args else kwargs.get("pretrained_model_name_or_path", ""))
        if kwargs["use_safetensors"] and os.path.isdir(location):
            names = set(os.listdir(location))
            pickles = sorted(n for n in names if n.startswith("pytorch_model") and n.endswith(".bin"))
            if pickles and not any(n.startswith("model") and n.endswith(".safetensors") for n in names):
                raise ValueError(
                    f"{location} holds only pickled weights {pickles}. Loading a pickle can run arbitrary code, so "
                    "ELMo models load safetensors only. If you trust the file, convert it once in a trusted "
                    "environment (from_pretrained(..., use_safetensors=False), then save_pretrained) and use the "
                    "model.safetensors it writes."
                )
        return super().from_pretrained(*args, **kwargs)

    def get_input_embeddings(self) -> nn.Module:
        return self.base_model.char_encoder.char_embeddings

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.base_model.char_encoder.char_embeddings = value


# ---------------------------------------------------------------------------------------------------------------
# 3. Outputs
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class ElmoModelOutput(ModelOutput):
    """Output of `ElmoModel`.

    Args:
        last_hidden_state: top layer, forward and backward halves, (batch, tokens, 2 * hidden_size).
        hidden_states: with ``output_hidden_states``, all L + 1 layers (layer 0 = the token embedding twice),
            each (batch, tokens, 2 * hidden_size).
        attention_mask: (batch, tokens), 1 where a token is.
    """

    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attention_mask: torch.LongTensor | None = None


@dataclass
class ElmoBidirectionalLMOutput(ModelOutput):
    """Output of `ElmoForBidirectionalLM`.

    Args:
        loss: mean of the forward and backward losses (sampled softmax in training if configured, else exact).
        forward_loss / backward_loss: mean negative log-likelihood per target word of each direction.
        forward_nll_sum / backward_nll_sum: summed negative log-likelihoods (for exact perplexity over many batches).
        num_forward_targets / num_backward_targets: number of predicted words of each direction.
        last_hidden_state: top biLM layer (batch, positions, 2 * hidden_size), boundary positions included.
    """

    loss: torch.FloatTensor | None = None
    forward_loss: torch.FloatTensor | None = None
    backward_loss: torch.FloatTensor | None = None
    forward_nll_sum: torch.FloatTensor | None = None
    backward_nll_sum: torch.FloatTensor | None = None
    num_forward_targets: torch.LongTensor | None = None
    num_backward_targets: torch.LongTensor | None = None
    last_hidden_state: torch.FloatTensor | None = None


# ---------------------------------------------------------------------------------------------------------------
# 4. The model
# ---------------------------------------------------------------------------------------------------------------
class ElmoModel(ElmoPreTrainedModel):
    """The ELMo biLM: character ids (batch, tokens, 50) -> all layers (batch, tokens, 2 * hidden_size).

    Sentence boundaries ``<S>``/``</S>`` are added inside the model around every sentence and removed from the
    outputs. Padded positions (``attention_mask`` 0, or all-zero character rows) give zeros. Padding may be on
    either side; tokens are read in their order.

    Example:

    ```python
    >>> import torch
    >>> from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
    >>> tok = ElmoTokenizer()
    >>> model = ElmoModel(ElmoConfig(hidden_size=8, cell_size=16, char_cnn_filters=[[1, 4], [2, 4]], num_highway_layers=1))
    >>> enc = tok([["The", "bank", "closed"], ["A", "river", "bank"]], is_split_into_words=True, padding=True, return_tensors="pt")
    >>> out = model(**enc, output_hidden_states=True)
    >>> len(out.hidden_states), tuple(out.last_hidden_state.shape)
    (3, (2, 3, 16))
    ```
    """

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        self.char_encoder = ElmoCharacterEncoder(config)
        self.encoder = ElmoBiLstm(config)
        self.post_init()

    def reset_states(self) -> None:
        """Forget the LSTM states carried between calls when ``config.stateful`` is on."""
        self.encoder.reset_states()

    def cache_word_vectors(self, words: list[str]) -> int:
        """Cache the context-free vectors of frequent ``words`` (plus ``<S>``/``</S>``) for faster inference.

        The character CNN, highway and projection then run only for words not in the cache, whenever gradients
        are off (``torch.no_grad()``/``torch.inference_mode()``). Results are identical. Re-run after changing the
        weights; `ElmoCharacterEncoder.clear_word_cache` drops it.
        """
        ids = torch.as_tensor(encode_words(list(words) + ["<S>", "</S>"], self.config.max_characters_per_token))
        return self.char_encoder.cache_words(ids.to(self.char_encoder.projection.weight.device))

    # -- input checks --------------------------------------------------------------------------------------------
    def _check_inputs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Validate the inputs and return the token mask (B, T) bool.

        Shapes and dtypes are always checked. The value checks (id range, mask against ids) read tensor values,
        which waits for the GPU: they run in eval mode only, not in training steps, whose data the pretraining
        pipeline builds itself.
        """
        width = self.config.max_characters_per_token
        check_values = not self.training
        if not isinstance(input_ids, torch.Tensor):
            raise ValueError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}.")
        if input_ids.dim() != 3 or input_ids.shape[-1] != width:
            raise ValueError(
                f"input_ids must have shape (batch, tokens, {width}) (character ids from ElmoTokenizer), "
                f"got {tuple(input_ids.shape)}."
            )
        if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool or input_ids.is_complex():
            raise ValueError(f"input_ids must hold integer character ids, got dtype {input_ids.dtype}.")
        if input_ids.shape[0] == 0:
            raise ValueError("empty batch: input_ids has batch size 0.")
        if check_values and input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) > MAX_CHARACTER_ID):
            bad = input_ids[(input_ids < 0) | (input_ids > MAX_CHARACTER_ID)][0].item()
            raise ValueError(f"character id {bad} is out of range: ids must be in [0, {MAX_CHARACTER_ID}].")
        present = (input_ids > 0).any(dim=-1)  # (B, T)
        if attention_mask is None:
            return present
        if tuple(attention_mask.shape) != tuple(present.shape):
            raise ValueError(
                f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids has {tuple(present.shape)} tokens."
            )
        mask = attention_mask.bool()
        holes = mask & ~present
        if check_values and holes.any():
            b, t = holes.nonzero()[0].tolist()
            raise ValueError(f"attention_mask marks token {t} of sentence {b} as present, but its character ids are all 0.")
        return mask

    # -- the biLM ------------------------------------------------------------------------------------------------
    def run_bilm(self, input_ids: torch.Tensor, mask: torch.Tensor, add_sentence_boundaries: bool = True):
        """Run the biLM on left-aligned tokens.

        input_ids (B, T, C) with ``mask`` (B, T) a valid prefix per row. Returns ``(embeddings (B, T', P), layers
        [L tensors (B, T', 2P)], mask' (B, T'))`` where T' = T + 2 when boundaries are added (``<S>`` at 0, ``</S>``
        after each row's last token) and T otherwise.
        """
        lengths = mask.sum(dim=1)
        if add_sentence_boundaries:
            batch, steps, width = input_ids.shape
            ids = input_ids.new_zeros(batch, steps + 2, width)
            ids[:, 1:-1] = input_ids * mask.unsqueeze(-1).to(input_ids.dtype)
            # Every row gets <S> and </S>, an empty one too (as AllenNLP does: it matters for the carried state).
            # (Built here, not kept in buffers: transformers 5 creates models on the meta device and would leave
            # non-persistent buffers uninitialised.)
            ids[:, 0] = torch.as_tensor(sentence_marker_char_ids(BEGINNING_OF_SENTENCE_CHARACTER, width),
                                        dtype=ids.dtype, device=ids.device)
            ids[torch.arange(batch, device=ids.device), lengths + 1] = torch.as_tensor(
                sentence_marker_char_ids(END_OF_SENTENCE_CHARACTER, width), dtype=ids.dtype, device=ids.device
            )
            lengths = lengths + 2
            input_ids = ids
            mask = torch.arange(steps + 2, device=ids.device).unsqueeze(0) < lengths.unsqueeze(1)
        batch, steps, width = input_ids.shape
        encoded = self.char_encoder(input_ids[mask])  # only present tokens are encoded: padding stays zero
        embeddings = encoded.new_zeros(batch, steps, self.config.hidden_size)  # encoder's dtype (autocast: bf16)
        embeddings[mask] = encoded
        layers = self.encoder(embeddings, mask)
        return embeddings, layers, mask

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        add_sentence_boundaries: bool = True,
        **kwargs,
    ) -> ElmoModelOutput | tuple:
        r"""
        Args:
            input_ids: character ids (batch, tokens, 50) from `ElmoTokenizer` (0 rows = no token).
            attention_mask: (batch, tokens) 1 for tokens, 0 for padding; derived from ``input_ids`` when omitted.
            output_hidden_states: also return all L + 1 layers.
            add_sentence_boundaries: add ``<S>``/``</S>`` around each sentence (and strip them from the outputs).
                `False` when the input already holds them where wanted (fixed-window language-model training).
        """
        if input_ids is None:
            raise ValueError("ElmoModel needs input_ids (character ids of shape (batch, tokens, 50)).")
        for key in kwargs:
            if key not in ("token_type_ids", "position_ids"):
                raise TypeError(f"ElmoModel.forward() got an unexpected keyword argument {key!r}.")
        output_hidden_states = output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        mask = self._check_inputs(input_ids, attention_mask)
        batch, steps = mask.shape

        # Left padding or holes: move each row's tokens to the front, keeping their order, and move back at the end.
        lengths = mask.sum(dim=1)
        positions = torch.arange(steps, device=mask.device).unsqueeze(0)
        aligned = bool((mask == (positions < lengths.unsqueeze(1))).all())
        order = None
        if not aligned:
            order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)  # (B, T) valid positions first
            input_ids = input_ids.gather(1, order.unsqueeze(-1).expand_as(input_ids))
            mask = positions < lengths.unsqueeze(1)

        embeddings, layers, full_mask = self.run_bilm(input_ids, mask, add_sentence_boundaries)
        all_layers = [torch.cat([embeddings, embeddings], dim=-1)] + layers
        if add_sentence_boundaries:
            all_layers = [layer[:, 1:-1] for layer in all_layers]  # drop <S>; </S> sits at len + 1 and is masked
        keep = mask.unsqueeze(-1).to(all_layers[0].dtype)
        all_layers = [layer * keep for layer in all_layers]
        if order is not None:
            inverse = torch.argsort(order, dim=1)
            all_layers = [layer.gather(1, inverse.unsqueeze(-1).expand_as(layer)) for layer in all_layers]
            mask = mask.gather(1, inverse)
        if not self.training and not torch.isfinite(all_layers[-1]).all():
            raise FloatingPointError("ElmoModel produced NaN or infinite values: the weights are probably corrupt.")
        hidden_states = tuple(all_layers) if output_hidden_states else None
        out_mask = mask.long()
        if not return_dict:
            return tuple(v for v in (all_layers[-1], hidden_states, out_mask) if v is not None)
        return ElmoModelOutput(last_hidden_state=all_layers[-1], hidden_states=hidden_states, attention_mask=out_mask)


# ---------------------------------------------------------------------------------------------------------------
# 5. Heads
# ---------------------------------------------------------------------------------------------------------------
def _log_uniform_sample(vocab_size: int, num_samples: int, device: torch.device, generator=None):
    """Sample word ids from the log-uniform (Zipfian) distribution P(k) = log((k+2)/(k+1)) / log(V+1), with replacement.

    Returns the ids and their log expected counts ``log(num_samples * P(k))`` (the log-Q correction). Word ids must be
    sorted by decreasing frequency for this proposal to fit (the vocabulary builder does that).
    """
    u = torch.rand(num_samples, device=device, generator=generator)
    ids = (torch.exp(u * math.log(vocab_size + 1)) - 1).floor().long().clamp_(0, vocab_size - 1)
    return ids, _log_expected_count(ids, vocab_size, num_samples)


def _log_expected_count(ids: torch.Tensor, vocab_size: int, num_samples: int) -> torch.Tensor:
    ids = ids.double()
    probability = (torch.log(ids + 2) - torch.log(ids + 1)) / math.log(vocab_size + 1)
    return torch.log(num_samples * probability).float()


class ElmoForBidirectionalLM(ElmoPreTrainedModel):
    """ELMo with its pretraining objective: a forward LM predicts the next word, a backward LM the previous one.

    One softmax (``softmax.weight`` (V, P), ``softmax.bias`` (V)) is shared by both directions; the loss is the mean
    of the two directions' mean negative log-likelihoods. In training with ``config.lm_softmax == "sampled"`` a
    sampled softmax is used: ``num_negative_samples`` words drawn from a log-uniform (Zipfian) proposal, one sample
    per batch shared by both directions, accidental hits removed, and the sampled logits corrected by the log of
    their expected counts (log-Q), so that ``log(exp(true) + sum_s exp(logit_s) / Q_s)`` estimates the full
    normaliser and the loss estimates the full-softmax loss. Otherwise, and always in eval mode, the exact full
    softmax is computed, in chunks over the vocabulary so memory stays bounded.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        if config.vocab_size <= 4:
            raise ValueError(
                f"ElmoForBidirectionalLM needs a word vocabulary, but config.vocab_size={config.vocab_size} "
                "(only the special words); build a vocabulary first."
            )
        self.elmo = ElmoModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.softmax = nn.Linear(config.hidden_size, config.vocab_size)
        self.softmax_chunk_size = 32768
        self.post_init()

    def _targets(self, labels: torch.Tensor, mask: torch.Tensor, add_sentence_boundaries: bool) -> torch.Tensor:
        """Word ids aligned with the biLM positions (B, T'), -100 where nothing is to be predicted."""
        labels = labels.masked_fill(~mask, -100)
        if not add_sentence_boundaries:
            return labels
        lengths = mask.sum(dim=1)
        batch, steps = labels.shape
        targets = labels.new_full((batch, steps + 2), -100)
        targets[:, 1:-1] = labels
        nonempty = lengths > 0
        targets[nonempty, 0] = self.config.bos_token_id
        rows = nonempty.nonzero().squeeze(1)
        targets[rows, lengths[rows] + 1] = self.config.eos_token_id
        return targets

    def full_softmax_nll(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Exact -log p(target | hidden) for hidden (N, P), targets (N,), chunked over the vocabulary."""
        weight, bias = self.softmax.weight, self.softmax.bias
        log_normaliser = None
        for start in range(0, weight.shape[0], self.softmax_chunk_size):
            logits = F.linear(hidden, weight[start : start + self.softmax_chunk_size], bias[start : start + self.softmax_chunk_size])
            chunk = torch.logsumexp(logits.float(), dim=-1)
            log_normaliser = chunk if log_normaliser is None else torch.logaddexp(log_normaliser, chunk)
        target_logit = (hidden * weight[targets]).sum(-1) + bias[targets]
        return log_normaliser - target_logit.float()

    def sampled_softmax_nll(self, hiddens: list[torch.Tensor], targets: list[torch.Tensor]) -> list[torch.Tensor]:
        """Sampled-softmax losses for several (hidden (N, P), targets (N,)) pairs sharing one negative sample."""
        vocab = self.config.vocab_size
        num_samples = self.config.num_negative_samples
        sampled, sampled_log_q = _log_uniform_sample(vocab, num_samples, hiddens[0].device)
        sampled_w, sampled_b = self.softmax.weight[sampled], self.softmax.bias[sampled]  # (S, P), (S,)
        losses = []
        for hidden, target in zip(hiddens, targets):
            # The true word enters with its exact logit; the sample estimates the rest of the normaliser by
            # importance sampling (log-Q correction), so the loss estimates the full-softmax loss (TF's
            # sampled_softmax_loss also subtracts log Q from the true logit, which changes the loss's value).
            true_logit = (hidden * self.softmax.weight[target]).sum(-1) + self.softmax.bias[target]
            sample_logits = F.linear(hidden, sampled_w, sampled_b) - sampled_log_q.to(hidden.dtype)  # (N, S)
            sample_logits = sample_logits.masked_fill(sampled.unsqueeze(0) == target.unsqueeze(1), float("-inf"))
            logits = torch.cat([true_logit.unsqueeze(1), sample_logits], dim=1).float()
            losses.append(torch.logsumexp(logits, dim=1) - logits[:, 0])
        return losses

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        add_sentence_boundaries: bool = True,
        return_dict: bool | None = None,
        **kwargs,
    ) -> ElmoBidirectionalLMOutput | tuple:
        r"""
        Args:
            input_ids / attention_mask: as for `ElmoModel` (right padding).
            labels: word ids (batch, tokens) of the input words, -100 where nothing is to be predicted (padding).
                With boundaries added, ``<S>`` and ``</S>`` are added to the targets: the forward LM predicts
                w_1..w_n, ``</S>`` and the backward LM ``<S>``, w_1..w_n.
            add_sentence_boundaries: see `ElmoModel.forward`; `False` for fixed windows of a token stream, where the
                forward LM predicts position t+1 and the backward LM position t-1 within the window.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        mask = self.elmo._check_inputs(input_ids, attention_mask)
        lengths = mask.sum(dim=1)
        if not self.training and not bool((mask == (torch.arange(mask.shape[1], device=mask.device) < lengths.unsqueeze(1))).all()):
            raise ValueError("ElmoForBidirectionalLM needs right-padded input (tokens first, then padding).")
        embeddings, layers, full_mask = self.elmo.run_bilm(input_ids, mask, add_sentence_boundaries)
        top = layers[-1]  # (B, T', 2P)
        output = ElmoBidirectionalLMOutput(last_hidden_state=top)
        if labels is not None:
            if tuple(labels.shape) != tuple(mask.shape):
                raise ValueError(f"labels must have shape {tuple(mask.shape)} (batch, tokens), got {tuple(labels.shape)}.")
            targets = self._targets(labels.long(), mask, add_sentence_boundaries)
            if not self.training and targets.numel() and int(targets.max()) >= self.config.vocab_size:
                raise ValueError(f"label {int(targets.max())} is outside the vocabulary of {self.config.vocab_size} words.")
            P = self.config.hidden_size
            top = self.dropout(top)
            forward_hidden, backward_hidden = top[:, :-1, :P], top[:, 1:, P:]
            forward_targets, backward_targets = targets[:, 1:], targets[:, :-1]
            # a prediction needs a real word at both ends: the reading position and the predicted position
            forward_source, backward_source = full_mask[:, :-1], full_mask[:, 1:]
            selected = []
            for hidden, target, source in (
                (forward_hidden, forward_targets, forward_source),
                (backward_hidden, backward_targets, backward_source),
            ):
                keep = (target != -100) & source
                selected.append((hidden[keep], target[keep]))
            if self.training and self.config.lm_softmax == "sampled":
                nlls = self.sampled_softmax_nll([h for h, _ in selected], [t for _, t in selected])
            else:
                nlls = [self.full_softmax_nll(h, t) for h, t in selected]
            counts = [torch.tensor(t.numel(), device=top.device) for _, t in selected]
            sums = [nll.sum() for nll in nlls]
            means = [s / c.clamp_min(1) for s, c in zip(sums, counts)]
            output.loss = 0.5 * (means[0] + means[1])
            output.forward_loss, output.backward_loss = means
            output.forward_nll_sum, output.backward_nll_sum = sums
            output.num_forward_targets, output.num_backward_targets = counts
        if not return_dict:
            return output.to_tuple()
        return output


class _ElmoHeadMixin:
    """Shared by the task heads: frozen-or-not biLM, cached features, the scalar mix."""

    def _build_mix(self, config: ElmoConfig) -> None:
        self.scalar_mix = ElmoScalarMix(
            config.num_representation_layers,
            config.num_output_representations,
            config.scalar_mix_layer_norm,
            config.scalar_mix_parameters,
        )
        self.dropout = nn.Dropout(config.classifier_dropout)

    def _apply_freeze(self) -> None:
        for parameter in self.elmo.parameters():
            parameter.requires_grad = not self.config.freeze_elmo
        if self.config.freeze_elmo:
            self.elmo.eval()

    def set_elmo_trainable(self, trainable: bool) -> None:
        """Unfreeze (``True``) or freeze (``False``) the biLM; a frozen biLM stays in eval mode (no dropout)."""
        self.config.freeze_elmo = not trainable
        self._apply_freeze()

    def train(self, mode: bool = True):
        super().train(mode)
        if self.config.freeze_elmo:
            self.elmo.eval()
        return self

    def _layers(self, input_ids, attention_mask, elmo_hidden_states):
        """All L + 1 layers (B, L + 1, T, 2P) and the mask (B, T), from the biLM or from cached features."""
        if elmo_hidden_states is not None:
            expected = (self.config.num_representation_layers, self.config.output_size)
            if elmo_hidden_states.dim() != 4 or (elmo_hidden_states.shape[1], elmo_hidden_states.shape[3]) != expected:
                raise ValueError(
                    f"elmo_hidden_states must have shape (batch, {expected[0]}, tokens, {expected[1]}), "
                    f"got {tuple(elmo_hidden_states.shape)}."
                )
            if attention_mask is None:
                raise ValueError("cached elmo_hidden_states need their attention_mask.")
            if tuple(attention_mask.shape) != (elmo_hidden_states.shape[0], elmo_hidden_states.shape[2]):
                raise ValueError(
                    f"attention_mask has shape {tuple(attention_mask.shape)}, but the cached features have "
                    f"{elmo_hidden_states.shape[0]} sentences of {elmo_hidden_states.shape[2]} tokens."
                )
            dtype = self.scalar_mix.gamma.dtype
            return elmo_hidden_states.to(dtype), attention_mask.bool()
        if input_ids is None:
            raise ValueError("pass input_ids (character ids) or cached elmo_hidden_states.")
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.config.freeze_elmo):
            out = self.elmo(input_ids, attention_mask=attention_mask, output_hidden_states=True, return_dict=True)
        return torch.stack(out.hidden_states, dim=1), out.attention_mask.bool()


class ElmoForSequenceClassification(_ElmoHeadMixin, ElmoPreTrainedModel):
    """ELMo features -> scalar mix -> masked pooling -> dropout -> linear.

    Follows transformers' ``problem_type`` conventions (regression, single-label, multi-label). With
    ``config.freeze_elmo`` (the default) the biLM gets no gradient and stays in eval mode while the head trains.
    It also trains from cached features: pass ``elmo_hidden_states`` (batch, L + 1, tokens, 2P) instead of
    ``input_ids``.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.elmo = ElmoModel(config)
        self._build_mix(config)
        width = config.output_size * (2 if config.classifier_pooling == "mean_max" else 1)
        self.classifier = nn.Linear(width, config.num_labels)
        self.post_init()
        self._apply_freeze()

    def pool(self, mixed: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T, D), (B, T) -> (B, D) (or 2D for mean_max). Empty sentences pool to zeros."""
        m = mask.unsqueeze(-1).to(mixed.dtype)
        count = m.sum(dim=1).clamp_min(1.0)
        mean = (mixed * m).sum(dim=1) / count
        kind = self.config.classifier_pooling
        if kind == "mean":
            return mean
        if kind in ("max", "mean_max"):
            maximum = mixed.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)
            maximum = torch.where(mask.any(dim=1, keepdim=True), maximum, torch.zeros_like(maximum))
            return maximum if kind == "max" else torch.cat([mean, maximum], dim=-1)
        lengths = mask.sum(dim=1)
        index = torch.zeros_like(lengths) if kind == "first" else (lengths - 1).clamp_min(0)
        return mixed[torch.arange(mixed.shape[0], device=mixed.device), index] * (lengths > 0).unsqueeze(-1).to(mixed.dtype)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        elmo_hidden_states: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput | tuple:
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        layers, mask = self._layers(input_ids, attention_mask, elmo_hidden_states)
        mixed = self.scalar_mix(layers, mask)[0]
        logits = self.classifier(self.dropout(self.pool(mixed, mask)))
        loss = None
        if labels is not None:
            loss = self._loss(logits, labels)
        hidden_states = tuple(layers.unbind(1)) if output_hidden_states else None
        if not return_dict:
            return tuple(v for v in (loss, logits, hidden_states) if v is not None)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=hidden_states)

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.config.problem_type is None:
            if self.num_labels == 1:
                self.config.problem_type = "regression"
            elif labels.dtype in (torch.long, torch.int) and labels.dim() == 1:
                self.config.problem_type = "single_label_classification"
            else:
                self.config.problem_type = "multi_label_classification"
        if self.config.problem_type == "regression":
            return F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype).view(-1)) if self.num_labels == 1 else F.mse_loss(logits, labels.to(logits.dtype))
        if self.config.problem_type == "single_label_classification":
            if labels.numel() and (int(labels.max()) >= self.num_labels or int(labels.min()) < 0):
                raise ValueError(f"label {int(labels.max()) if int(labels.max()) >= self.num_labels else int(labels.min())} is outside [0, {self.num_labels}).")
            return F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


class ElmoForTokenClassification(_ElmoHeadMixin, ElmoPreTrainedModel):
    """ELMo features -> scalar mix -> dropout -> linear, per token (tagging). Labels -100 are ignored."""

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.elmo = ElmoModel(config)
        self._build_mix(config)
        self.classifier = nn.Linear(config.output_size, config.num_labels)
        self.post_init()
        self._apply_freeze()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        elmo_hidden_states: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> TokenClassifierOutput | tuple:
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        layers, mask = self._layers(input_ids, attention_mask, elmo_hidden_states)
        mixed = self.scalar_mix(layers, mask)[0]
        logits = self.classifier(self.dropout(mixed))  # (B, T, num_labels)
        loss = None
        if labels is not None:
            if tuple(labels.shape) != tuple(mask.shape):
                raise ValueError(f"labels must have shape {tuple(mask.shape)} (batch, tokens), got {tuple(labels.shape)}.")
            labels = labels.masked_fill(~mask, -100)
            loss = F.cross_entropy(logits.reshape(-1, self.num_labels), labels.reshape(-1).long(), ignore_index=-100)
        hidden_states = tuple(layers.unbind(1)) if output_hidden_states else None
        if not return_dict:
            return tuple(v for v in (loss, logits, hidden_states) if v is not None)
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=hidden_states)


__all__ = [
    "ElmoHighway",
    "ElmoCharacterEncoder",
    "ElmoLstmLayer",
    "ElmoBiLstm",
    "ElmoScalarMix",
    "ElmoPreTrainedModel",
    "ElmoModelOutput",
    "ElmoBidirectionalLMOutput",
    "ElmoModel",
    "ElmoForBidirectionalLM",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
]
