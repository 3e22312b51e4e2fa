"""Measured activation memory: the exact figure for architectures zerokit does not model, in seconds.

Two ways to count what autograd saves, one method (``../shared/measure_activations.py``: saved-tensor hooks, each
storage counted once, parameters excluded):

- ``measure`` runs the real model on the CPU: the ground truth, but a forward pass costs real matmuls (bf16 is
  emulated at a few GFLOP/s here), so only tiny widths are affordable.
- ``_Tracer`` runs the same transformers code on fake tensors (``torch._subclasses.FakeTensorMode``): every tensor
  has its real shape, dtype, strides and storage but no data, so a forward pass of a 70B-wide layer costs the same
  few milliseconds as a tiny one. The autograd formulas, the CPU kernel choice (sdpa's flash kernel vs the math
  kernel) and every view-or-copy decision are the real ones, so the saved bytes are too: equal to ``measure`` to
  the byte on every family the tests check (``tests/test_calibrate.py``). transformers takes two shortcuts it must
  not take here: it treats a fake tensor as "tracing" (and then materialises the causal mask it skips in a real
  run), and it cannot read data to see that the positions it generates are not packed sequences. ``_faithful``
  answers both as the real run does. Like the script, it counts every storage ever saved during the pass; the
  script keys storages by address, so where a saved tensor is freed before the end of forward (DeepSeek-V3's
  group routing drops its graph) and the allocator hands the address out again, the script counts one instead of
  two and the trace is a few hundredths of a percent above it.

``calibrated_activations`` turns that into the coefficients the planner needs (it asks thousands of times per
plan). For each checkpointing setting and each sequence regime (a sliding window or attention chunk W splits the
sequence axis at W: from there sdpa receives a materialised mask), it traces the config with 1 and 2 decoder layers
at three sequence lengths and micro-batches 1, 2 and 3. The difference of the two is one layer, so the real depth
is an extrapolation; bytes are a quadratic in the sequence length with a part proportional to the micro-batch and a
part shared by the batch (rotary tables, positions), and micro-batch 1 is fitted on its own (some matmuls keep a view
there and a copy above). One trace of the real depth at a fourth length and micro-batch 4 then checks the whole
extrapolation; when it disagrees (layers that are not all alike) that regime is fitted at the real depth instead.
The fit is exact rational arithmetic on the traced integers.

Results are cached on disk per config, attention, dtype and torch/transformers versions
(``zerokit.memory.calibration_cache``); a cache hit imports neither library. torch and transformers are imported
lazily: importing this module is free. Use (in the CLI layer; the pure planner receives the result)::

    try:
        cal = calibrated_activations(config, attention="sdpa", dtype="bf16", progress=lambda m: print(m, file=sys.stderr))
    except CalibrationUnavailable as exc:
        warnings.append(str(exc))  # activations stay generic
    else:
        est = cal.estimate(seq_len, micro_batch, gradient_checkpointing)  # an ActivationEstimate, microseconds
"""

from __future__ import annotations

import bisect
import contextlib
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar

from zerokit._dataclass import dataclass
from zerokit.errors import one_line
from zerokit.memory import calibration_cache
from zerokit.memory.activations import ActivationEstimate, estimate_activations

__all__ = ["CalibratedActivations", "CalibrationUnavailable", "Probe", "calibrate", "calibrated_activations",
           "measure", "trace"]

FORMAT = 1
"""Version of the measurement method and the cached layout; part of the cache key."""

_ATTENTION = ("sdpa", "eager", "flash")
_DTYPES = ("bf16", "fp16", "fp32")
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
_WINDOW_ATTRS = ("sliding_window", "attention_chunk_size")  # what masking_utils passes as local_attention_size
_MINI_LAYERS = (1, 2)
_FIT_BATCHES = (1, 2, 3)
_CHECK_BATCH = 4
_STEP = 128  # spacing of the traced sequence lengths (fake tensors make the length free)
BUDGET_S = 120.0
"""Seconds a calibration may take before the plan gives up on it (generic activations, and a warning that says
so). Calibrations here took 4-86 s (the slowest: 48 layers not all alike, traced at full depth); a family whose
forward loops over the tokens in Python (mamba's selective scan without its kernels) was still tracing after a
minute on fake tensors, and the plan had no limit: it waited as long as the trace took."""


