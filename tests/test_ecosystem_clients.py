"""Third-party clients of transformers models run against a saved ELMo folder loaded WITHOUT this package (the classes
come from the folder's own code, ``trust_remote_code=True``), as users of the wider ecosystem combine them."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from modeling_elmo import ElmoConfig, ElmoForSequenceClassification, ElmoModel, ElmoTokenizer, save_model_folder

from support import assert_same_numbers, run_without_package

# --- h-config: config.hidden_size, freezing, PEFT task types, resize, folders written before projection_dim ---

TINY = dict(projection_dim=8, cell_size=16, char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8]],
            num_highway_layers=1, num_labels=3, classifier_dropout=0.0)
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
    again = PeftModel.from_pretrained(auto.from_pretrained(folder, trust_remote_code=True), f"{work}/{name}-adapter").eval()
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
    report = run_without_package(PEFT_CLIENT, tmp_path / "model", tmp_path, json.dumps(SENTENCES),
                                 workdir=tmp_path / "client")
    expected_head = head.classifier.weight.numel() + head.classifier.bias.numel() + head.scalar_mix.scalar_parameters.numel() + 1
    assert report["hidden_size"] == 16 and report["trainable"] == expected_head < report["all"]
    assert report["resize"].startswith("ElmoForSequenceClassification reads characters and has no token-embedding")
    assert report["chars"] == 262
    for name in ("seq", "tok", "feat"):
        assert report[f"{name}_lora"] == 6  # A and B of: projection, highway transform, highway gate
        assert report[f"{name}_lora_with_grad"] == report[f"{name}_lora_changed"] == 6, report
    assert report["seq_bilm_unchanged"] and report["tok_bilm_unchanged"]
    outputs = load_file(tmp_path / "outputs.safetensors")
    for name in ("seq", "tok", "feat"):
        assert_same_numbers(outputs[f"{name}_reloaded"], outputs[f"{name}_adapted"], what=f"{name} reloaded adapter")
        assert_same_numbers(outputs[f"{name}_merged"], outputs[f"{name}_adapted"], rtol=1e-5, what=f"{name} merged")


@pytest.mark.slow
def test_a_folder_written_before_projection_dim_loads_with_its_meaning_without_the_package(tmp_path):
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**TINY)).eval()
    save_model_folder(model, ElmoTokenizer(), tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    del config["projection_dim"]
    config["hidden_size"] = 8  # the projection, as the code of commit 1fa5770 wrote config.json
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    report = run_without_package(LEGACY_CLIENT, tmp_path / "model", tmp_path / "out.safetensors", json.dumps(SENTENCES),
                                 workdir=tmp_path / "client")
    assert report == {"projection_dim": 8, "hidden_size": 16}
    batch = ElmoTokenizer()(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).last_hidden_state
    assert_same_numbers(load_file(tmp_path / "out.safetensors")["top"], expected, what="legacy folder")
