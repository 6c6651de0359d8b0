"""`torch.export` and ONNX (through the dynamo exporter) of every ELMo class in eval mode, at a fixed shape and with
dynamic batch and word axes: the exported program computes what the eager model computes, on the example inputs and
on other inputs (other words, other lengths, left padding; with dynamic axes, more and fewer sentences and words),
and holds only standard operators."""

from __future__ import annotations

import pytest
import torch
from support import assert_same_numbers
from support.model import SENTENCES, ElmoModelTester
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from modeling_elmo import ElmoForBidirectionalLM, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel
from modeling_elmo.acceleration.packed_kernels import RecurrencePlan
from modeling_elmo.export import dynamic_words, onnx_translates_scan

pytestmark = pytest.mark.slow  # torch.export and the dynamo ONNX exporter trace and compile the model

#: The tolerance the exported program must meet against the eager model (relative to the largest value).
TOLERANCE = 1e-5
#: The outputs compared per class (the heads' logits, the biLM's layers).
OUTPUTS = {
    ElmoModel: "last_hidden_state",
    ElmoForBidirectionalLM: "last_hidden_state",
    ElmoForSequenceClassification: "logits",
    ElmoForTokenClassification: "logits",
}
#: Four sentences padded to 6 tokens, as `SENTENCES`, with other words and lengths (one row left-padded).
OTHER_SENTENCES = [["Rivers", "rise"], ["Seeds", "grow", "in", "the", "warm", "soil"], ["Yes"], ["A", "b", "c", "d"]]
#: Batches of other shapes than `SENTENCES` (4 x 6): more sentences and words, fewer, a single word.
OTHER_SHAPES = [
    [["Seeds", "grow", "in", "the", "warm", "soil", "of", "the", "valley", "."], ["Yes"], *OTHER_SENTENCES],
    [["Rivers", "rise"], ["A", "b", "c"]],
    [["Yes"]],
]


def dynamic_axes(names=("input_ids", "attention_mask")) -> dict:
    """Dynamic batch and word axes for each input (the character axis is the config's, fixed)."""
    batch, words = torch.export.Dim("batch", min=1, max=4096), torch.export.Dim("words", min=1, max=4096)
    return {name: {0: batch, 1: words} for name in names}


def inputs(tester: ElmoModelTester, sentences, left_padded_row: int | None = None):
    enc = tester.encode(sentences)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    if left_padded_row is not None:  # move a row's tokens to the end: padding first
        shift = int(mask.shape[1] - mask[left_padded_row].sum())
        ids[left_padded_row] = ids[left_padded_row].roll(shift, dims=0)
        mask[left_padded_row] = mask[left_padded_row].roll(shift, dims=0)
    return ids, mask


def exported_and_eager(cls, tester, example, others, **kwargs):
    """(outputs of the exported program, outputs of the eager model) on ``example`` and each of ``others``."""
    model = tester.model(cls, seed=4, cell_clip=3.0, proj_clip=3.0).eval()
    program = torch.export.export(model, example, kwargs=kwargs)
    results = []
    for args in (example, *others):
        with torch.no_grad():
            results.append((program.module()(*args, **kwargs), model(*args, **kwargs)))
    return program, results


def standard_operators_only(program: torch.export.ExportedProgram) -> None:
    targets = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert targets and not [t for t in targets if "mkl" in t or "mkldnn" in t], targets


