"""Model input: presets, exact parameter counts and `--model` resolution. Imports neither torch nor transformers."""

from zerokit.models.params import KNOWN_FAMILIES, count_parameters
from zerokit.models.presets import PRESET_NAMES, load_preset
from zerokit.models.resolve import resolve_model, spec_from_config, spec_from_count
from zerokit.models.spec import ModelSpec

__all__ = ["KNOWN_FAMILIES", "PRESET_NAMES", "ModelSpec", "count_parameters", "load_preset", "resolve_model",
           "spec_from_config", "spec_from_count"]
