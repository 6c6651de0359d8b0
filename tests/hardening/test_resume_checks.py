"""Issue 35, SILENT and CRASH rows of resuming: a checkpoint whose optimiser, schedule or random state is not the
run's is refused in one line naming the value, before anything is loaded; a model holding non-finite weights is never
written as a checkpoint (so never becomes ``latest``).

One small in-process run (the elmo-tiny preset) is stopped after 2 updates; each row tampers with a copy of it and
resumes.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from support import reset_accelerate_state

from modeling_elmo.pretraining import main as pretrain_main
from modeling_elmo.pretraining.state import TrainingState


def _argv(corpus: Path, out: Path, cache: Path) -> list[str]:
    return [
        "--train-file",
        str(corpus),
        "--output-dir",
        str(out),
        "--max-steps",
        "4",
        "--checkpointing-steps",
        "2",
        "--per-device-train-batch-size",
        "8",
        "--no-plot",
        "--cache-dir",
        str(cache),
    ]


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("resume")
    corpus = root / "a.txt"
    corpus.write_text("".join(f"the cat number {i} sat on the mat .\n" for i in range(300)), encoding="utf-8")
    try:
        assert pretrain_main([*_argv(corpus, root / "run", root / "cache"), "--stop-after-steps", "2"]) == 0
    finally:
        reset_accelerate_state()
    return corpus, root / "run", root / "cache"


def _checkpoint(run: Path) -> Path:
    return next((run / "checkpoints").glob("step_*"))


def _edit_tensors(name: str, edit):
    def tamper(checkpoint: Path) -> None:
        tensors = load_file(str(checkpoint / name))
        edit(tensors)
        save_file(tensors, str(checkpoint / name))

    return tamper


def _edit_json(name: str, edit):
    def tamper(checkpoint: Path) -> None:
        data = json.loads((checkpoint / name).read_text())
        edit(data)
        (checkpoint / name).write_text(json.dumps(data))

    return tamper


def _transpose_a_moment(tensors: dict[str, torch.Tensor]) -> None:
    key = next(k for k, v in tensors.items() if k.endswith("exp_avg") and v.dim() == 2 and v.shape[0] != v.shape[1])
    tensors[key] = tensors[key].t().contiguous()


ROWS = [
    (
        "S2 a moment of shape (1,)",
        _edit_tensors("optimizer.safetensors", lambda t: t.__setitem__("state.0.exp_avg", torch.zeros(1))),
        r"optimizer state 'exp_avg' of parameter 0 has shape \(1,\); the parameter's is \(\d+, \d+\)\.",
    ),
    (
        "S3 a moment transposed",
        _edit_tensors("optimizer.safetensors", _transpose_a_moment),
        r"optimizer state 'exp_avg' of parameter \d+ has shape \(\d+, \d+\); the parameter's is \(\d+, \d+\)\.",
    ),
    (  # attacker pass: a scalar passed the shape check and broadcast over the parameter (NaN from then on)
        "a moment that is a scalar",
        _edit_tensors("optimizer.safetensors", lambda t: t.__setitem__("state.0.exp_avg", torch.tensor(0.5))),
        r"optimizer state 'exp_avg' of parameter 0 has shape \(\); the parameter's is \(\d+, \d+\)\.",
    ),
    (  # attacker pass: Adam's bias correction divides by 1 - beta ** step; 1.5 scaled every update, silently
        "a step count that is not a whole number",
        _edit_tensors("optimizer.safetensors", lambda t: t["state.3.step"].fill_(1.5)),
        r"optimizer state 'step' of parameter 3 is 1\.5, not a whole number in \[0, 2\] \(the checkpoint's update\)\.",
    ),
    (
        "a moment holding NaN",
        _edit_tensors("optimizer.safetensors", lambda t: t["state.1.exp_avg_sq"].fill_(float("nan"))),
        r"optimizer state 'exp_avg_sq' of parameter 1 holds non-finite values\.",
    ),
    (
        "a negative second moment",
        _edit_tensors("optimizer.safetensors", lambda t: t["state.2.exp_avg_sq"].fill_(-1.0)),
        r"optimizer state 'exp_avg_sq' of parameter 2 holds negative values\.",
    ),
    (
        "a step count beyond the checkpoint's update",
        _edit_tensors("optimizer.safetensors", lambda t: t["state.0.step"].fill_(1e6)),
        r"optimizer state 'step' of parameter 0 is 1e\+06, not a whole number in \[0, 2\] \(the checkpoint's",
    ),
    (  # attacker pass: one parameter's moments and count dropped restarted at zero on resume, silently
        "one parameter's optimiser state dropped",
        _edit_json("optimizer.json", lambda j: j["state"].pop("3")),
        r"optimizer\.json holds the state of \d+ parameters, but the checkpoint recorded \d+: missing \[3\]\.",
    ),
    (
        "weights holding inf",
        _edit_tensors("model.safetensors", lambda t: next(v for v in t.values() if v.dim() == 2).fill_(float("inf"))),
        r"holds non-finite weights",
    ),
    (
        "another beta in the optimiser",
        _edit_json("optimizer.json", lambda j: j["param_groups"][0].__setitem__("betas", [0.5, 0.999])),
        r"optimizer\.json: group 0 has betas \(0\.5, 0\.999\); the run's arguments give \(0\.9, 0\.999\)\.",
    ),
    (
        "S4 base_lrs 0",
        _edit_json("scheduler.json", lambda j: j.__setitem__("base_lrs", [0.0] * len(j["base_lrs"]))),
        r"scheduler\.json: base_lrs is \[0\.0, 0\.0\]; the run's arguments give \[0\.02, 0\.02\]",
    ),
    (
        "scheduler optimizer 5",
        _edit_json("scheduler.json", lambda j: j.__setitem__("optimizer", 5)),
        r"scheduler\.json has fields \['optimizer'\] that the run's scheduler does not write\.",
    ),
    (
        "scheduler last_epoch 'x'",
        _edit_json("scheduler.json", lambda j: j.__setitem__("last_epoch", "x")),
        r"scheduler\.json: last_epoch is 'x', not a value of its kind\.",
    ),
    (
        "scheduler at another update",
        _edit_json("scheduler.json", lambda j: j.__setitem__("last_epoch", 0)),
        r"scheduler\.json: last_epoch is 0, but the checkpoint is at update 2\.",
    ),
    (
        "a 3-byte random state file",
        lambda c: (c / "rng_state_0.safetensors").write_bytes(b"abc"),
        r"rng_state_0\.safetensors' is not a safetensors file: it has 3 bytes",
    ),
    (
        "a 3-byte random state record",
        lambda c: (c / "rng_state_0.json").write_bytes(b"{}\n"),
        r"random state 'python' is None, not a Mersenne Twister state\.",
    ),
    (  # it stopped with "error: Overflow when unpacking long long", naming neither the file nor the field
        "a data position of 10**30",
        _edit_json("trainer_state.json", lambda j: j["positions"][0].__setitem__(0, 10**30)),
        r"trainer_state\.json: positions\[0\]\[0\] \(the epoch of process 0\) is 10{30}, above 4,611,",
    ),
    (
        "a batch position of 10**400",
        _edit_json("trainer_state.json", lambda j: j["positions"][0].__setitem__(1, 10**400)),
        r"trainer_state\.json: positions\[0\]\[1\] \(the batch of process 0\) is a number of 401 digits, above",
    ),
    (
        "a training-state count of 10**30",
        _edit_json("trainer_state.json", lambda j: j["state"].__setitem__("epoch", 10**30)),
        r"trainer_state\.json: training state field epoch is 10{30}, above 4,611,686,018,427,387,904\.",
    ),
    (
        "a torch generator state of 3 bytes",
        _edit_tensors("rng_state_0.safetensors", lambda t: t.__setitem__("torch", torch.zeros(3, dtype=torch.uint8))),
        r"random state 'torch' has dtype torch\.uint8 and shape \(3,\)\.",
    ),
]


@pytest.mark.parametrize("name,tamper,message", ROWS, ids=[row[0] for row in ROWS])
def test_a_checkpoint_that_is_not_the_runs_state_is_refused_in_one_line(name, tamper, message, stopped_run, tmp_path):
    corpus, run, cache = stopped_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    tamper(_checkpoint(copy))
    before = {p: p.read_bytes() for p in sorted(copy.rglob("*")) if p.is_file()}
    try:
        with pytest.raises(SystemExit) as exit_info:
            pretrain_main([*_argv(corpus, copy, cache), "--resume-from-checkpoint", "latest"])
    finally:
        reset_accelerate_state()
    line = str(exit_info.value.code)
    assert "\n" not in line and line.startswith("elmo pretrain: error: checkpoint '"), line
    assert re.search(message, line), line
    assert {p: p.read_bytes() for p in sorted(copy.rglob("*")) if p.is_file()} == before


def test_the_untouched_checkpoint_resumes_to_the_end(stopped_run, tmp_path):
    corpus, run, cache = stopped_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    try:
        assert pretrain_main([*_argv(corpus, copy, cache), "--resume-from-checkpoint", "latest"]) == 0
    finally:
        reset_accelerate_state()
    assert (copy / "checkpoints" / "latest").read_text().strip() == "step_00000004"


def test_a_model_with_non_finite_weights_is_never_written_as_a_checkpoint(caplog):
    from types import SimpleNamespace

    from modeling_elmo.pretraining.loop import save_checkpoint

    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    saved = []
    checkpoints = SimpleNamespace(latest=lambda: "step_00000002", save=lambda *a: saved.append(a))
    session = SimpleNamespace(unwrapped=lambda: model, checkpoints=checkpoints)
    assert save_checkpoint(session, TrainingState(global_step=3)) is None
    assert saved == []
    expected = "update 3: the model holds non-finite weights: no checkpoint is written; the latest is still"
    assert f"{expected} step_00000002" in caplog.text