@pytest.mark.parametrize("cls", list(OUTPUTS), ids=lambda c: c.__name__)
def test_exported_program_of_every_class_equals_the_eager_model_at_its_shape(cls):
    tester = ElmoModelTester(num_labels=3)
    example = inputs(tester, SENTENCES)
    # the biLM head reads right-padded input (its predictions sit at the boundary positions); the others any padding
    other = inputs(tester, OTHER_SENTENCES, left_padded_row=None if cls is ElmoForBidirectionalLM else 3)
    program, results = exported_and_eager(cls, tester, example, [other])
    standard_operators_only(program)
    for run, (exported, eager) in enumerate(results):
        name = OUTPUTS[cls]
        assert_same_numbers(exported[name], eager[name], rtol=TOLERANCE, what=f"{cls.__name__} {name}, input {run}")
        if "attention_mask" in eager:
            assert torch.equal(exported["attention_mask"], eager["attention_mask"])
    # the two inputs differ, and so do the outputs: nothing was frozen into the program from the example
    assert not torch.allclose(results[0][0][OUTPUTS[cls]], results[1][0][OUTPUTS[cls]])


@pytest.mark.parametrize("cls", [*OUTPUTS, "remote code"], ids=lambda c: getattr(c, "__name__", c))
def test_export_with_dynamic_batch_and_word_axes_runs_on_other_shapes_with_the_eager_outputs(cls, tmp_path):
    """Nothing in the trace reads a size of the example (a piece or step count, a block of steps): torch.export would
    refuse the dynamic dimensions otherwise; the one program runs on batches of other sizes and lengths. Also for a
    model loaded with ``trust_remote_code=True`` (its classes from its own code files)."""
    tester = ElmoModelTester(num_labels=3)
    model = tester.model(ElmoModel if cls == "remote code" else cls, seed=4, cell_clip=3.0, proj_clip=3.0).eval()
    if cls == "remote code":
        model.save_pretrained(tmp_path / "m")
        remote = get_class_from_dynamic_module("modeling_elmo.ElmoModel", str(tmp_path / "m"))  # the folder's code
        model, cls = remote.from_pretrained(tmp_path / "m").eval(), ElmoModel
        assert type(model).__module__.startswith("transformers_modules.")
    with dynamic_words(model):
        program = torch.export.export(model, inputs(tester, SENTENCES), dynamic_shapes=dynamic_axes())
    assert "recurrence_for" not in vars(model.base_model.encoder)  # as it was, outside
    standard_operators_only(program)
    assert len(program.range_constraints) == 2  # batch and words stay symbols
    name = OUTPUTS[cls]
    for sentences in OTHER_SHAPES:
        args = inputs(tester, sentences, left_padded_row=None if cls is ElmoForBidirectionalLM else len(sentences) - 1)
        with torch.no_grad():
            exported, eager = program.module()(*args), model(*args)
        assert exported[name].shape == eager[name].shape and eager[name].shape[0] == len(sentences)
        assert_same_numbers(exported[name], eager[name], rtol=TOLERANCE, what=f"{cls.__name__} {name}")


def test_the_shipped_form_exports_a_dynamic_batch_and_refuses_a_dynamic_word_axis_in_one_line():
    """Without `dynamic_words` (a model as the Hub files give it): a dynamic batch, the words fixed, runs on other
    batch sizes; a dynamic word axis is refused by name rather than fixed to the example's length."""
    tester = ElmoModelTester()
    model = tester.model(ElmoModel, seed=4, cell_clip=3.0, proj_clip=3.0).eval()
    example = inputs(tester, SENTENCES)
    batch = torch.export.Dim("batch", min=1, max=4096)
    program = torch.export.export(
        model, example, dynamic_shapes={"input_ids": {0: batch}, "attention_mask": {0: batch}}
    )
    for sentences in (OTHER_SENTENCES + OTHER_SENTENCES[:2], OTHER_SENTENCES[1:2]):  # 6 and 1 sentences of 6 words
        args = inputs(tester, sentences)
        assert args[1].shape[1] == example[1].shape[1] == 6
        with torch.no_grad():
            exported, eager = program.module()(*args), model(*args)
        assert_same_numbers(exported.last_hidden_state, eager.last_hidden_state, rtol=TOLERANCE, what="batch")
    if not hasattr(torch.compiler, "is_exporting"):
        pytest.skip("torch before 2.7 cannot tell an export from a compilation: the word axis is left to torch.export")
    with pytest.raises(ValueError, match=r"^torch\.export of a dynamic word axis: .*\.dynamic_words\(model\)"):
        torch.export.export(model, example, dynamic_shapes=dynamic_axes())


