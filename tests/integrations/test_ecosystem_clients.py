"""Hugging Face clients against ELMo folders loaded WITHOUT this package (the classes come from the folder's own code,
``trust_remote_code=True``): each section runs one client in a fresh interpreter (`support.run_without_package`) and
compares what it returns with an independent computation in this process."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from support import assert_same_numbers, in_the_public_form, run_without_package
from support.clients import (
    TAGGED_TEXT,
    assert_same_entities,
    expected_entities,
    saved_tagger,
    saved_with_tokenizer,
    tiny_config_with,
)
from support.model import SENTENCES as MODEL_SENTENCES
from support.model import clipping_model, write_legacy_folder

from modeling_elmo import (
    ElmoConfig,
    ElmoForBidirectionalLM,
    ElmoForSequenceClassification,
    ElmoModel,
    ElmoTokenizer,
    save_model_folder,
)
from modeling_elmo.conversion.upgrade import upgrade_folder

# --- h-tok: pipelines and sentence-transformers ---


TOKEN_CLASSIFICATION = """
    import json, sys
    from transformers import pipeline
    tagger = pipeline("token-classification", model=sys.argv[1], trust_remote_code=True)
    entities = tagger(sys.argv[2], ignore_labels=[])
    grouped = tagger(sys.argv[2], ignore_labels=[], aggregation_strategy="simple")
    as_json = lambda found: [{k: (float(v) if k == "score" else v) for k, v in e.items()} for e in found]
    print(json.dumps({"class": type(tagger).__name__, "entities": as_json(entities), "grouped": as_json(grouped)}))
"""


@pytest.mark.slow
def test_token_classification_pipeline_gives_one_entity_per_word_without_the_package(tmp_path):
    model, folder = saved_tagger(tmp_path / "tagger")
    got = run_without_package(TOKEN_CLASSIFICATION, folder, TAGGED_TEXT, workdir=tmp_path / "fresh")
    assert got["class"] == "ElmoTokenClassificationPipeline"
    expected = expected_entities(model)
    assert_same_entities(got["entities"], expected)
    # "simple" aggregation groups runs of whole words of one entity type, spanning its first to its last word
    assert [word for group in got["grouped"] for word in group["word"].split()] == [e["word"] for e in expected]
    position = 0
    for group in got["grouped"]:
        members = expected[position : position + len(group["word"].split())]
        assert {m["entity"].split("-")[-1] for m in members} == {group["entity_group"]}
        assert (group["start"], group["end"]) == (members[0]["start"], members[-1]["end"])
        position += len(members)


FEATURE_AND_TEXT_PIPELINES = """
    import json, sys
    from transformers import pipeline
    extractor = pipeline("feature-extraction", model=sys.argv[1], trust_remote_code=True)
    classifier = pipeline("text-classification", model=sys.argv[2], trust_remote_code=True)
    print(json.dumps({"features": extractor(sys.argv[3])[0], "classified": classifier(sys.argv[3], top_k=None)}))
"""


@pytest.mark.slow
def test_feature_extraction_and_text_classification_pipelines_without_the_package(tmp_path):
    torch.manual_seed(0)
    encoder = ElmoModel(tiny_config_with()).eval()
    classifier = ElmoForSequenceClassification(tiny_config_with(num_labels=2)).eval()
    folders = (
        saved_with_tokenizer(encoder, tmp_path / "encoder"),
        saved_with_tokenizer(classifier, tmp_path / "classifier"),
    )
    got = run_without_package(FEATURE_AND_TEXT_PIPELINES, *folders, TAGGED_TEXT, workdir=tmp_path / "fresh")
    encoder, classifier = in_the_public_form(encoder), in_the_public_form(classifier)
    encoding = ElmoTokenizer()(TAGGED_TEXT, return_tensors="pt")
    with torch.no_grad():
        features = encoder(**encoding).last_hidden_state[0]
        probabilities = classifier(**encoding).logits[0].softmax(-1)
    assert_same_numbers(got["features"], features, what="feature-extraction")
    scores = {entry["label"]: entry["score"] for entry in got["classified"]}
    assert_same_numbers([scores[classifier.config.id2label[i]] for i in range(2)], probabilities, what="classifier")


SENTENCE_TRANSFORMERS = """
    import json, sys
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(sys.argv[1], trust_remote_code=True, device="cpu")
    vectors = model.encode(json.loads(sys.argv[2]))
    print(json.dumps({"vectors": vectors.tolist(), "dimension": model.get_sentence_embedding_dimension()}))
