"""Publishing an ELMo model folder to the Hugging Face Hub (``elmo push``, ``scripts/push_to_hub.py``).

One job per module:

* `modeling_elmo.hub.safety`: pickled weights are refused (`modeling_elmo.utils.loading.refuse_pickled_weights`,
  the loaders' guard), tokens are never published nor read from the published folders, the shipped code is audited;
* `modeling_elmo.hub.card`: the one model-card writer (``elmo push`` and ``elmo convert``), from the results schema
  (docs/results.md) and the run's or the conversion's metadata;
* `modeling_elmo.hub.saving`: the model and tokenizer loaded with this package's classes and saved again as a
  remote-code repository (known keys only, the full ``auto_map``);
* `modeling_elmo.hub.publish`: the checks of the model folder (no link out of it, finite float weights), the
  repository folder (allow-listed files only; an earlier push's folder is replaced, nothing else) and the upload;
* `modeling_elmo.hub.cli`: the command line.

See docs/hub.md.
"""

from .card import CARD_KINDS, CardInputs, build_model_card, default_template_path, detect_card_kind, write_model_card
from .cli import main
from .publish import (
    ALLOWED_FILES,
    assemble_repo_folder,
    check_model_folder,
    check_published_inputs,
    check_weights,
    is_allowed_file,
    list_folder,
    plan_upload,
    upload_repo_folder,
    validate_repo_id,
)
from .safety import audit_shipped_code, refuse_pickled_weights, resolve_token, scan_for_secrets
from .saving import check_auto_map, save_for_hub

__all__ = [
    "ALLOWED_FILES",
    "CARD_KINDS",
    "CardInputs",
    "assemble_repo_folder",
    "audit_shipped_code",
    "build_model_card",
    "check_auto_map",
    "check_model_folder",
    "check_published_inputs",
    "check_weights",
    "default_template_path",
    "detect_card_kind",
    "is_allowed_file",
    "list_folder",
    "main",
    "plan_upload",
    "refuse_pickled_weights",
    "resolve_token",
    "save_for_hub",
    "scan_for_secrets",
    "upload_repo_folder",
    "validate_repo_id",
    "write_model_card",
]