class _OverBudget(BaseException):
    """Raised into the trace when BUDGET_S is spent: a BaseException, so that transformers' own `except Exception`
    around optional paths cannot swallow it."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Interrupt the block with _OverBudget after `seconds`, where a timer signal can reach it (the main thread; the
    CLI's) and no one else's timer is running (an alarm of the caller's stays theirs). Elsewhere the block runs as
    long as it takes, between traces checked by `_Tracer.run`."""
    import signal
    import threading

    if (threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer")
            or signal.getitimer(signal.ITIMER_REAL)[0] > 0):
        yield
        return

    def expire(*_: Any) -> None:
        raise _OverBudget

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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


# ------------------------------------------------------------------------------------------ tracing on fake tensors
class CalibrationUnavailable(Exception):
    """Calibration cannot run here; the message is one sentence a plan can show as a warning. `kernel_refused`: the
    family has no such attention kernel in transformers (`attn_implementation` raised), so no run can use it."""

    def __init__(self, message: str, kernel_refused: bool = False) -> None:
        super().__init__(message)
        self.kernel_refused = kernel_refused


def _with_layers(config: Mapping[str, Any], n: int, full: int) -> dict:
    """``config`` cut to its first ``n`` decoder layers; per-layer lists (length ``full``) are cut alike."""
    c = dict(config)
    key = next((k for k in _LAYER_KEYS if k in c), "num_hidden_layers")
    c[key] = n
    for k, v in c.items():
        if k == "mlp_only_layers" and isinstance(v, list):
            c[k] = [x for x in v if not isinstance(x, int) or x < n]  # layer indices, not one entry per layer
        elif isinstance(v, list) and len(v) == full and full != n:
            c[k] = v[:n]
    return c


@contextlib.contextmanager
def _faithful() -> Iterator[None]:
    """Make transformers and torch take the code paths of a real CPU run while the tensors are fake.

    - transformers' ``is_tracing`` counts fake tensors as tracing, and then keeps causal masks the real run skips:
      answer no.
    - ``find_packed_sequence_indices`` must read the positions: with only ``input_ids`` given, transformers builds
      ``arange(seq_len)``, which is one sequence, so the real answer is always None.
    - torch's meta function of ``_grouped_mm`` (MoE experts) applies CUDA's rules: bf16 only, rows padded to 16
      bytes on CUDA builds. The CPU kernel takes fp16 and fp32 too and returns a contiguous result: give that.

    Fake-tensor results cached meanwhile are dropped on exit, so nothing computed under these answers outlives them.
    """
    import logging
    import warnings

    import torch
    import transformers
    from torch import _meta_registrations as meta
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import masking_utils
    from transformers.utils import import_utils

    def grouped_mm_as_on_cpu(mat_a: Any, mat_b: Any, scale_a: Any, scale_b: Any, offs: Any = None, *args: Any,
                             **kwargs: Any) -> Any:
        if scale_a is not None or scale_b is not None:
            return common(mat_a, mat_b, scale_a, scale_b, offs, *args, **kwargs)
        out_dtype = kwargs.get("out_dtype", args[2] if len(args) > 2 else None)
        shaped = meta._create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype)
        return torch.empty(shaped.shape, dtype=shaped.dtype, device=shaped.device)

    common = getattr(meta, "_meta_grouped_mm_common", None)
    patches = [(import_utils, "is_fake_tensor", lambda x: False),
               (masking_utils, "find_packed_sequence_indices", lambda *a, **k: None)]
    if common is not None and hasattr(meta, "_create_grouped_mm_output_tensor"):
        patches.append((meta, "_meta_grouped_mm_common", grouped_mm_as_on_cpu))
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patches if hasattr(mod, name)]
    verbosity = transformers.logging.get_verbosity()
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")  # logs a traceback before raising; we report
    fake_level = fake_log.level
    try:
        for mod, name, repl in patches:
            if hasattr(mod, name):
                setattr(mod, name, repl)
        transformers.logging.set_verbosity_error()
        fake_log.setLevel(logging.CRITICAL)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for mod, name, orig in saved:
            setattr(mod, name, orig)
        transformers.logging.set_verbosity(verbosity)
        fake_log.setLevel(fake_level)
        FakeTensorMode.cache_clear()


