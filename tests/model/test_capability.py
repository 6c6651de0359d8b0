"""`modeling_elmo.utils.capability`: bfloat16 is offered only where the hardware multiplies it natively."""

import pytest
import torch

from modeling_elmo.utils import capability


@pytest.mark.parametrize(
    ("cpuinfo", "expected"),
    [
        ("processor: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_tile\n", True),
        ("processor: 0\nflags\t\t: fpu sse avx2 amx_bf16\n", True),
        ("processor: 0\nFeatures\t: fp asimd bf16 i8mm\n", True),
        ("processor: 0\nflags\t\t: fpu sse avx2 avx512f\n", False),
        ("", False),
    ],
)
def test_cpu_bf16_follows_the_cpu_flags(monkeypatch, tmp_path, cpuinfo, expected):
    sample = tmp_path / "cpuinfo"
    sample.write_text(cpuinfo)
    monkeypatch.setattr(capability, "Path", lambda _: sample)
    assert capability.bf16_supported("cpu") is expected


def test_flags_are_read_from_both_x86_and_arm_layouts(monkeypatch, tmp_path):
    sample = tmp_path / "cpuinfo"
    sample.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\nFeatures\t: fp bf16\n")
    monkeypatch.setattr(capability, "Path", lambda _: sample)
    assert {"avx2", "avx512_bf16", "bf16", "fp"} <= capability._cpu_flags()


def test_unreadable_cpuinfo_means_no_bf16(monkeypatch, tmp_path):
    monkeypatch.setattr(capability, "Path", lambda _: tmp_path / "absent")
    assert capability._cpu_flags() == frozenset()
    assert capability.bf16_supported("cpu") is False


def test_refusal_is_one_line_naming_the_device_and_the_caller(monkeypatch):
    monkeypatch.setattr(capability, "_cpu_flags", lambda: frozenset({"avx2"}))
    with pytest.raises(ValueError, match=r"^elmo embed --dtype bfloat16: bfloat16 needs .*; cpu here does not") as err:
        capability.require_bf16("cpu", "elmo embed --dtype bfloat16")
    assert "\n" not in str(err.value)
    monkeypatch.setattr(capability, "_cpu_flags", lambda: frozenset({"amx_bf16"}))
    capability.require_bf16(torch.device("cpu"), "x")  # supported: no error
    assert capability.bf16_supported("meta") is False
