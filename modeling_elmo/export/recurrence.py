"""`scanned_lstm`: the shipped `stacked_lstm` as one ``scan`` over the words (torch's loop operator; ONNX ``Scan``),
which `torch.export` traces for any number of words; `dynamic_words`: a model exporting through it."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from ..modeling_elmo import ElmoBiLstm, lstm_step, stacked_lstm, stacked_state_and_weights


def scanned_lstm(inputs: torch.Tensor, valid: torch.Tensor, layers: Sequence[nn.Module], state=None):
    """`stacked_lstm` (same arguments, results and numbers), its steps as one ``scan``: the input products of all
    steps at once, then per step one ``bmm`` over both directions' recurrent weights and one over their projections."""
    from torch._higher_order_ops.scan import scan  # torch 2.6 and later; a prototype, not a public name

    dtype, cell_clip, proj_clip = inputs.dtype, layers[0].cell_clip, layers[0].proj_clip
    (h, c), weight_hh, project = stacked_state_and_weights(inputs, layers, state)

    def step(carry, xs):
        gates_t, valid_t = xs
        gates = gates_t.to(carry[0].dtype) + torch.bmm(carry[0].to(dtype), weight_hh)
        h, c, y = lstm_step(gates, *carry, valid_t, project, cell_clip, proj_clip)
        return (h, c), y

    gates_x = torch.stack([layer.input_transform(x) for x, layer in zip(inputs, layers, strict=True)], dim=1)
    (h, c), y = scan(step, (h, c), (gates_x, valid.unsqueeze(-1)))  # gates_x (T, D, B, 4H) -> y (T, D, B, P)
    return y.transpose(0, 1).to(dtype), (h, c)


def onnx_translates_scan() -> bool:
    """Whether this torch's dynamo ONNX exporter translates ``scan`` into ONNX ``Scan``: torch 2.6's does not (there
    a dynamic word axis reaches `torch.export`, not ONNX); 2.13 and 2.15 do."""
    try:
        from torch.onnx._internal.exporter._torchlib.ops import hop
    except ImportError:
        return False
    return hasattr(hop, "higher_order_scan")


def _fails_to_translate_scan(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is the ONNX exporter finding no translation of the ``scan`` operator."""
    while error is not None:
        if type(error).__name__ in ("DispatchError", "ConversionError") and "scan" in str(error).lower():
            return True
        error = error.__cause__ or error.__context__
    return False


def _scanned_recurrence_for(chosen, inputs: torch.Tensor, stateless: bool):
    """`scanned_lstm` where ``chosen`` (an `ElmoBiLstm`'s own choice) gives `stacked_lstm`: the package's, or the
    copy in the code files of a model loaded as remote code."""
    recurrence = chosen(inputs, stateless)
    return scanned_lstm if getattr(recurrence, "__name__", None) == stacked_lstm.__name__ else recurrence


@contextlib.contextmanager
def dynamic_words(model: nn.Module) -> Iterator[nn.Module]:
    """Within it, ``model`` (any ELMo class, also one loaded with ``trust_remote_code=True``) runs `scanned_lstm`
    where it would run `stacked_lstm`, without gradients, so that `torch.export.export(model, ...,
    dynamic_shapes=...)` and ``torch.onnx.export(..., dynamo=True)`` keep a dynamic word axis; the exported program
    keeps it after. Outside, the model is as it was. Models whose recurrence is the per-layer loop
    (``lstm_implementation="loop"``, adapters on the LSTM transforms) still export with a fixed number of words."""
    encoders = [module for module in model.modules() if type(module).__name__ == ElmoBiLstm.__name__]
    if not encoders:
        raise ValueError(f"{type(model).__name__} holds no ELMo biLSTM (an ElmoBiLstm module) to export.")
    for encoder in encoders:
        encoder.recurrence_for = functools.partial(_scanned_recurrence_for, encoder.recurrence_for)
    try:  # an export is inference: without gradients (torch 2.6's scan also refuses a carry gaining one)
        with torch.no_grad():
            yield model
    except Exception as error:
        if onnx_translates_scan() or not _fails_to_translate_scan(error):
            raise
        raise RuntimeError(
            f"torch {torch.__version__}'s ONNX exporter has no translation of scan, the dynamic word axis of "
            "dynamic_words: export it with torch.export.export, or to ONNX with torch >= 2.7 (or outside "
            "dynamic_words, with a fixed number of words)."
        ) from error
    finally:
        for encoder in encoders:
            del encoder.recurrence_for