def _cast(model: Any, dtype: Any) -> None:
    """``model.to(dtype)`` for fake parameters (``Module.to`` cannot swap them in place): every floating parameter
    and buffer is cast, tied parameters stay tied."""
    import torch

    new: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is None or not p.is_floating_point():
                continue
            if id(p) not in new:
                with torch.no_grad():
                    new[id(p)] = torch.nn.Parameter(p.to(dtype), requires_grad=p.requires_grad)
            module._parameters[name] = new[id(p)]
        for name, b in list(module._buffers.items()):
            if b is not None and b.is_floating_point():
                module._buffers[name] = b.to(dtype)


class _Tracer:
    """Fake-tensor models of one config, one per layer count, reused across shapes (checkpointing is switched on
    once, after every run without it)."""

    def __init__(self, config: Mapping[str, Any], attention: str, dtype: str):
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode
        from transformers import AutoConfig

        self.config = config
        self.dtype_name = dtype
        self.raw = dict(config)
        self.model_type = str(self.raw.pop("model_type", "") or "")
        if not self.model_type:
            raise CalibrationUnavailable("config.json has no model_type, so transformers cannot build the model")
        try:
            self.hf_config = AutoConfig.for_model(self.model_type, **self.raw)
        except Exception as exc:  # noqa: BLE001 - ValueError and co., and huggingface_hub's Strict* validation errors
            raise CalibrationUnavailable(f"transformers cannot build model_type {self.model_type!r}: "
                                         f"{one_line(exc)}") from None
        self.n_layers = int(getattr(self.hf_config, "num_hidden_layers", 0) or 0)
        if self.n_layers < 1:
            raise CalibrationUnavailable(f"model_type {self.model_type!r} has no num_hidden_layers to extrapolate")
        self.attention = attention
        self.kernel = "sdpa" if attention == "flash" else attention  # the CPU has no flash-attn kernel
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
        self.mode = FakeTensorMode()
        self.models: dict[int, tuple[Any, bool]] = {}  # layer count -> (fake model, checkpointing on)
        self.deadline = math.inf  # perf_counter() past which no trace starts (`calibrated_activations`)

    def windows(self) -> tuple[int, ...]:
        """Sequence lengths from which transformers hands CPU sdpa a materialised local mask."""
        found = set()
        for attr in _WINDOW_ATTRS:
            v = getattr(self.hf_config, attr, None)
            if isinstance(v, int) and not isinstance(v, bool) and v > 1:
                found.add(v)
        return tuple(sorted(found))

    def _model(self, layers: int, checkpointing: bool) -> Any:
        from transformers import AutoConfig, AutoModelForCausalLM

        hit = self.models.get(layers)
        if hit is None:
            raw = self.raw if layers == self.n_layers else _with_layers(self.raw, layers, self.n_layers)
            try:
                model = AutoModelForCausalLM.from_config(AutoConfig.for_model(self.model_type, **raw),
                                                         attn_implementation=self.kernel)
            except ValueError as exc:  # no causal-LM class for this config, or a kernel the family refuses
                refused = "does not support an attention implementation" in str(exc)
                raise CalibrationUnavailable(f"transformers cannot build a causal LM for model_type "
                                             f"{self.model_type!r} with {self.kernel} attention: {one_line(exc)}",
                                             kernel_refused=refused) from None
            _cast(model, self.dtype)
            model.train()
            hit = (model, False)
        model, ckpt_on = hit
        if ckpt_on and not checkpointing:  # back to a fresh model, as measure() builds one per run
            del self.models[layers]
            return self._model(layers, checkpointing)
        if checkpointing and not ckpt_on:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.models[layers] = (model, checkpointing)
        return model

    def run(self, layers: int, checkpointing: bool, seq_len: int, micro_batch: int) -> int:
        import torch

        if time.perf_counter() > self.deadline:
            raise _OverBudget
        with self.mode:  # the caller holds _faithful() around every trace of a calibration
            model = self._model(layers, checkpointing)
            params = {p.untyped_storage()._cdata for p in model.parameters()}
            held: dict[int, int] = {}
            alive: list[Any] = []  # no storage seen here may be freed and its identity reused during the pass

            def pack(t: torch.Tensor) -> torch.Tensor:
                storage = t.untyped_storage()
                key = storage._cdata
                if key not in params and storage.nbytes():
                    held[key] = max(held.get(key, 0), storage.nbytes())
                    alive.append(storage)
                return t

            ids = torch.randint(0, int(getattr(model.config, "vocab_size", 2) or 2), (micro_batch, seq_len))
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = model(input_ids=ids, labels=ids, use_cache=False)
            del out
            alive.clear()
        return sum(held.values())


