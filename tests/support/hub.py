"""A tiny model folder to publish, and `elmo push` run on it, shared by the publishing tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from modeling_elmo import (
    ElmoConfig,
    hub,
)

SECRET = "root:x:0:0:the-secret-line-of-a-file-outside:/root:/bin/bash\n"


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def _tiny_config(**extra) -> ElmoConfig:
    values = dict(
        projection_dim=8, cell_size=16, char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8]], num_highway_layers=1
    )
    return ElmoConfig(**{**values, **extra})


def _push(model: Path, out: Path, *extra: str) -> int:
    return hub.main([str(model), "--repo-id", "me/elmo", "--dry-run", "--output-dir", str(out), *extra])


def _refused(model: Path, out: Path, match: str, *extra: str) -> str:
    with pytest.raises(SystemExit) as error:
        _push(model, out, *extra)
    message = str(error.value.code)
    assert message.startswith("elmo push: error: ") and "\n" not in message and match in message, message
    assert not out.exists(), "a refused push wrote its output folder"
    return message