"""
ST_SENTENCES = ["The river bank .", "A bank", "Ein Haus am See , und ein Boot !"]


def sentence_vectors(model: ElmoModel, sentences: list[str]) -> torch.Tensor:
    """The TF Hub ELMo ``default`` output, computed here: the mean over each sentence's words of the top layer."""
    encoding = ElmoTokenizer()(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        top = model(**encoding).last_hidden_state
    mask = encoding["attention_mask"].unsqueeze(-1).to(top.dtype)
    return (top * mask).sum(1) / mask.sum(1)


def output_width(config: ElmoConfig) -> int:
    """The width of ``last_hidden_state``, measured."""
    with torch.no_grad():
        return ElmoModel(config).eval()(**ElmoTokenizer()("a", return_tensors="pt")).last_hidden_state.shape[-1]


@pytest.fixture(scope="module")
def sentence_transformer_run(tmp_path_factory):
    """`SENTENCE_TRANSFORMERS` on a folder saved by `save_model_folder`, and the model saved."""
    tmp_path = tmp_path_factory.mktemp("sentence-transformers")
    torch.manual_seed(0)
    model = ElmoModel(tiny_config_with()).eval()
    save_model_folder(model, ElmoTokenizer(), tmp_path / "encoder")
    got = run_without_package(
        SENTENCE_TRANSFORMERS, tmp_path / "encoder", json.dumps(ST_SENTENCES), workdir=tmp_path / "fresh"
    )
    return in_the_public_form(model), got


@pytest.mark.slow
def test_sentence_transformer_encodes_the_mean_of_the_top_layer_without_the_package(sentence_transformer_run):
    model, got = sentence_transformer_run
    assert_same_numbers(got["vectors"], sentence_vectors(model, ST_SENTENCES), what="sentence vectors")


@pytest.mark.slow
def test_sentence_transformer_declares_the_dimension_it_returns(sentence_transformer_run):
    model, got = sentence_transformer_run
    assert got["dimension"] == len(got["vectors"][0]) == output_width(model.config)


# --- h-config: config.hidden_size, freezing, PEFT task types, resize, folders written before projection_dim ---

TINY = dict(
    projection_dim=8,
    cell_size=16,
    char_embedding_dim=4,
    char_cnn_filters=[[1, 4], [2, 8]],
    num_highway_layers=1,
    num_labels=3,
    classifier_dropout=0.0,
)
SENTENCES = [["The", "bank", "closed"], ["A", "river", "bank", "flooded", "twice"]]

PEFT_CLIENT = r"""
import json, sys
import torch
from peft import LoraConfig, PeftModel, TaskType, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer

folder, work = sys.argv[1], sys.argv[2]
sentences = json.loads(sys.argv[3])
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
batch = dict(tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt"))
report, tensors = {}, {}
head = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
report["hidden_size"] = head.config.hidden_size
report["trainable"] = head.num_parameters(only_trainable=True)
report["all"] = head.num_parameters()
try:
    head.resize_token_embeddings(13257)
except ValueError as error:
    report["resize"] = str(error)
report["chars"] = head.elmo.char_encoder.char_embeddings.num_embeddings
for name, task, auto in (("seq", TaskType.SEQ_CLS, AutoModelForSequenceClassification),
                         ("tok", TaskType.TOKEN_CLS, AutoModelForTokenClassification),
                         ("feat", TaskType.FEATURE_EXTRACTION, AutoModel)):
    torch.manual_seed(0)
    base = auto.from_pretrained(folder, trust_remote_code=True)
    frozen = {k: v.clone() for k, v in base.elmo.state_dict().items()} if name != "feat" else None
    peft = get_peft_model(base, LoraConfig(task_type=task, r=2, target_modules=["projection", "transform", "gate"],
                                           init_lora_weights=False))
    peft.train()
    out = peft(**batch)  # the wrapper passes inputs_embeds, output_attentions, ... as transformers models take them
    value = out.logits if name != "feat" else out.last_hidden_state
    lora = {n: p for n, p in peft.named_parameters() if "lora_" in n}
    before = {n: p.detach().clone() for n, p in lora.items()}
    value.square().mean().backward()
    report[f"{name}_lora_with_grad"] = sum(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in lora.values())
    report[f"{name}_lora"] = len(lora)
    torch.optim.SGD([p for p in peft.parameters() if p.requires_grad], lr=0.5).step()
    report[f"{name}_lora_changed"] = sum(not torch.equal(before[n], p) for n, p in lora.items())
    if frozen is not None:  # the biLM's own weights: untouched
        inner = peft.base_model.model.elmo
        state = {k.replace(".base_layer", ""): v for k, v in inner.state_dict().items() if "lora_" not in k}
        report[f"{name}_bilm_unchanged"] = all(torch.equal(frozen[k], state[k]) for k in frozen)
    peft.eval()
    with torch.no_grad():
        adapted = peft(**batch)
    key = "logits" if name != "feat" else "last_hidden_state"
    tensors[f"{name}_adapted"] = getattr(adapted, key)
    peft.save_pretrained(f"{work}/{name}-adapter")
    base = auto.from_pretrained(folder, trust_remote_code=True)
    again = PeftModel.from_pretrained(base, f"{work}/{name}-adapter").eval()
    with torch.no_grad():
        tensors[f"{name}_reloaded"] = getattr(again(**batch), key)
        tensors[f"{name}_merged"] = getattr(again.merge_and_unload()(**batch), key)
save_file({k: v.contiguous() for k, v in tensors.items()}, f"{work}/outputs.safetensors")
print(json.dumps(report))
"""

LEGACY_CLIENT = r"""
import json, sys
import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModel, AutoTokenizer

folder, out = sys.argv[1], sys.argv[2]
config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
batch = tokenizer(json.loads(sys.argv[3]), is_split_into_words=True, padding=True, return_tensors="pt")
with torch.no_grad():
    save_file({"top": model(**batch).last_hidden_state.contiguous()}, out)
print(json.dumps({"projection_dim": config.projection_dim, "hidden_size": config.hidden_size}))
"""


@pytest.mark.slow
def test_peft_task_types_train_adapters_inside_the_frozen_bilm_without_the_package(tmp_path):
    """SEQ_CLS / TOKEN_CLS / FEATURE_EXTRACTION wrappers run; LoRA adapters on the character projection and the
    highway layers of the frozen biLM get gradients and change; the biLM's own weights do not; the adapter saves,
    reloads and merges to the same outputs."""
    pytest.importorskip("peft")
    torch.manual_seed(0)
    head = ElmoForSequenceClassification(ElmoConfig(**TINY))
    save_model_folder(head, ElmoTokenizer(), tmp_path / "model")
    report = run_without_package(
        PEFT_CLIENT, tmp_path / "model", tmp_path, json.dumps(SENTENCES), workdir=tmp_path / "client"
    )
    expected_head = (
        head.classifier.weight.numel() + head.classifier.bias.numel() + head.scalar_mix.scalar_parameters.numel() + 1
    )
    assert report["hidden_size"] == 16 and report["trainable"] == expected_head < report["all"]
    assert report["resize"].startswith("ElmoForSequenceClassification reads characters and has no token-embedding")
    assert report["chars"] == 262
    for name in ("seq", "tok", "feat"):
        # A and B of: the character projection, the highway transform and gate, the 4 LSTM projections (2 layers x 2
        # directions, ``...forward_layers.0.projection``)
        assert report[f"{name}_lora"] == 14
        assert report[f"{name}_lora_with_grad"] == report[f"{name}_lora_changed"] == 14, report
    assert report["seq_bilm_unchanged"] and report["tok_bilm_unchanged"]
    outputs = load_file(tmp_path / "outputs.safetensors")
    for name in ("seq", "tok", "feat"):
        assert_same_numbers(outputs[f"{name}_reloaded"], outputs[f"{name}_adapted"], what=f"{name} reloaded adapter")
        assert_same_numbers(outputs[f"{name}_merged"], outputs[f"{name}_adapted"], rtol=1e-5, what=f"{name} merged")


@pytest.mark.slow
def test_a_folder_written_before_projection_dim_loads_with_its_meaning_without_the_package_once_upgraded(tmp_path):
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**TINY)).eval()
    save_model_folder(model, ElmoTokenizer(), tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    del config["projection_dim"]
    config["hidden_size"] = 8  # the projection, as the code of commit 1fa5770 wrote config.json
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    assert upgrade_folder(tmp_path / "model")  # the shipped files read today's format only
    report = run_without_package(
        LEGACY_CLIENT,
        tmp_path / "model",
        tmp_path / "out.safetensors",
        json.dumps(SENTENCES),
        workdir=tmp_path / "client",
    )
    assert report == {"projection_dim": 8, "hidden_size": 16}
    batch = ElmoTokenizer()(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = in_the_public_form(model)(**batch).last_hidden_state
    assert_same_numbers(load_file(tmp_path / "out.safetensors")["top"], expected, what="legacy folder")


TOLERANCE = 1e-5


# --- h-kernel: the LSTM as modules (older folders, PEFT on the LSTM, gradient checkpointing, fullgraph compile) ---
@pytest.mark.slow
def test_a_folder_with_the_older_lstm_parameter_names_loads_without_the_package_once_upgraded(tmp_path):
    tester, model = clipping_model()
    write_legacy_folder(model, tmp_path / "old")
    assert upgrade_folder(tmp_path / "old") == ["model.safetensors: the older LSTM parameter names renamed"]
    enc = tester.encode(MODEL_SENTENCES)
    with torch.no_grad():
        expected = model(**enc).last_hidden_state
    torch.save({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}, tmp_path / "inputs.pt")
    result = run_without_package(
        """
        import json, sys, torch
        from transformers import AutoModel
        inputs = torch.load(sys.argv[1] + "/inputs.pt", weights_only=True)
        model, info = AutoModel.from_pretrained(sys.argv[1] + "/old", trust_remote_code=True, output_loading_info=True)
        with torch.no_grad():
            out = model(**inputs).last_hidden_state
        print(json.dumps({"module": type(model).__module__, "missing": sorted(info["missing_keys"]),
                          "unexpected": sorted(info["unexpected_keys"]), "out": out.tolist()}))
    """,
        tmp_path,
        workdir=tmp_path / "client",
    )
    assert result["module"].startswith("transformers_modules.")
    assert not result["missing"] and not result["unexpected"], result
    assert_same_numbers(torch.tensor(result["out"]), expected, rtol=TOLERANCE, what="remote code")


@pytest.mark.slow
def test_lora_checkpointing_and_fullgraph_compile_on_a_biLM_loaded_as_remote_code(tmp_path):
    pytest.importorskip("peft")
    tester, model = clipping_model(ElmoForBidirectionalLM)
    save_model_folder(model, tester.tokenizer, tmp_path / "lm")
    enc = tester.encode(MODEL_SENTENCES)
    labels = torch.randint(4, 40, enc["attention_mask"].shape).masked_fill(enc["attention_mask"] == 0, -100)
    torch.save(
        {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels},
        tmp_path / "inputs.pt",
    )
    result = run_without_package(
        """
        import json, sys, torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForPreTraining
        batch = torch.load(sys.argv[1] + "/inputs.pt", weights_only=True)
        load = lambda: AutoModelForPreTraining.from_pretrained(sys.argv[1] + "/lm", trust_remote_code=True)
        report = {}

        def loss_and_grads(model):
            model.train()
            model.zero_grad()
            torch.manual_seed(4)
            loss = model(**batch).loss
            loss.backward()
            return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

        plain, checkpointed = load(), load()
        checkpointed.gradient_checkpointing_enable()
        (loss, grads), (loss_ckpt, grads_ckpt) = loss_and_grads(plain), loss_and_grads(checkpointed)
        report["checkpointing_loss"] = abs(loss - loss_ckpt)
        relative = lambda n: float((grads[n] - grads_ckpt[n]).abs().max() / grads[n].abs().max().clamp_min(1e-12))
        report["checkpointing_grads"] = max(relative(n) for n in grads)
        report["checkpointing_same_names"] = grads.keys() == grads_ckpt.keys()

        model = load().eval()
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
        with torch.no_grad():
            before = model(**inputs).last_hidden_state
        peft_model = get_peft_model(model, LoraConfig(r=2, target_modules="all-linear", init_lora_weights=False))
        names = [n for n, m in peft_model.named_modules() if hasattr(m, "lora_A") and ".encoder." in n]
        names = [n for n in names if n.endswith("projection")]
        out = peft_model(**inputs).last_hidden_state
        out.square().sum().backward()
        lora = [p for n, p in peft_model.named_parameters() if "lora_" in n and ".encoder." in n]
        report["lstm_adapters"] = len(names)
        report["lora_changes_output"] = float((out.detach() - before).abs().max())
        report["lstm_lora_grads"] = all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in lora)
        merged = peft_model.merge_and_unload()
        with torch.no_grad():
            report["merged_difference"] = float((merged(**inputs).last_hidden_state - out.detach()).abs().max())
            eager = merged(**inputs).last_hidden_state
            compiled = torch.compile(merged, fullgraph=True, backend="aot_eager")(**inputs).last_hidden_state
        report["compiled_difference"] = float((compiled - eager).abs().max())
        report["scale"] = float(eager.abs().max())
        report["module"] = type(merged).__module__
        print(json.dumps(report))
    """,
        tmp_path,
        workdir=tmp_path / "client",
    )
    assert result["module"].startswith("transformers_modules.")
    assert result["checkpointing_same_names"] and result["checkpointing_loss"] < 1e-5, result
    assert result["checkpointing_grads"] < TOLERANCE, result
    assert result["lstm_adapters"] == 4 and result["lstm_lora_grads"] and result["lora_changes_output"] > 1e-3, result
    assert result["merged_difference"] <= TOLERANCE * result["scale"], result
    assert result["compiled_difference"] <= TOLERANCE * result["scale"] and result["scale"] > 0, result