def trace(config: Mapping[str, Any], seq_len: int, micro_batch: int, attention: str = "sdpa", dtype: str = "bf16",
          gradient_checkpointing: bool = False) -> int:
    """What ``measure`` returns as ``activations``, counted on fake tensors: no matmul runs, any width is cheap."""
    with _faithful():
        tracer = _Tracer(config, attention, dtype)
        return tracer.run(tracer.n_layers, gradient_checkpointing, seq_len, micro_batch)


# ----------------------------------------------------------------------------------------------- the fitted model
@dataclass(frozen=True)
class Probe:
    """One traced forward pass: ``activations`` bytes for a model of ``layers`` decoder layers."""

    layers: int
    checkpointing: bool
    seq_len: int
    micro_batch: int
    activations: int

    def as_list(self) -> list[int]:
        return [self.layers, int(self.checkpointing), self.seq_len, self.micro_batch, self.activations]

    @classmethod
    def from_list(cls, row: Any) -> Probe:
        if not (isinstance(row, list) and len(row) == 5 and all(type(x) is int for x in row)):
            raise ValueError(f"a probe is 5 integers, got {row!r}")
        layers, ckpt, s, b, acts = row
        if layers < 1 or ckpt not in (0, 1) or s < 1 or b < 1 or acts < 0:
            raise ValueError(f"probe out of range: {row!r}")
        return cls(layers, bool(ckpt), s, b, acts)


def _regimes(windows: tuple[int, ...]) -> list[tuple[int, int | None]]:
    """[lo, hi) sequence ranges: a window W (> 1) starts a regime at W (masking_utils: kv_length >= W)."""
    return list(zip([0, *windows], [*windows, None]))