def test_exported_language_model_computes_the_eager_loss_from_labels():
    tester = ElmoModelTester()
    example, other = inputs(tester, SENTENCES), inputs(tester, OTHER_SENTENCES)
    words = torch.arange(24).view(4, 6) % 30 + 5
    labels = words.masked_fill(example[1] == 0, -100)
    model = tester.model(ElmoForBidirectionalLM, seed=4, cell_clip=3.0, proj_clip=3.0).eval()
    program = torch.export.export(model, example, kwargs={"labels": labels})
    for args in (example, other):
        run_labels = words.masked_fill(args[1] == 0, -100)
        with torch.no_grad():
            exported, eager = program.module()(*args, labels=run_labels), model(*args, labels=run_labels)
        for field in ("loss", "forward_nll_sum", "backward_nll_sum"):
            assert_same_numbers(exported[field], eager[field], rtol=TOLERANCE, what=field)
        assert int(exported["num_forward_targets"]) == int(eager["num_forward_targets"]) == int(args[1].sum()) + 4


def test_export_of_a_model_given_the_package_form_traces_public_operators_with_the_same_numbers(monkeypatch):
    """A model on the package's fast form (``config.use_packed_kernels``: packed oneDNN/MKL products for large
    models) is traced in the shipped public form (a program must run wherever torch runs), with the same numbers."""
    monkeypatch.setattr(RecurrencePlan, "PER_DIRECTION_FROM", 0)  # the large-model form on the tiny model
    tester = ElmoModelTester()
    example = inputs(tester, SENTENCES)
    model = tester.model(ElmoModel, seed=4, cell_clip=3.0, proj_clip=3.0).eval()
    assert model.config.use_packed_kernels is True
    program = torch.export.export(model, example)
    results = []
    for args in (example, inputs(tester, OTHER_SENTENCES, 1)):
        with torch.no_grad():
            results.append((program.module()(*args), model(*args)))
    standard_operators_only(program)
    for exported, eager in results:
        assert_same_numbers(exported.last_hidden_state, eager.last_hidden_state, rtol=TOLERANCE)


def test_onnx_export_through_dynamo_runs_in_onnxruntime_with_the_eager_outputs(tmp_path):
    pytest.importorskip("onnxscript", reason="ONNX export needs the optional packages onnx and onnxscript")
    onnxruntime = pytest.importorskip("onnxruntime", reason="running the ONNX model needs the optional onnxruntime")
    tester = ElmoModelTester()
    model = tester.model(ElmoModel, seed=4, cell_clip=3.0, proj_clip=3.0).eval()
    example = inputs(tester, SENTENCES)
    onnx_program = torch.onnx.export(
        model,
        example,
        dynamo=True,
        verbose=False,
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state", "attention_mask_out"],
    )
    onnx_program.save(str(tmp_path / "elmo.onnx"))
    session = onnxruntime.InferenceSession(str(tmp_path / "elmo.onnx"), providers=["CPUExecutionProvider"])
    for ids, mask in (example, inputs(tester, OTHER_SENTENCES, left_padded_row=3)):
        hidden, out_mask = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        with torch.no_grad():
            eager = model(ids, mask)
        assert_same_numbers(hidden, eager.last_hidden_state, rtol=TOLERANCE, what="ONNX last_hidden_state")
        assert (out_mask == eager.attention_mask.numpy()).all()


