"""What the planner needs to know about a model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from zerokit._dataclass import dataclass


@dataclass(frozen=True)
class ModelSpec:
    """A model as the planner sees it. Counts are exact for presets and config.json input."""

    name: str
    """Preset name, config path or the count as given."""
    parameters: int
    """Total parameters, as `sum(p.numel() for p in model.parameters())` on the instantiated model."""
    largest_layer_parameters: int
    """Parameters of the module with the most parameters of its own (DeepSpeed's `largest_layer_params`)."""
    hidden_size: int
    num_layers: int
    vocab_size: int
    source: str
    """`preset`, `config` (a config.json), `count` (a bare parameter count; shape is inferred) or `meta` (meta-device)."""
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """The transformers config dict (with `model_type`) this spec came from; a synthetic one for `count`."""
    notes: tuple[str, ...] = ()
    """Warnings worth showing with the plan, e.g. that the shape of a bare count was inferred."""
    module_trace: tuple[tuple[int, int], ...] = ()
    """`meta` only: (decoder layer, parameters of its own) of every parameter-owning module of the instantiated
    model in registration order, the layer -1 outside the decoder stack: what ZeRO-3 gathers and hooks (a tied head
    counts again, as DeepSpeed fetches it for both modules)."""
    expert_views: tuple[int, ...] = ()
    """`meta` only, one entry per `module_trace` entry (empty: none anywhere): the parameters of the module's stacked
    expert tensors that its matmuls take as views, which autograd saves for backward
    (`zerokit.memory.buffers.kept_with_views`)."""
    active_matmul_parameters: int = 0
    """`meta` only: weight-matrix parameters one token passes through (embeddings and the LM head left out, MoE
    experts at top-k of all); 0 where the experts' top-k is not in the config."""

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", "unknown"))
