"""What `elmo pretrain` trains (`trainer.build_model`: the package's recurrence and fused softmax, the character CNN's
training max-pool) takes the same steps as the reference forms (the loop recurrence, the model's exact softmax and
the sampled softmax in autograd's operators, ``amax`` pooling): losses and every gradient, step by step, from the
same seeds, dropout included."""

import contextlib
import copy
from unittest import mock

import pytest
import torch
from support import assert_same_numbers
from support.model import SENTENCES, ElmoModelTester

from modeling_elmo import ElmoForBidirectionalLM
from modeling_elmo.acceleration import softmax_kernels
from modeling_elmo.modeling_elmo import ElmoCharacterEncoder
from modeling_elmo.pretraining import build_optimizer
from modeling_elmo.pretraining.trainer import build_model

STEPS = 3


def amax_convolve(self, embedded):
    """The character CNN's pooling as the inference form computes it (``amax``), also under autograd."""
    x = embedded.transpose(1, 2)
    return torch.cat([self.activation(conv(x).amax(dim=-1)) for conv in self.convolutions], dim=-1)


@contextlib.contextmanager
def reference_forms():
    with (
        mock.patch.object(softmax_kernels, "applies", lambda *args: False),
        mock.patch.object(ElmoCharacterEncoder, "convolve", amax_convolve),
    ):
        yield


def train_steps(model, batches, reference: bool):
    """(loss, {name: gradient}) of each of the steps on ``batches`` (Adagrad 0.2, clipping at 10, as pretraining)."""
    optimizer, record = build_optimizer(model, "adagrad", 0.2, device_type="cpu"), []
    for step, batch in enumerate(batches):
        torch.manual_seed(100 + step)  # dropout and the negative sample
        with reference_forms() if reference else contextlib.nullcontext():
            loss = model(**batch).loss
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        record.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return record


@pytest.mark.parametrize(
    "softmax", [dict(lm_softmax="full"), dict(lm_softmax="sampled", num_negative_samples=30)], ids=["full", "sampled"]
)
def test_pretraining_steps_match_the_reference_forms_step_by_step(softmax):
    tester = ElmoModelTester(vocab_size=60, hidden_dropout_prob=0.1, cell_clip=0.5, proj_clip=0.5, **softmax)
    enc = tester.encode(SENTENCES)
    batches = []
    for seed in range(STEPS):
        labels = torch.randint(4, 60, enc["attention_mask"].shape, generator=torch.Generator().manual_seed(seed))
        batches.append({**enc, "labels": labels.masked_fill(enc["attention_mask"] == 0, -100)})
    torch.manual_seed(0)
    fast = build_model(copy.deepcopy(tester.config)).train()  # what `elmo pretrain` trains
    reference = ElmoForBidirectionalLM(copy.deepcopy(tester.config)).train()
    reference.load_state_dict(fast.state_dict())
    reference.config.lstm_implementation = "loop"
    if softmax["lm_softmax"] == "sampled":
        from modeling_elmo.pretraining.sampled_softmax import use_configured_softmax

        use_configured_softmax(reference)  # its plain form, under `reference_forms`
    chosen = fast.elmo.encoder.recurrence_for(torch.zeros(2, 3, 1, tester.config.projection_dim), True)
    assert chosen.__name__ == "packed_lstm" and fast.config.lstm_implementation == "auto"
    expected, actual = train_steps(reference, batches, True), train_steps(fast, batches, False)
    for step, ((loss, grads), (ref_loss, ref_grads)) in enumerate(zip(actual, expected, strict=True)):
        assert_same_numbers(loss, ref_loss, what=f"loss of step {step}")
        assert grads.keys() == ref_grads.keys()
        for name, grad in grads.items():
            # 1e-5 of the largest entry: sums over hundreds of terms in another order (one ulp of float32 is 1.2e-7)
            assert_same_numbers(grad, ref_grads[name], rtol=1e-5, what=f"gradient of {name} at step {step}")
