"""Measured activation memory: run a miniature of the real architecture on the CPU and count saved tensors.

``measure`` is the ground truth that ``zerokit.memory.activations`` is checked against: it is the logic of
``../shared/measure_activations.py`` (saved-tensor hooks, each storage counted once, parameters excluded),
copied here so the package does not depend on that script.

``calibrate`` makes the measurement usable for a full-size model: the bytes of a decoder layer do not depend
on how many layers there are, so it measures the SAME config with 1 and 2 layers at two short sequence lengths
(4 runs), solves for the per-token and the seq x seq part of one layer and of everything outside the layers,
and extrapolates to the real layer count, sequence length and micro-batch. That is exact for architectures
zerokit has never seen, at the cost of a CPU forward pass of a 2-layer model at full width (seconds to a
minute for a 7B-class width with a large vocabulary). The analytic model stays the default because the
planner needs thousands of evaluations per second and must not import torch.

torch and transformers are imported lazily: importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zerokit.memory.activations import ActivationEstimate, estimate_activations

__all__ = ["calibrate", "measure"]

_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


def measure(config: Mapping[str, Any], seq_len: int, micro_batch: int, attention: str = "sdpa",
            dtype: str = "bf16", gradient_checkpointing: bool = False, *, backward: bool = True,
            transient: bool = False) -> dict:
    """Bytes autograd holds for backward after one training forward pass (same method as measure_activations.py).

    The count is complete at the end of forward; ``backward=False`` skips the proof-of-training backward pass,
    which is two thirds of the CPU time. ``transient=True`` also reports the backward peak (see
    ``_backward_peak``) under the key ``"transient"``.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    config = dict(config)
    model_type = config.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **config)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attention).to(dtypes[dtype])
    model.train()
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    held: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr and ptr not in param_storages:
            held[ptr] = max(held.get(ptr, 0), storage.nbytes())
        return t

    ids = torch.randint(0, cfg.vocab_size, (micro_batch, seq_len))
    if transient:  # parameter gradients belong to `gradients`: allocate them before backward starts
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, labels=ids, use_cache=False)
    extra = {}
    if transient:
        loss = out.loss
        del out  # the caller (HF Trainer) keeps only the loss once forward returns
        extra["transient"] = _backward_peak(loss)
    elif backward:
        out.loss.backward()  # proves the graph is a real training graph
    return {
        **extra,
        "activations": sum(held.values()),
        "parameters": sum(p.numel() for p in model.parameters()),
        "model_type": model_type,
        "seq_len": seq_len,
        "micro_batch": micro_batch,
        "attention": attention,
        "dtype": dtype,
        "gradient_checkpointing": gradient_checkpointing,
    }


def _backward_peak(loss: Any) -> int:
    """Peak of the bytes allocated during ``loss.backward()`` and still live, on the CPU, via the profiler.

    The CPU allocator keeps no statistics, so the profiler's allocation events are replayed. Frees of blocks
    that existed before backward (saved activations released node by node) are invisible to it, so this is an
    upper bound of the true extra peak: exact at the loss (the first nodes), generous deeper in the stack.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss.backward()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def _with_layers(config: Mapping[str, Any], n: int) -> dict:
    c = dict(config)
    key = next((k for k in _LAYER_KEYS if k in c), "num_hidden_layers")
    c[key] = n
    for k in ("layer_types", "mlp_only_layers"):  # per-layer lists must match the shortened stack
        if isinstance(c.get(k), list):
            c[k] = [x for x in c[k] if not isinstance(x, int) or x < n] if k == "mlp_only_layers" else c[k][:n]
    return c


def calibrate(config: Mapping[str, Any], seq_len: int, micro_batch: int, *, attention: str = "sdpa",
              dtype: str = "bf16", gradient_checkpointing: bool = False, probe_seq: tuple[int, int] = (64, 128)
              ) -> ActivationEstimate:
    """Measure a 1- and 2-layer miniature of ``config`` at two short lengths and extrapolate (4 CPU runs).

    The per-layer part is taken as homogeneous (the second layer stands for all of them). ``transient`` comes
    from the analytic model, which the CPU cannot measure as a GPU peak.
    """
    layers = int(next((config[k] for k in _LAYER_KEYS if k in config), 32))
    s1, s2 = probe_seq
    kw = {"attention": attention, "dtype": dtype, "gradient_checkpointing": gradient_checkpointing}
    a = {(n, s): measure(_with_layers(config, n), s, 1, **kw, backward=False)["activations"]
         for n in (1, 2) for s in (s1, s2)}
    # per layer: P(s) = c*s + d*s^2 ; outside the layers: E(s) = x*s + y (y: batch-independent leftovers)
    p1, p2 = a[2, s1] - a[1, s1], a[2, s2] - a[1, s2]
    d = (p2 / s2 - p1 / s1) / (s2 - s1)
    c = p1 / s1 - d * s1
    e1, e2 = a[1, s1] - p1, a[1, s2] - p2
    x = (e2 - e1) / (s2 - s1)
    y = e1 - x * s1
    s, b = seq_len, micro_batch
    acts = b * (x * s + layers * (c * s + d * s * s)) + y
    analytic = estimate_activations(config, seq_len, micro_batch, attention=attention, dtype=dtype,
                                    gradient_checkpointing=gradient_checkpointing)
    return ActivationEstimate(round(acts), analytic.transient, False, "measured on a CPU miniature")