def _plan_seqs(lo: int, hi: int | None) -> tuple[list[int], int]:
    """Three fit lengths and one check length inside [lo, hi) (fewer fit lengths when the regime is that narrow).

    The last regime is unbounded: its check lies well beyond the fit lengths, so it tests the extrapolation.
    """
    start = max(lo, 1)
    if hi is not None and hi - start < 4:
        seqs = list(range(start, hi))[:3]
        return seqs, seqs[-1]
    step = _STEP if hi is None else max(1, min(_STEP, (hi - start) // 4))
    seqs = [lo + step * k for k in (1, 2, 3)]
    check = lo + 8 * step + 1 if hi is None else lo + (5 * step) // 2
    if check in seqs:
        check = seqs[-1] + 1 if seqs[-1] + 1 < hi else seqs[0]
    return seqs, check


def _poly(points: Mapping[int, Fraction]) -> tuple[Fraction, ...]:
    """Coefficients (a0, a1, a2) of the polynomial through the points (degree = number of points - 1)."""
    xs = sorted(points)
    coeffs = [Fraction(0)] * 3
    for i, xi in enumerate(xs):
        # Lagrange basis polynomial of xi, expanded
        basis = [Fraction(1)]
        denom = Fraction(1)
        for j, xj in enumerate(xs):
            if j == i:
                continue
            basis = [Fraction(0), *basis]
            for k in range(len(basis) - 1):
                basis[k] -= xj * basis[k + 1]
            denom *= xi - xj
        for k, c in enumerate(basis):
            coeffs[k] += points[xi] * c / denom
    return tuple(coeffs)


@dataclass(frozen=True)
class _Fit:
    """bytes(s, b) = one(s) if b == 1 else shared(s) + b * per_sample(s), each a quadratic in s."""

    one: tuple[float, float, float]
    shared: tuple[float, float, float]
    per_sample: tuple[float, float, float]

    def __call__(self, s: int, b: int) -> float:
        if b == 1:
            a = self.one
            return a[0] + s * (a[1] + s * a[2])
        c, d = self.shared, self.per_sample
        return c[0] + s * (c[1] + s * c[2]) + b * (d[0] + s * (d[1] + s * d[2]))


def _fit(values: Mapping[tuple[int, int], int]) -> _Fit:
    """Solve the coefficients from bytes at (s, b) for b in 1, 2, 3 (exact rational arithmetic)."""
    seqs = sorted({s for s, _ in values})
    one = _poly({s: Fraction(values[s, 1]) for s in seqs})
    per = {s: Fraction(values[s, 3] - values[s, 2]) for s in seqs}
    shared = _poly({s: values[s, 2] - 2 * per[s] for s in seqs})
    return _Fit(*(tuple(float(x) for x in p) for p in (one, shared, _poly(per))))


@dataclass(frozen=True)
class CalibratedActivations:
    """Activation bytes of one (config, attention, dtype), from traced miniatures: exact and microseconds per query.

    Built by ``calibrated_activations``; ``estimate`` is a drop-in for ``estimate_activations`` on that config.
    """

    config: Mapping[str, Any] = field(repr=False, compare=False)
    """The transformers config dict that was traced (also feeds the modelled ``transient``)."""
    attention: str
    dtype: str
    n_layers: int
    windows: tuple[int, ...]
    """Sequence lengths where a regime starts (sliding window, attention chunk); empty for flash."""
    probes: tuple[Probe, ...]
    """Traced miniatures (1 and 2 layers) and, where the layers turned out not to be alike, the real depth."""
    checks: tuple[Probe, ...]
    """Traces of the real depth at points the fit did not use; ``exact`` says whether the fit reproduces them."""
    versions: Mapping[str, str]
    seconds: float
    """Wall time of the tracing (torch and transformers already imported), as measured when it was traced."""
    cached: bool = False
    """True when read from the cache instead of traced now."""
    source: ClassVar[str] = "calibrated"
    """What ``memory.activations_source`` says for an estimate from here."""
    _fits: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _layer_fits: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _estimates: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.attention not in _ATTENTION or self.dtype not in _DTYPES or self.n_layers < 1:
            raise ValueError(f"bad calibration header: {self.attention!r}, {self.dtype!r}, {self.n_layers}")
        index = {(p.layers, p.checkpointing, p.seq_len, p.micro_batch): p.activations for p in self.probes}
        for ckpt in (False, True):
            for r, (lo, hi) in enumerate(_regimes(self.windows)):
                seqs = sorted({p.seq_len for p in self.probes if p.checkpointing == ckpt
                               and lo <= p.seq_len and (hi is None or p.seq_len < hi)})
                if not seqs:
                    raise ValueError(f"no probes for checkpointing={ckpt} in sequence regime [{lo}, {hi})")
                need = [(s, b) for s in seqs for b in _FIT_BATCHES]
                full = {(s, b): index.get((self.n_layers, ckpt, s, b)) for s, b in need}
                m1 = {(s, b): index.get((1, ckpt, s, b)) for s, b in need}
                m2 = {(s, b): index.get((2, ckpt, s, b)) for s, b in need}
                minis = all(v is not None for v in (*m1.values(), *m2.values()))
                if all(v is not None for v in full.values()):
                    self._fits[ckpt, r] = _fit(full)
                elif minis:
                    self._fits[ckpt, r] = _fit({k: m1[k] + (self.n_layers - 1) * (m2[k] - m1[k]) for k in need})
                else:
                    raise ValueError(f"incomplete probes for checkpointing={ckpt} in regime [{lo}, {hi})")
                alike = self.n_layers <= 2 or any(v is None for v in full.values())  # no full-depth refit
                if minis and alike and not ckpt:
                    self._layer_fits[r] = _fit({k: m2[k] - m1[k] for k in need})

    # -------------------------------------------------------------------------------------------------- queries
    def _regime(self, seq_len: int) -> int:
        return bisect.bisect_right(self.windows, seq_len)

    def activations(self, seq_len: int, micro_batch: int, gradient_checkpointing: bool = False) -> int:
        """Bytes autograd holds at the end of forward for one micro-batch (what measure_activations.py counts)."""
        if seq_len < 1 or micro_batch < 1:
            raise ValueError(f"seq_len and micro_batch must be >= 1, got {seq_len} and {micro_batch}")
        return round(self._fits[bool(gradient_checkpointing), self._regime(seq_len)](seq_len, micro_batch))

    def layer_activations(self, seq_len: int, micro_batch: int) -> int | None:
        """Bytes one decoder layer holds without checkpointing (what a recomputed layer costs), or None when the
        layers are not alike (then only the whole stack was fitted)."""
        fit = self._layer_fits.get(self._regime(seq_len))
        return None if fit is None else round(fit(seq_len, micro_batch))

    def estimate(self, seq_len: int, micro_batch: int, gradient_checkpointing: bool = False) -> ActivationEstimate:
        """The calibrated ``activations``; ``transient`` stays modelled (a llama-like layer, the exact loss term).

        Memoised: a plan asks the same (seq_len, micro_batch, checkpointing) for every stage and offload candidate.
        """
        key = (seq_len, micro_batch, bool(gradient_checkpointing))
        hit = self._estimates.get(key)
        if hit is None:
            acts = self.activations(seq_len, micro_batch, gradient_checkpointing)
            modelled = estimate_activations(self.config, seq_len, micro_batch, attention=self.attention,
                                            dtype=self.dtype, gradient_checkpointing=gradient_checkpointing)
            hit = replace(modelled, activations=acts, generic=False, note=self.note)
            if len(self._estimates) > 4096:
                self._estimates.clear()
            self._estimates[key] = hit
        return hit

    @property
    def exact(self) -> bool:
        """Whether every check at the real depth equals the fit to the byte."""
        return all(self.activations(c.seq_len, c.micro_batch, c.checkpointing) == c.activations for c in self.checks)

    @property
    def check_error(self) -> float:
        """Largest relative error of the fit at the checks (0.0 when exact)."""
        errs = [abs(self.activations(c.seq_len, c.micro_batch, c.checkpointing) - c.activations) / c.activations
                for c in self.checks if c.activations]
        return max(errs, default=0.0)

    @property
    def note(self) -> str:
        lib = ", ".join(f"{k} {v}" for k, v in sorted(self.versions.items()))
        text = f"calibrated: traced on CPU miniatures ({lib})"
        if self.attention == "flash":
            text += "; flash counted as CPU sdpa without a window mask"
        if not self.exact:
            text += f"; off by up to {100 * self.check_error:.1f}% at a full-depth check"
        return text

    # ---------------------------------------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "model_type": str(self.config.get("model_type", "")), "attention": self.attention,
                "dtype": self.dtype, "n_layers": self.n_layers, "windows": list(self.windows),
                "probes": [p.as_list() for p in self.probes], "checks": [c.as_list() for c in self.checks],
                "versions": dict(self.versions), "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], config: Mapping[str, Any], *, cached: bool = True
                  ) -> CalibratedActivations:
        """Rebuild from ``to_dict``; ValueError on anything malformed (the cache then measures again)."""
        try:
            if data["format"] != FORMAT or data["model_type"] != str(config.get("model_type", "")):
                raise ValueError("another format or model_type")
            windows = data["windows"]
            versions = data["versions"]
            if not (isinstance(windows, list) and all(type(w) is int and w > 1 for w in windows)
                    and windows == sorted(set(windows))):
                raise ValueError(f"bad windows {windows!r}")
            if not (isinstance(versions, dict) and all(isinstance(v, str) for v in versions.values())):
                raise ValueError("bad versions")
            if type(data["n_layers"]) is not int or not isinstance(data["seconds"], (int, float)):
                raise ValueError("bad n_layers or seconds")
            return cls(config=config, attention=data["attention"], dtype=data["dtype"], n_layers=data["n_layers"],
                       windows=tuple(windows), probes=tuple(Probe.from_list(r) for r in data["probes"]),
                       checks=tuple(Probe.from_list(r) for r in data["checks"]), versions=dict(versions),
                       seconds=float(data["seconds"]), cached=cached)
        except (KeyError, TypeError, ArithmeticError) as exc:  # ArithmeticError: figures no float holds, a fit
            raise ValueError(f"malformed calibration: {exc!r}") from None  # of repeated lengths


# --------------------------------------------------------------------------------------------------- measuring
def _measure_all(tracer: _Tracer, progress: Callable[[str], None] | None
                 ) -> tuple[tuple[int, ...], list[Probe], list[Probe]]:
    """Trace the miniatures, check at the real depth, and trace the real depth where a check fails."""
    L = tracer.n_layers
    windows = tracer.windows()
    regimes = _regimes(windows)
    if tracer.attention == "flash":  # flash needs no mask: the bytes below the window hold at every length
        windows, regimes = (), regimes[:1]
    minis = tuple(n for n in _MINI_LAYERS if n <= L)
    plans = [_plan_seqs(lo, hi) for lo, hi in regimes]
    probes: list[Probe] = []
    checks: dict[tuple[bool, int], Probe] = {}
    for ckpt in (False, True):  # every run without checkpointing first: each model switches it on once
        for r, (seqs, check_seq) in enumerate(plans):
            for n in minis:
                probes += [Probe(n, ckpt, s, b, tracer.run(n, ckpt, s, b)) for s in seqs for b in _FIT_BATCHES]
            checks[ckpt, r] = Probe(L, ckpt, check_seq, _CHECK_BATCH, tracer.run(L, ckpt, check_seq, _CHECK_BATCH))
    if L > minis[-1]:
        fit = CalibratedActivations(config=tracer.config, attention=tracer.attention, dtype=tracer.dtype_name,
                                    n_layers=L, windows=windows, probes=tuple(probes), checks=(), versions={},
                                    seconds=0.0)
        for (ckpt, r), c in checks.items():
            if fit.activations(c.seq_len, c.micro_batch, ckpt) == c.activations:
                continue
            # the layers are not all alike (interleaved kinds, dense layers before MoE ones): fit the real depth
            if progress:
                progress(f"{tracer.model_type}: the {L} layers are not all alike; tracing the full depth "
                         f"(checkpointing {'on' if ckpt else 'off'}, sequence regime {r + 1} of {len(plans)})")
            seqs = plans[r][0]
            probes += [Probe(L, ckpt, s, b, tracer.run(L, ckpt, s, b)) for s in seqs for b in _FIT_BATCHES]
    return windows, probes, list(checks.values())


def calibrated_activations(config: Mapping[str, Any], *, attention: str = "sdpa", dtype: str = "bf16",
                           cache_dir: str | Path | None = None, use_cache: bool = True,
                           progress: Callable[[str], None] | None = None) -> CalibratedActivations:
    """Calibrate ``config`` once (seconds; read from the cache afterwards) for every seq_len, micro-batch and
    checkpointing setting.

    Raises ``CalibrationUnavailable`` with a one-line reason when torch or transformers is missing or transformers
    cannot build or run the architecture; ValueError for an attention or dtype zerokit does not know.
    ``cache_dir`` overrides ``calibration_cache.default_dir()``; ``use_cache=False`` neither reads nor writes.
    ``progress`` receives a line before tracing starts and when the layers turn out not to be alike.
    """
    if attention not in _ATTENTION:
        raise ValueError(f"attention must be one of {list(_ATTENTION)}, got {attention!r}")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {dtype!r}")
    versions = _versions()
    key = calibration_cache.cache_key(config, attention=attention, dtype=dtype, versions=versions, format=FORMAT)
    if use_cache:
        payload = calibration_cache.load(key, cache_dir)
        if payload is not None:
            try:
                return CalibratedActivations.from_dict(payload, config)
            except ValueError:
                pass  # corrupt or foreign: measure again and overwrite it
    for name in _LIBRARIES:
        _import(name)
    t0 = time.perf_counter()
    with _faithful():
        tracer = _Tracer(config, attention, dtype)
        if progress:
            progress(f"calibrating the activations of {tracer.model_type} ({tracer.n_layers} layers, {attention}, "
                     f"{dtype}) on fake-tensor miniatures")
        budget = BUDGET_S - (time.perf_counter() - t0)
        tracer.deadline = time.perf_counter() + budget
        try:
            with _deadline(budget):
                windows, probes, checks = _measure_all(tracer, progress)
        except _TRACE_ERRORS as exc:  # transformers code we have never seen: a failure means "not calibrated"
            raise CalibrationUnavailable(f"tracing {tracer.model_type} failed ({type(exc).__name__}: "
                                         f"{one_line(exc)})") from None
        except _OverBudget:
            raise CalibrationUnavailable(f"calibrating {tracer.model_type} took over {BUDGET_S:.0f} s (its forward "
                                         "is slow to trace, e.g. a loop over the tokens), so it was stopped; "
                                         "--no-calibrate skips it") from None
    cal = CalibratedActivations(config=config, attention=attention, dtype=dtype, n_layers=tracer.n_layers,
                                windows=windows, probes=tuple(probes), checks=tuple(checks), versions=versions,
                                seconds=round(time.perf_counter() - t0, 3))
    if use_cache:
        calibration_cache.store(key, cal.to_dict(), cache_dir)
    return cal


_TRACE_ERRORS = (RuntimeError, ValueError, TypeError, KeyError, AttributeError, IndexError, NotImplementedError,
                 AssertionError, ImportError, OSError, ArithmeticError)
"""What transformers code we have never seen may raise building or running a miniature (rwkv's 1-layer one divides
by zero: ArithmeticError)."""


_LIBRARIES = ("torch", "transformers")


def _versions() -> dict[str, str]:
    """torch and transformers versions from their package metadata, so a cache hit imports neither."""
    from importlib import metadata

    versions = {}
    for name in _LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:  # an install without metadata: ask the module
            versions[name] = str(getattr(_import(name), "__version__", "unknown"))
    return versions


def _import(name: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise CalibrationUnavailable(f"{name} is not installed: activations of an unmodelled architecture stay "
                                     f"generic (pip install torch transformers to calibrate them)") from None


def calibrate(config: Mapping[str, Any], seq_len: int, micro_batch: int, *, attention: str = "sdpa",
              dtype: str = "bf16", gradient_checkpointing: bool = False) -> ActivationEstimate:
    """One estimate from a fresh, uncached calibration (the earlier per-query API, with its note)."""
    cal = calibrated_activations(config, attention=attention, dtype=dtype, use_cache=False)
    est = cal.estimate(seq_len, micro_batch, gradient_checkpointing)
    return replace(est, note="measured on a CPU miniature")
