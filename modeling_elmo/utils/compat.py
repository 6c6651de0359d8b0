"""The differences between the releases of the libraries this package accepts, behind one name each.

The package runs on transformers 4.57 (the last 4.x, with huggingface_hub 0.36: what Flair 0.15 installs) and on
transformers 5.x (huggingface_hub 1.x). Code that needs one of the names below imports it from here; nothing else in
the package asks which release is installed.
"""

from __future__ import annotations


def is_offline_mode() -> bool:
    """Whether the Hub is off (``HF_HUB_OFFLINE=1``): huggingface_hub 1.x's `is_offline_mode`, read when called (a
    test may replace it), or 0.x's ``constants.HF_HUB_OFFLINE``, the value that function returns."""
    import huggingface_hub

    check = getattr(huggingface_hub, "is_offline_mode", None)
    if check is not None:
        return check()
    return bool(huggingface_hub.constants.HF_HUB_OFFLINE)