def test_onnx_export_with_dynamic_batch_and_word_axes_runs_in_onnxruntime_on_other_shapes(tmp_path):
    pytest.importorskip("onnxscript", reason="ONNX export needs the optional packages onnx and onnxscript")
    if not onnx_translates_scan():
        pytest.skip(f"torch {torch.__version__}'s ONNX exporter has no translation of scan (the word axis in ONNX)")
    onnxruntime = pytest.importorskip("onnxruntime", reason="running the ONNX model needs the optional onnxruntime")
    tester = ElmoModelTester()
    model = tester.model(ElmoModel, seed=4, cell_clip=3.0, proj_clip=3.0).eval()
    with dynamic_words(model):
        onnx_program = torch.onnx.export(
            model,
            inputs(tester, SENTENCES),
            dynamo=True,
            verbose=False,
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state", "attention_mask_out"],
            dynamic_shapes=dynamic_axes(),
        )
    onnx_program.save(str(tmp_path / "elmo.onnx"))
    session = onnxruntime.InferenceSession(str(tmp_path / "elmo.onnx"), providers=["CPUExecutionProvider"])
    for sentences in OTHER_SHAPES:
        ids, mask = inputs(tester, sentences, left_padded_row=len(sentences) - 1)
        hidden, out_mask = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        with torch.no_grad():
            eager = model(ids, mask)
        assert hidden.shape == tuple(eager.last_hidden_state.shape)
        assert_same_numbers(hidden, eager.last_hidden_state, rtol=TOLERANCE, what=f"ONNX, {tuple(mask.shape)}")
        assert (out_mask == eager.attention_mask.numpy()).all()


def test_an_onnx_export_of_a_dynamic_word_axis_where_onnx_cannot_translate_scan_is_one_line():
    pytest.importorskip("onnxscript", reason="ONNX export needs the optional packages onnx and onnxscript")
    if onnx_translates_scan():
        pytest.skip(f"torch {torch.__version__}'s ONNX exporter translates scan (the ONNX test above runs the export)")
    tester = ElmoModelTester()
    model = tester.model(ElmoModel, seed=4).eval()
    with pytest.raises(RuntimeError) as raised, dynamic_words(model):
        torch.onnx.export(model, inputs(tester, SENTENCES), dynamo=True, verbose=False, dynamic_shapes=dynamic_axes())
    message = str(raised.value)
    assert message == (
        f"torch {torch.__version__}'s ONNX exporter has no translation of scan, the dynamic word axis of "
        "dynamic_words: export it with torch.export.export, or to ONNX with torch >= 2.7 (or outside dynamic_words, "
        "with a fixed number of words)."
    )
    assert type(raised.value.__cause__).__name__ == "ConversionError"  # torch's own error stays as the cause
    assert "recurrence_for" not in vars(model.base_model.encoder)  # as it was, after the failure too


def test_a_model_loaded_as_remote_code_without_the_package_exports_and_runs_the_public_form(tmp_path):
    """The files shipped with a model, alone (the package unimportable): they run the public-API CPU form and
    export to a program equal to the eager model."""
    from support import run_without_package

    tester = ElmoModelTester()
    tester.model(ElmoModel, seed=4, cell_clip=3.0, proj_clip=3.0).save_pretrained(tmp_path / "m")
    ids, mask = inputs(tester, SENTENCES)
    torch.save({"ids": ids, "mask": mask}, tmp_path / "inputs.pt")
    report = run_without_package(
        """
        import json, sys, torch
        from transformers import AutoModel
        model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
        batch = torch.load(sys.argv[2], weights_only=True)
        program = torch.export.export(model, (batch["ids"], batch["mask"]))
        with torch.no_grad():
            exported = program.module()(batch["ids"], batch["mask"]).last_hidden_state
            eager = model(batch["ids"], batch["mask"]).last_hidden_state
        print(json.dumps({"module": type(model).__module__, "recurrence": model.encoder.recurrence,
                          "difference": float((exported - eager).abs().max()), "scale": float(eager.abs().max())}))
    """,
        tmp_path / "m",
        tmp_path / "inputs.pt",
        workdir=tmp_path / "work",
    )
    assert report["module"].startswith("transformers_modules.") and report["recurrence"] is None
    assert report["difference"] <= TOLERANCE * report["scale"] and report["scale"] > 0
