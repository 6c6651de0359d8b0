"""Clients of the wider ecosystem against folders loaded WITHOUT this package (the classes come from the folder's
own code, ``trust_remote_code=True``), one section per topic."""

from __future__ import annotations

import pytest
import torch

from support import assert_same_numbers, run_without_package
from test_lstm_modules import clipping_model, write_legacy_folder
from test_modeling_elmo import SENTENCES

from modeling_elmo import ElmoForBidirectionalLM, save_model_folder

TOLERANCE = 1e-5


# --- h-kernel: the LSTM as modules (older folders, PEFT on the LSTM, gradient checkpointing, fullgraph compile) ---
def test_a_folder_with_the_older_lstm_parameter_names_loads_without_the_package(tmp_path):
    tester, model = clipping_model()
    write_legacy_folder(model, tmp_path / "old")
    enc = tester.encode(SENTENCES)
    with torch.no_grad():
        expected = model(**enc).last_hidden_state
    torch.save({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}, tmp_path / "inputs.pt")
    result = run_without_package("""
        import json, sys, torch
        from transformers import AutoModel
        inputs = torch.load(sys.argv[1] + "/inputs.pt", weights_only=True)
        model, info = AutoModel.from_pretrained(sys.argv[1] + "/old", trust_remote_code=True, output_loading_info=True)
        with torch.no_grad():
            out = model(**inputs).last_hidden_state
        print(json.dumps({"module": type(model).__module__, "missing": sorted(info["missing_keys"]),
                          "unexpected": sorted(info["unexpected_keys"]), "out": out.tolist()}))
    """, tmp_path, workdir=tmp_path / "client")
    assert result["module"].startswith("transformers_modules.")
    assert not result["missing"] and not result["unexpected"], result
    assert_same_numbers(torch.tensor(result["out"]), expected, rtol=TOLERANCE, what="remote code")


@pytest.mark.slow
def test_lora_checkpointing_and_fullgraph_compile_on_a_biLM_loaded_as_remote_code(tmp_path):
    pytest.importorskip("peft")
    tester, model = clipping_model(ElmoForBidirectionalLM)
    save_model_folder(model, tester.tokenizer, tmp_path / "lm")
    enc = tester.encode(SENTENCES)
    labels = torch.randint(4, 40, enc["attention_mask"].shape).masked_fill(enc["attention_mask"] == 0, -100)
    torch.save({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels},
               tmp_path / "inputs.pt")
    result = run_without_package("""
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
        report["checkpointing_grads"] = max(float((grads[n] - grads_ckpt[n]).abs().max() / grads[n].abs().max().clamp_min(1e-12))
                                            for n in grads)
        report["checkpointing_same_names"] = grads.keys() == grads_ckpt.keys()

        model = load().eval()
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
        with torch.no_grad():
            before = model(**inputs).last_hidden_state
        peft_model = get_peft_model(model, LoraConfig(r=2, target_modules="all-linear", init_lora_weights=False))
        names = [n for n, m in peft_model.named_modules() if hasattr(m, "lora_A") and ".encoder." in n and n.endswith("projection")]
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
    """, tmp_path, workdir=tmp_path / "client")
    assert result["module"].startswith("transformers_modules.")
    assert result["checkpointing_same_names"] and result["checkpointing_loss"] < 1e-5, result
    assert result["checkpointing_grads"] < TOLERANCE, result
    assert result["lstm_adapters"] == 4 and result["lstm_lora_grads"] and result["lora_changes_output"] > 1e-3, result
    assert result["merged_difference"] <= TOLERANCE * result["scale"], result
    assert result["compiled_difference"] <= TOLERANCE * result["scale"] and result["scale"] > 0, result
