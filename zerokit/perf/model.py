"""The step-time model: one optimizer step of one candidate setup, from FLOPs, bytes and a MachinePerf.

    step = accumulation x (forward + backward + recomputation + per-micro-batch communication and offload)
           + the communication, offload and optimizer step that happen once per optimizer step

What DeepSpeed 0.19 does, and so what is counted (deepspeed/runtime/engine.py `allreduce_gradients`,
zero/stage_1_and_2.py, zero/stage3.py):
- ZeRO-0/1 reduce gradients once per optimizer step, after the last micro-batch's backward (all-reduce for 0,
  reduce-scatter for 1): accumulation amortises them. ZeRO-2/3 reduce-scatter in *every* backward, overlapped with
  it when `overlap_comm` is on and the device runs collectives beside compute.
- ZeRO-1/2 all-gather the updated parameters after the optimizer step. ZeRO-3 all-gathers every parameter-owning
  module in the forward (frozen ones too), prefetching the next while one computes, and in the backward again those
  neither its reuse window nor its prefetcher kept (`ModelFlops.regathered`: at the default 1e9 a model below 1B
  stays gathered). On DeepSpeed's CPU accelerator only those prefetched gathers overlap anything: gloo runs them on
  its own threads.
- Ring collectives move (W-1)/W of the data per rank for a reduce-scatter or an all-gather, twice that for an
  all-reduce; a multi-node ring runs at the slower of the NVLink share and the node's network share per GPU.
- Optimizer offload copies each micro-batch's reduced gradient partition to the host in fp32 (cast on the device
  first: `async_inplace_copy_grad_to_fp32_buffer_from_gpu`, stage3 `_offload_grad_partition_at_boundary`; ZeRO-1
  once per step), runs CPU-Adam on it, casts the updated fp32 partition to half precision on the host and copies it
  back: ZeRO-1/2 through a (pinned with `pin_memory`) bit16 buffer; ZeRO-3 with one blocking `copy_`, which torch
  casts on the host into a pageable temporary, so that copy runs at the pageable rate whatever `pin_memory` says
  (with parameter offload the half-precision partition stays on the host: the cast alone). Parameter offload (ZeRO-3)
  copies the rank's partition to the device in every forward, and for what backward gathers again. NVMe offload
  adds reading and writing the optimizer states (12 bytes per parameter) or the parameters from the drive.
- Only the trainable parameters have gradients, optimizer states and gradient reduces (LoRA); frozen ones still cost
  FLOPs and ZeRO-3 all-gathers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from zerokit._dataclass import dataclass
from zerokit.errors import BadInput
from zerokit.perf.flops import ModelFlops, model_flops
from zerokit.perf.machine import MachinePerf

_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
MASTER_BYTES = 4  # fp32 master weights and gradients: what optimizer offload copies each gradient to the host as
OPTIMIZER_STATE_BYTES = 12  # fp32 master weights, Adam m and v, per parameter (what NVMe offload swaps)
_LOSS_PASSES = 6  # logits upcast, log-softmax, loss and their gradients: fp32 passes over b x s x vocab
_OPTIMIZER_PASSES = 6  # per trainable parameter of the shard: gradient to fp32, norm, clip, fp32 -> half copy
_OPS_PER_LAYER = 40  # kernels one decoder layer launches in the forward (backward: twice as many)


@dataclass(slots=True)
class StepTime:
    """One optimizer step of one setup; CONTRACT.md's `performance` fields (seconds unless named otherwise)."""

    step_time_s: float
    tokens_per_s: float
    """Tokens of the whole job (every rank) per second."""
    mfu: float
    """Model FLOPs utilisation: forward + backward matmul FLOPs (no recomputation) / (step time x dense peak); the
    peak is the GPU's published one, else the kernel figures' best (`_mfu_peak`)."""
    compute_s: float
    """Forward, backward and recomputation of every micro-batch: matmuls, elementwise kernels, launches."""
    communication_s: float
    """Every collective of the step, hidden or not."""
    exposed_communication_s: float
    """The part of communication_s that overlap_comm and prefetch do not hide."""
    offload_s: float
    """Host <-> device copies and NVMe reads/writes of offload."""
    optimizer_s: float
    """The optimizer step: CPU-Adam when offloaded, the device's Adam otherwise."""
    overhead_s: float
    """Gradient-bucket flushes, ZeRO-3's per-module fetch/release hooks, the fixed per-step cost, and on a GPU whose
    host the probe timed, the host's time beyond the device's (`host_excess`)."""
    tokens_per_step: int
    flops_per_step: float
    """Model FLOPs of one rank per optimizer step (the MFU numerator)."""

    def time_to_train_s(self, tokens: float) -> float:
        """Seconds to train `tokens` tokens at this step time."""
        return time_to_train_s(self, tokens)

    def train_steps(self, tokens: float) -> int:
        """Optimizer steps that train `tokens` tokens."""
        return train_steps(self, tokens)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def time_to_train_s(step: StepTime, tokens: float) -> float:
    """Seconds to process `tokens` tokens (whole optimizer steps: a partial last step still takes a step)."""
    return train_steps(step, tokens) * step.step_time_s


def train_steps(step: StepTime, tokens: float) -> int:
    """Optimizer steps that process `tokens` tokens, a partial last step counted whole (the Trainer's max_steps)."""
    if tokens <= 0:
        raise BadInput(f"--train-tokens must be positive, got {tokens!r}")
    return math.ceil(tokens / step.tokens_per_step)


def forward_backward_parts(mf: ModelFlops, perf: MachinePerf, micro_batch: int, seq_len: int, dtype: str = "bf16",
                           attention: str = "sdpa") -> tuple[float, float, float]:
    """(matmul s, elementwise bytes, kernel-launch s) of one micro-batch's forward and backward, without
    recomputation; `zerokit probe` inverts this on a reference block to measure the elementwise rate."""
    tokens = micro_batch * seq_len
    matmul = 0.0
    for m in mf.layer_matmuls + mf.head_matmuls:
        size = (tokens * m.token_share * m.in_features * m.out_features) ** (1 / 3)
        matmul += 3.0 * m.flops_per_token * tokens / perf.matmul_flops_at(dtype, size)
    for g, pairs in mf.attention_pairs(seq_len, attention):
        matmul += 12.0 * g.heads * g.head_dim * g.layers * pairs * micro_batch / perf.attention_flops_at(
            dtype, (pairs * g.head_dim) ** (1 / 3))
    nbytes = _BYTES[dtype]
    elem = 3.0 * tokens * mf.elementwise_per_token * nbytes + tokens * mf.vocab_size * 4.0 * _LOSS_PASSES
    return matmul, elem, 3.0 * (_OPS_PER_LAYER * mf.num_layers + 10) * perf.op_overhead_s


def _matmul_table(mf: ModelFlops) -> tuple[tuple, tuple, tuple]:
    """(the distinct matmul shapes (token share, in, out), then the layer's and the head's matmuls as (FLOPs per
    token, index of their shape)): what `_compute_parts` reads, kept on the ModelFlops (it depends on the model
    alone)."""
    hit = mf._cache.get("matmul table")
    if hit is None:
        shapes: dict[tuple[float, int, int], int] = {}

        def terms(matmuls: tuple) -> tuple:
            return tuple((m.flops_per_token, shapes.setdefault((m.token_share, m.in_features, m.out_features),
                                                               len(shapes))) for m in matmuls)

        layer, head = terms(mf.layer_matmuls), terms(mf.head_matmuls)
        hit = mf._cache["matmul table"] = (tuple(shapes), layer, head)
    return hit


_LORA_KERNELS = 12
"""Kernels of one adapted module per micro-batch beside its matmuls' time: forward A, B, the scaling and the add;
backward each product's input and weight gradients, the scaling's and the add's gradients, and the casts."""
_DROPOUT_KERNELS, _DROPOUT_BYTES, _DROPOUT_BACKWARD_BYTES = 3, 12, 6
"""With dropout: the mask, its product and the backward's, moving 12 bytes an input element (mask, input and
output in 16 bits forward; gradient, mask and output backward); where the machine's dropout rate was measured
(`dropout_elements_per_s`) the forward runs at it and the backward's product moves its 6 bytes."""


_LORA_FORWARD_KERNELS, _DROPOUT_FORWARD_KERNELS, _DROPOUT_FORWARD_BYTES = 4, 2, 6
"""The forward's share of the above (A, B, the scaling and the add; the mask and its product, moving 6 bytes an
element): what recomputation runs again."""


def _saved_parts(perf: MachinePerf, copies: float, head: float, tokens: int, dtype: str) -> tuple[float, float]:
    """(seconds, FLOPs) one micro-batch's modules_to_save copies add to the backward: the head's weight gradient
    (tokens x hidden by tokens x vocabulary, at the rate of its shape), and the embedding's, a zero-filled table of
    its size into which each token's row of gradient is added."""
    seconds = flops = 0.0
    if head:
        flops = 2.0 * tokens * head
        seconds = flops / perf.matmul_flops_at(dtype, (tokens * head) ** (1 / 3))
    table = copies - head
    if table:
        moved = _BYTES.get(dtype, 2) * table
        seconds += moved / perf.elementwise_at(moved) + 3 * perf.op_overhead_s
    return seconds * perf.compute_scale, flops


def _lora_parts(perf: MachinePerf, lora: tuple | None, trainable: float, tokens: int, dtype: str, peak: float,
                fp32: bool) -> tuple[float, float, int, float]:
    """(seconds, FLOPs, parameter-owning modules, forward seconds) of one micro-batch's LoRA adapters, forward and
    backward; the forward's seconds are what gradient checkpointing runs again (the adapters and their dropout sit
    inside the checkpointed layers: the mask is drawn anew, from the restored random state).

    Each adapted linear (in -> out) runs x -> dropout -> A (in x r) -> B (r x out) -> x scaling, added to the
    frozen output: two thin products, each three times (forward, input and weight gradients), at the rate the
    machine reaches for their shapes (far below the peak: r is 8-64), plus a dozen kernels and the dropout's
    element passes; A and B each own a weight, which ZeRO-3 hooks like any module's. `fp32`: LoRA's adapters at
    ZeRO-3 stay fp32 (`PeftPlan.activation_setup`: the engine casts nothing on a model zero.Init built; QLoRA's base
    loads without zero.Init, so the engine casts its adapters), so their products run at the fp32 rate and PEFT
    casts around them (`_adapter_pass_bytes`). Adapter parameters outside `lora`'s linears (MoE experts and
    routers) run at the peak."""
    rank, dropout, linears = lora[:3] if lora is not None else (0, 0.0, ())
    base = _BYTES.get(dtype, 2)  # the frozen linear's output and the layer's activations
    dtype = "fp32" if fp32 and "fp32" in perf.matmul else dtype
    seconds = flops = forward = 0.0
    modules = 0
    rest = trainable
    e, top = _BYTES.get(dtype, 2), perf.peak_flops(dtype)
    out_forward, in_forward, out_backward, in_backward = _adapter_pass_bytes(base, 4 if fp32 else base)
    for n_in, n_out, copies in linears:
        for k, n in ((n_in, rank), (rank, n_out)):
            f = 6.0 * tokens * k * n * copies
            # The curve reads a product by its volume, as a square one; a thin one (r is 8-64) moves its wide
            # operand, tokens x k or tokens x n, in each of its three passes, and where the curve's small squares
            # measure kernel launches (a GPU: 2 TFLOP/s at 512^3) that volume prices it ten times too slow: the
            # memory pass at full rate bounds it there (its launches are among the kernels below). Where the
            # curve is compute-bound at that volume (a CPU), it is the smaller of the two and stays.
            wide = tokens * max(k, n) * e
            roofline = max(f / top, 3.0 * copies * wide / perf.elementwise_at(wide))
            t = min(f / perf.matmul_flops_at(dtype, (tokens * k * n) ** (1 / 3)), roofline)
            seconds += t
            forward += t / 3.0
            flops += f
        kernels, forward_kernels = _LORA_KERNELS, _LORA_FORWARD_KERNELS
        if dropout:
            kernels += _DROPOUT_KERNELS
            forward_kernels += _DROPOUT_FORWARD_KERNELS
            elements = tokens * n_in
            if perf.dropout_elements_per_s:
                mask = copies * elements / perf.dropout_elements_per_s
                moved = _DROPOUT_BACKWARD_BYTES * elements
                seconds += mask + copies * moved / perf.elementwise_at(moved)
                forward += mask
            else:
                moved = _DROPOUT_BYTES * elements
                seconds += copies * moved / perf.elementwise_at(moved)
                moved = _DROPOUT_FORWARD_BYTES * elements
                forward += copies * moved / perf.elementwise_at(moved)
        if out_forward:  # fp32 adapters' passes around the products (`_adapter_pass_bytes`), at their size's rate
            moved = tokens * (n_out * out_forward + n_in * in_forward)
            t = copies * moved / perf.elementwise_at(moved)
            forward += t
            moved_back = tokens * (n_out * out_backward + n_in * in_backward)
            seconds += t + copies * moved_back / perf.elementwise_at(moved_back)
        seconds += copies * kernels * perf.op_overhead_s
        forward += copies * forward_kernels * perf.op_overhead_s
        rest -= rank * (n_in + n_out) * copies
        modules += 2 * copies
    if rest > 0:
        seconds += 6.0 * rest * tokens / peak
        forward += 2.0 * rest * tokens / peak
        flops += 6.0 * rest * tokens
    scale = perf.compute_scale
    return seconds * scale, flops, modules, forward * scale


def _adapter_pass_bytes(base: int, adapter: int) -> tuple[int, int, int, int]:
    """Bytes PEFT's LoRA linear moves beyond its products and dropout where its adapters are wider than the base
    (fp32 adapters at ZeRO-3, `adapters_in_fp32`), per output and per input element: (forward per output, forward
    per input, backward per output, backward per input); the forward's are what recomputation runs again. `base`,
    `adapter`: their element bytes. Zeros where they match.

    peft.tuners.lora.layer.Linear.forward computes `result + lora_B(lora_A(dropout(x))) * scaling` on the frozen
    linear's output. fp32 adapters add casts: the input to fp32 (`_cast_input_dtype`) and the sum back
    (`result.to(torch_result_dtype)`), and backward the casts of their gradients and of the frozen output's
    gradient out of the fp32 sum; and the scaling and the add move 4-byte elements where 2-byte ones would do.
    On this CPU one rank's LoRA micro-batch (llama 256 x 4 layers, 512 tokens, rank 8) took 23 ms longer,
    forward and backward, with fp32 adapters than with bf16 ones; this prices it at 22 ms. In the step-time
    benchmark's CPU measurements, LoRA at ZeRO-3 went from 10-11% fast to 4-6% fast (three measurements, two of
    which had ranked it against ZeRO-3 or checkpointing the wrong way), and from 4% fast to 8% slow on the Intel
    one.

    The bytes the same two kernels move at matched widths are priced as their launches (`_LORA_KERNELS`) only:
    counted at the probe's elementwise rate as well, they made the 2-byte LoRA cases of the CPU measurements
    4-11 points slower than measured (tests/data/step_time)."""
    if adapter == base:
        return 0, 0, 0, 0
    cast = base + adapter  # one read in one width, one write in the other
    wider = adapter - base
    # forward: the scaling reads and writes the adapter's output, the add reads it and writes its sum wider
    # backward: the sum's gradient cast to fp32, the frozen output's cast back, the scaling's gradient wider
    return 4 * wider + cast, cast, 2 * wider + 2 * cast, cast


_DEQUANT_BYTES = 2.5
"""Bytes a dequantization moves per 4-bit element where the machine's rate was not measured: the packed half
byte read, the 16-bit weight written (absmax and the nested constants are 1/64 of that)."""
_DEQUANT_KERNELS = 2
"""Kernels of an unmeasured 4-bit linear's dequantization per pass: the nested absmax, then the weight."""


def dequantization_s(perf: MachinePerf, elements: float, modules: int) -> float:
    """Seconds one pass (forward, input gradient or recomputation) over a QLoRA base spends beyond the 16-bit
    linears it replaces: `modules` bitsandbytes 4-bit linears holding `elements` weights, each dequantized whole on
    every call (bitsandbytes' MatMul4Bit: forward and backward both dequantize). At the machine's measured rates
    (`dequant_elements_per_s`, `quantized_linear_overhead_s`), else as a memory pass and two kernels a module."""
    if not modules:
        return 0.0
    if perf.dequant_elements_per_s:
        seconds = elements / perf.dequant_elements_per_s + modules * perf.quantized_linear_overhead_s
    else:
        moved = _DEQUANT_BYTES * elements
        seconds = moved / perf.elementwise_at(moved / modules) + modules * _DEQUANT_KERNELS * perf.op_overhead_s
    return seconds * perf.compute_scale


def _compute_parts(mf: ModelFlops, perf: MachinePerf, micro_batch: int, seq_len: int, dtype: str,
                   attention: str) -> tuple[float, ...]:
    """Per micro-batch: (forward s, backward input-gradient s (scores: gradients of Q, K, P and V), backward
    weight-gradient s at full training, recomputation s, forward weight-matmul FLOPs, forward score FLOPs, the
    matmul peak, MFU's peak: the best of the matmul and attention figures, which both price FLOPs MFU counts).
    Forward and backward include elementwise kernels, the loss and kernel launches, and the times are scaled by
    the machine's `compute_scale` (a DeepSpeed engine's own cost on top of the kernels'). Cached on the ModelFlops:
    the planner asks for the same (micro-batch, sequence, dtype) for several setups, and the cache turns a call
    into a dictionary lookup."""
    key = (id(perf), micro_batch, seq_len, dtype, attention)
    hit = mf._cache.get(key)
    if hit is not None and hit[0] is perf:
        return hit[1]
    tokens = micro_batch * seq_len
    shapes, layer, head = _matmul_table(mf)
    # matmuls of one shape (q and o, gate and up) run at one rate
    sizes = [(tokens * share * n_in * n_out) ** (1 / 3) for share, n_in, n_out in shapes]
    rates = [perf.matmul_flops_at(dtype, size) for size in sizes]
    layer_t = head_t = weight_flops = 0.0
    for flops_per_token, shape in layer:
        f = flops_per_token * tokens
        layer_t += f / rates[shape]
        weight_flops += f
    for flops_per_token, shape in head:
        f = flops_per_token * tokens
        head_t += f / rates[shape]
        weight_flops += f
    # layer_t and head_t are a third of the layers' and the head's forward-and-backward matmul time; the forward
    # product's own share of it, where the machine measured one (else a third: forward = each backward product)
    layer_fwd = layer_t
    forward = backward = weight_grad = layer_t + head_t  # each backward product: input gradients, weight gradients
    if perf.matmul_forward.get(dtype):
        fwd_rates = [perf.matmul_forward_flops_at(dtype, size) for size in sizes]
        layer_fwd = _forward_part(layer, fwd_rates, tokens, layer_t)
        forward = layer_fwd + _forward_part(head, fwd_rates, tokens, head_t)
        backward = weight_grad = (3.0 * backward - forward) / 2.0
    if perf.matmul_input_grad.get(dtype):
        # the input-gradient product's own share, where the machine measured one: what a frozen (LoRA) base runs;
        # the weight gradients are the rest of the forward and backward
        in_rates = [perf.matmul_input_grad_flops_at(dtype, size) for size in sizes]
        total = 3.0 * (layer_t + head_t)
        backward = _input_grad_part(layer + head, in_rates, tokens, layer_t + head_t, forward)
        weight_grad = total - forward - backward
    score_t = score_flops = 0.0
    for g, pairs in mf.attention_pairs(seq_len, attention):
        f = 4.0 * g.heads * g.head_dim * g.layers * pairs * micro_batch
        score_t += f / perf.attention_flops_at(dtype, (pairs * g.head_dim) ** (1 / 3))
        score_flops += f
    nbytes = _BYTES[dtype]
    elem = tokens * mf.elementwise_per_token * nbytes / perf.elementwise_at(tokens * mf.hidden_size * nbytes)
    score_fwd = score_bwd = 0.0
    if attention == "eager":  # the s x s score matrix goes through memory, pass by pass (`eager_score_bytes`)
        fwd_b, bwd_b = eager_score_bytes(nbytes, mf.score_softcap)
        for g, pairs in mf.attention_pairs(seq_len, attention):
            elements = g.heads * pairs * micro_batch  # one layer's scores
            rate = perf.elementwise_at(elements * nbytes)
            score_fwd += g.layers * elements * fwd_b / rate
            score_bwd += g.layers * elements * bwd_b / rate
    elem_fwd, elem_bwd = elem + score_fwd, 2.0 * elem + score_bwd
    logits = tokens * mf.vocab_size * 4.0
    loss = logits * _LOSS_PASSES / perf.elementwise_at(logits)
    ops = (_OPS_PER_LAYER * mf.num_layers + 10) * perf.op_overhead_s
    k = perf.compute_scale  # what a DeepSpeed engine adds to the kernels' own time (probe-measured, or the preset's)
    result = (k * (forward + score_t + elem_fwd + loss / 3.0 + ops),                     # forward
              k * (backward + 2.0 * score_t + elem_bwd + loss * 2.0 / 3.0 + 2.0 * ops),  # backward: input gradients
              k * weight_grad,                                                           # backward: weight gradients
              k * (layer_fwd + score_t + elem_fwd + ops),                                # recomputing the layers
              weight_flops, score_flops, perf.peak_flops(dtype), _mfu_peak(perf, dtype))
    if len(mf._cache) > 4096:
        mf._cache.clear()
    mf._cache[key] = (perf, result)
    return result


def eager_score_bytes(e: int, softcap: bool = False) -> tuple[int, int]:
    """Bytes that move per element of eager attention's score matrix, (forward, backward), as transformers 5's
    `eager_attention_forward` runs it in the activation dtype of `e` bytes: the scaling and the mask each read and
    write the matrix (2e, 2e), softmax reads it and writes fp32 (e + 4), the cast back reads that and writes e
    (4 + e; none in fp32). Backward: the cast's gradient (e + 4), softmax's (reads its output and the gradient in
    fp32, writes one: 12), the cast to the activation dtype (4 + e) and the scaling's (2e). A soft-capped model
    (gemma2) divides, takes tanh and multiplies: 6e forward, 7e backward (tanh's reads its output too). The passes
    run at the machine's elementwise rate; sdpa and flash fuse them into the score kernel."""
    cast = 4 + e if e != 4 else 0
    forward = 2 * e + 2 * e + (e + 4) + cast + (6 * e if softcap else 0)
    backward = cast + 12 + cast + 2 * e + (7 * e if softcap else 0)
    return forward, backward


def _mfu_peak(perf: MachinePerf, dtype: str) -> float:
    """MFU's denominator: the GPU's published dense peak (`MachinePerf.dense_peak`), as PaLM's MFU and every
    published MFU use it; without one, the best rate the machine showed: the best of its matmul, forward-product,
    input-gradient-product and attention figures (all price FLOPs MFU counts: a frozen LoRA base runs only forward
    and input-gradient products, which may outrun the square-product curve), over compute_scale where that is
    below 1 (a profile whose DeepSpeed step ran faster than its kernel figures reached 1 / compute_scale of them),
    so that MFU stays at most 100%."""
    published = perf.dense_peak.get(dtype)
    if published:
        return published
    best = max((perf.peak_flops(dtype), *(f for _, f in perf.attention.get(dtype, ())),
                *(f for _, f in perf.matmul_forward.get(dtype, ())),
                *(f for _, f in perf.matmul_input_grad.get(dtype, ()))))
    return best / min(1.0, perf.compute_scale)


def _forward_part(matmuls: tuple, fwd_rates: list[float], tokens: int, third: float) -> float:
    """The forward products' time of `matmuls` ((FLOPs per token, shape index), ...) at the forward rates, held to
    1/6..1/2 of their forward and backward (3 x `third`): a forward measured beyond that is noise, not a kernel."""
    t = sum(flops_per_token * tokens / fwd_rates[shape] for flops_per_token, shape in matmuls)
    return min(1.5 * third, max(0.5 * third, t))


def _input_grad_part(matmuls: tuple, in_rates: list[float], tokens: int, third: float, forward: float) -> float:
    """The input-gradient products' time of `matmuls` at the measured rates, held to 1/6 of their forward and
    backward (3 x `third`) at least, and to what the forward leaves less 1/60 for the weight gradients at most: a
    product measured beyond that is noise. (On the AMD EPYC it is 60-80% of a linear's forward and backward.)"""
    t = sum(flops_per_token * tokens / in_rates[shape] for flops_per_token, shape in matmuls)
    return min(max(0.5 * third, 2.95 * third - forward), max(0.5 * third, t))


def step_time(model: Mapping[str, Any] | ModelFlops, perf: MachinePerf, *, parameters: int, seq_len: int,
              micro_batch: int, grad_accum: int = 1, gpus_per_node: int = 1, nodes: int = 1, zero_stage: int = 0,
              offload_optimizer: str = "none", offload_param: str = "none", gradient_checkpointing: bool = False,
              precision: str = "bf16", attention: str = "sdpa", overlap_comm: bool = True,
              reduce_bucket_size: float = 5e8, allgather_bucket_size: float = 5e8,
              prefetch_bucket_size: float = 5e7, persistence_threshold: float = 1e5, pin_memory: bool = True,
              trainable_parameters: int | None = None,
              lora: tuple | None = None, saved: tuple[int, int] = (0, 0), reuse_distance: float = 1e9) -> StepTime:
    """The time of one optimizer step of this setup on `perf`'s machine.

    `model`: a transformers config dict or its ModelFlops (`model_flops(config)`, cached per dict).
    `parameters`: total parameters; `trainable_parameters`: those with gradients (default: all; LoRA: the adapters).
    A setup asked for again (the planner re-plans the same candidates) is answered from a memo on the ModelFlops.
    Bucket sizes are DeepSpeed's, in elements (`reduce_bucket_size`, `allgather_bucket_size`,
    `stage3_prefetch_bucket_size`); `prefetch_bucket_size` 0 turns ZeRO-3 prefetch off. `persistence_threshold` is
    `stage3_param_persistence_threshold` (DeepSpeed's default 1e5; the HF Trainer's "auto" is 10 x hidden): ZeRO-3
    keeps smaller parameters whole and gathers only the rest. `reuse_distance` is `stage3_max_reuse_distance` and
    `stage3_max_live_parameters` (DeepSpeed's default 1e9 each; a zerokit plan writes the two alike): the modules
    that close forward stay gathered into backward, which gathers only the rest again (`ModelFlops.regathered`).
    `pin_memory` is the offload config's: pinned host buffers copy at the pinned rate. `lora`: (rank, dropout, (in,
    out, copies) of each adapted linear[, 4-bit weights, 4-bit linears]), as `PeftPlan.lora_work` gives it: the
    adapters priced by their shapes (`_lora_parts`), and for QLoRA the dequantization of the 4-bit base in every pass
    (`dequantization_s`); without it adapter parameters run at the peak rate. `saved`: (parameters, of which the head's) of PEFT's modules_to_save
    copies, part of `trainable_parameters` (`PeftPlan.saved_work`): a copy runs instead of its frozen original, so
    it adds only its weight gradient (the head's product; the embedding's gradient is a zero-filled table and a
    scatter of the tokens' rows), besides the states, reduces and optimizer step every trainable parameter costs.
    """
    mf = model if model.__class__ is ModelFlops else model_flops(model)
    return memoised_step_time(mf, perf, parameters, seq_len, micro_batch, grad_accum, gpus_per_node, nodes,
                              zero_stage, offload_optimizer, offload_param, gradient_checkpointing, precision,
                              attention, overlap_comm, reduce_bucket_size, allgather_bucket_size, prefetch_bucket_size,
                              persistence_threshold, pin_memory, trainable_parameters, lora, saved, reuse_distance)


def memoised_step_time(mf: ModelFlops, perf: MachinePerf, *inputs: Any) -> StepTime:
    """`step_time_of`, memoised on the ModelFlops, the arguments as one tuple (`step_time`'s memo)."""
    key = (id(perf), inputs)
    memo = mf._cache.get(key)
    if memo is not None and memo[0] is perf:
        return memo[1]
    result = step_time_of(mf, perf, *inputs)
    if len(mf._cache) > 8192:
        mf._cache.clear()
    mf._cache[key] = (perf, result)
    return result


def host_kernels(mf: ModelFlops) -> float:
    """The kernels one micro-batch's forward and backward launch, as the time model counts them (a layer's forward
    _OPS_PER_LAYER, its backward twice as many, ten for the embedding, head and loss, each pass): what
    `MachinePerf.host_op_s` is per."""
    return 3.0 * (_OPS_PER_LAYER * mf.num_layers + 10)


def adapted_linears(lora: tuple | None) -> int:
    """The LoRA-adapted linears of `lora` ((rank, dropout, (in, out, copies) of each adapted linear, ...), as
    `PeftPlan.lora_work` gives it; None: full training), what `host_adapter_s` is per: the step time's host figure
    and the plan's reason that the host paces a micro-batch both count them here."""
    return 0 if lora is None else sum(copies for *_, copies in lora[2])


def host_micro_batch_s(perf: MachinePerf, mf: ModelFlops, adapted: int, checkpointing: bool) -> float:
    """The GPU host's own time of one micro-batch's forward and backward, its bucket flushes left out: `host_op_s`
    a kernel of `host_kernels`, `host_adapter_s` each of the `adapted` LoRA linears, a third more to recompute under
    checkpointing (0 where the probe did not time the host)."""
    host = host_kernels(mf) * perf.host_op_s + adapted * perf.host_adapter_s
    return host * 4.0 / 3.0 if checkpointing else host


def host_excess(perf: MachinePerf, mf: ModelFlops, zero_stage: int, grad_accum: int, micro_device: float,
                flushes: int, adapted: int, checkpointing: bool, optimizer: float, offloaded: bool) -> float:
    """Seconds a GPU's host adds to a ZeRO-0/1/2 step beyond the device's time, where the probe timed the host
    (`MachinePerf.host_op_s`; 0 elsewhere).

    The host queues a micro-batch's kernels ahead of the device, so the micro-batch takes the longer of the two:
    the device's `micro_device` (its kernels, and `bucket_flush_s` a flush) or the host's (`host_op_s` a kernel of
    `host_kernels`, `host_adapter_s` an adapted linear, a third more to recompute under checkpointing, and
    `host_flush_s` a gradient-bucket flush: ZeRO-2 flushes in every backward, ZeRO-1 in the last). The optimizer
    step waits for the device (the gradient norm) and then takes at least `host_optimizer_s` of host time, where
    the device steps the optimizer (not offloaded). On an H200 a 16-layer 2048-wide llama trained at 512 to 2,048
    tokens a micro-batch in 0.15-0.19 s a step, its kernels a third of that (tests/data/gpu/2026-11-28-h200-*).
    ZeRO-3 is left out: on one GPU its fetch hooks synchronise the device before each module, so host and device
    take turns, which the sum of its kernels and `zero3_module_overhead_s` prices."""
    if not perf.host_op_s or zero_stage == 3 or perf.device != "gpu":
        return 0.0
    host = host_micro_batch_s(perf, mf, adapted, checkpointing)
    # a micro-batch that flushes: the host's time of the flushes against the device's stalls
    flushing = max(0.0, host + flushes * perf.host_flush_s - micro_device - flushes * perf.bucket_flush_s)
    plain = max(0.0, host - micro_device)
    if zero_stage == 2:
        excess = grad_accum * flushing
    elif zero_stage == 1:
        excess = (grad_accum - 1) * plain + flushing
    else:
        excess = grad_accum * plain
    if zero_stage and not offloaded:
        excess += max(0.0, perf.host_optimizer_s - optimizer)
    return excess


def adapters_in_fp32(zero_stage: int, lora: tuple | None, saved: tuple[int, int]) -> bool:
    """Whether `step_time`'s adapters train in fp32: `PeftPlan.fp32_adapters`'s rule in this model's arguments (LoRA
    at ZeRO-3, not QLoRA, whose `lora` adds its 4-bit weights, and without modules_to_save copies, `saved`'s
    parameters); tests/test_peft_plan.py holds the two to the same answer."""
    return zero_stage == 3 and lora is not None and len(lora) <= 3 and not saved[0]


def adapter_persistence(lora: tuple, persistence_threshold: float) -> tuple[int, float, int, float]:
    """(adapter weights ZeRO-3 keeps whole, their elements, adapter weights it gathers, theirs) of `lora` (rank,
    dropout, (in, out, copies) of each adapted linear, as `PeftPlan.lora_work` gives it): A is rank x in, B out x
    rank, and ZeRO-3 keeps a parameter whole on every rank where its elements are at most
    `stage3_param_persistence_threshold` (`DeepSpeedZeRoOffload.mark_persistent_parameters`). At rank 8 on a
    4096-wide llama (HF's "auto" threshold: 10 x hidden, 40,960 elements) that is every A and B whose other side is
    at most 5,120 wide: all but the MLP's 11,008-wide side (gate's and up's B, down's A), gathered in each pass."""
    rank, linears = lora[0], lora[2]
    kept = big = 0
    kept_elements = big_elements = 0.0
    for n_in, n_out, copies in linears:
        for size in (rank * n_in, n_out * rank):
            if size <= persistence_threshold:
                kept += copies
                kept_elements += size * copies
            else:
                big += copies
                big_elements += size * copies
    return kept, kept_elements, big, big_elements


def bucket_flushes(trainable: float, reduce_bucket_size: float) -> int:
    """How many times one reduce of `trainable` gradients fills and flushes a `reduce_bucket_size` bucket, where
    their tensors are not known (LoRA's adapters: small ones, which fill buckets end to end)."""
    return max(1, math.ceil(trainable / max(reduce_bucket_size, 1.0)))


def flushes(mf: ModelFlops, trainable: float, reduce_bucket_size: float) -> int:
    """How many times one backward flushes a `reduce_bucket_size` bucket. Full training of a model whose tensors
    are known (`ModelFlops.gradient_order`): DeepSpeed's rule replayed (`reduce_independent_p_g_buckets_and_remove_
    grads`): a gradient that would overfill the bucket flushes it first (an empty one too), so a tensor larger than
    the bucket goes alone, and the backward's epilogue flushes the rest. A plan's hidden^2 bucket flushes a 0.9B
    llama's 16 layers 132 times, not the 209 buckets its parameters fill (benchmarks/flush_count.py). Otherwise
    `bucket_flushes`."""
    order = mf.gradient_order
    if not order or trainable < mf_parameters(mf):
        return bucket_flushes(trainable, reduce_bucket_size)
    key = ("flushes", reduce_bucket_size)
    hit = mf._cache.get(key)
    if hit is None:
        calls = filled = 0
        for n in order:
            if filled + n > reduce_bucket_size:
                calls, filled = calls + 1, 0
            filled += n
        hit = mf._cache[key] = calls + 1
    return hit


def mf_parameters(mf: ModelFlops) -> int:
    """The parameters of `gradient_order` (every tensor once)."""
    hit = mf._cache.get("parameters")
    if hit is None:
        hit = mf._cache["parameters"] = sum(mf.gradient_order)
    return hit


def exposed_hooks(hooks: float, micro_compute: float, world: int, device: str) -> float:
    """The seconds of one micro-batch's ZeRO-3 fetch/release hooks (`hooks`, host time) that the step waits for.

    On one rank DeepSpeed's fetch waits for the device: `NoGatherHandle.wait` and `NoGatherCoalescedHandle.wait`
    (zero/partition_parameters.py) call `current_stream().synchronize()` before every module, so the host's hook
    time adds to the kernels' (the one-GPU runs in tests/data/gpu measured it so). On several GPUs the fetch waits
    on the all-gather's handle, which orders the streams without blocking the host, and the host blocks only
    where the coordinator caps its fetch and reduce events in flight (`__max_ongoing_fetch_events`,
    `max_param_reduce_events`): it runs ahead of the kernels it queues, so its hooks hide behind the micro-batch's
    compute and only what exceeds it is exposed (the host-bound case: a small model, few tokens). DeepSpeed's CPU
    accelerator runs kernels on the host itself: nothing hides there."""
    if world > 1 and device == "gpu":
        return max(0.0, hooks - micro_compute)
    return hooks


def step_time_of(mf: ModelFlops, perf: MachinePerf, parameters: int, seq_len: int, micro_batch: int, grad_accum: int,
               gpus_per_node: int, nodes: int, zero_stage: int, offload_optimizer: str, offload_param: str,
               gradient_checkpointing: bool, precision: str, attention: str, overlap_comm: bool,
               reduce_bucket_size: float, allgather_bucket_size: float, prefetch_bucket_size: float,
               persistence_threshold: float, pin_memory: bool, trainable_parameters: int | None,
               lora: tuple | None = None, saved: tuple[int, int] = (0, 0), reuse_distance: float = 1e9) -> StepTime:
    """`step_time` with its keyword arguments by position, in its signature's order, not memoised: the planner's
    entry (it keeps each plan's step times itself; binding twenty keywords showed). The setup's own terms
    (`step_setup`) and then the micro-batch's (`step_time_at`)."""
    setup = step_setup(mf, perf, parameters, gpus_per_node, nodes, zero_stage, offload_optimizer, offload_param,
                       precision, overlap_comm, reduce_bucket_size, allgather_bucket_size, prefetch_bucket_size,
                       persistence_threshold, pin_memory, trainable_parameters, lora, saved, reuse_distance)
    return step_time_at(setup, mf, perf, seq_len, micro_batch, grad_accum, gradient_checkpointing, attention)


_COUNTS_AT_LEAST_1 = "micro_batch, seq_len, grad_accum, gpus_per_node, nodes and parameters must be >= 1"
"""The refusal of `step_setup` (its counts) and `step_time_at` (the micro-batch's), one message for either."""

# How a setup's per-micro-batch communication hides behind its compute (`step_setup`, `step_time_at`)
_COMM_FIXED = 0  # exposed as it is: one rank, ZeRO-0 (at the boundary), ZeRO-3 without prefetch
_COMM_ZERO3_OVERLAP = 1  # ZeRO-3's gathers on their own stream, prefetched
_COMM_ZERO3_CPU = 2  # ZeRO-3's async gathers on gloo's threads (DeepSpeed's CPU accelerator)
_COMM_ZERO2 = 3  # the reduce in every backward
_COMM_ZERO1 = 4  # the reduce after the last backward


def step_setup(mf: ModelFlops, perf: MachinePerf, parameters: int, gpus_per_node: int, nodes: int, zero_stage: int,
               offload_optimizer: str, offload_param: str, precision: str, overlap_comm: bool,
               reduce_bucket_size: float, allgather_bucket_size: float, prefetch_bucket_size: float,
               persistence_threshold: float, pin_memory: bool, trainable_parameters: int | None,
               lora: tuple | None = None, saved: tuple[int, int] = (0, 0), reuse_distance: float = 1e9) -> tuple:
    """The terms of `step_time_of` that the sequence, micro-batch, accumulation, checkpointing and attention kernel
    do not change, for `step_time_at`: the collectives' bytes and calls, the offload traffic, the optimizer step.
    The planner computes them once per setup on a machine (`zerokit.planner.rules.Context.step`) and times every
    micro-batch of every plan of that model against them. A plain tuple, unpacked whole by `step_time_at`."""
    nbytes = _BYTES.get(precision)
    if nbytes is None:
        raise BadInput(f"precision {precision!r} is not one of bf16, fp16, fp32")
    if zero_stage not in (0, 1, 2, 3):
        raise BadInput(f"zero_stage must be 0-3, got {zero_stage!r}")
    if offload_param != "none" and zero_stage != 3:
        raise BadInput("parameter offload needs ZeRO-3")
    if offload_optimizer != "none" and zero_stage == 0:
        raise BadInput("optimizer offload needs ZeRO-1, 2 or 3")
    if min(gpus_per_node, nodes, parameters) < 1:
        raise BadInput(_COUNTS_AT_LEAST_1)
    total = float(parameters)
    trainable = total if trainable_parameters is None else float(min(trainable_parameters, parameters))
    share = trainable / total
    gpn = gpus_per_node
    world = gpn * nodes
    qlora = lora is not None and len(lora) > 3
    quantized = lora[3] if qlora else 0  # QLoRA's 4-bit weights
    fp32_adapters = adapters_in_fp32(zero_stage, lora, saved)
    # QLoRA: the 4-bit base, dequantized on every pass
    dequant = dequantization_s(perf, quantized, lora[4]) if quantized else 0.0

    # Communication per rank: ring collectives at the bus bandwidth, plus a fixed latency per call.
    kind = _COMM_FIXED
    micro_comm = boundary_comm = boundary_exposed = forward_ag = backward_ag = reduce = first_gather = 0.0
    hidden = 0.0  # ZeRO-1/2: what overlap_comm can hide behind the backward at most
    reduce_calls = flushes(mf, trainable, reduce_bucket_size)
    if world > 1:
        bus = perf.intra_node_bandwidth
        if nodes > 1:
            bus = min(bus, perf.inter_node_bandwidth / gpn)
        per_element = (world - 1) / world * nbytes / (bus * perf.collective_efficiency)
        lat = perf.collective_latency_s
        overlap = overlap_comm and perf.comm_overlaps_compute
        reduce = trainable * per_element + reduce_calls * lat
        if zero_stage == 0:
            boundary_comm = boundary_exposed = 2.0 * trainable * per_element + reduce_calls * lat
        elif zero_stage == 3:
            gathers, gathered = mf.gathered(persistence_threshold)
            regathers, regathered = mf.regathered(persistence_threshold, reuse_distance)
            # backward's share of forward's gathers (of the adapters' too: they go with their base modules)
            again, again_calls = regathered / max(gathered, 1), regathers / max(gathers, 1)
            if quantized:
                gathered -= 0.75 * quantized  # QLoRA: 4-bit weights travel in their bf16 storage, four an element
            if lora is not None and share < 1.0:
                kept, kept_elements, big, big_elements = adapter_persistence(lora, persistence_threshold)
                width = 4.0 / nbytes if fp32_adapters else 1.0  # per_element prices the training dtype's bytes
                gathers += big
                gathered += big_elements * width
                # after every optimizer step ZeRO-3 all-gathers each parameter it keeps whole, one collective each
                # (`DeepSpeedZeroOptimizer_Stage3._post_step`): the base's are in the probe's ZeRO-3 reference, and
                # so in its hook figure; the adapters' are not
                persistent = kept * lat + kept_elements * width * per_element
                boundary_comm += persistent
                boundary_exposed += persistent
            forward_ag = gathered * per_element + gathers * lat
            backward_ag = again * gathered * per_element + again_calls * gathers * lat
            micro_comm = forward_ag + backward_ag + reduce
            first_gather = forward_ag / max(gathers, 1)  # the gather prefetch cannot hide: the first one
            if overlap and prefetch_bucket_size > 0:
                kind = _COMM_ZERO3_OVERLAP
            elif prefetch_bucket_size > 0 and perf.device == "cpu":
                kind = _COMM_ZERO3_CPU
        else:
            gather = trainable * per_element + max(1.0, math.ceil(trainable / max(allgather_bucket_size, 1.0))) * lat
            # ZeRO-2 reduces in every backward; ZeRO-1 in the last one (overlap_comm) or after it.
            hidden = reduce * (1.0 - 1.0 / reduce_calls) if overlap else 0.0
            if zero_stage == 2:
                kind, micro_comm = _COMM_ZERO2, reduce
                boundary_comm = boundary_exposed = gather
            else:
                kind, boundary_comm = _COMM_ZERO1, reduce + gather

    # Offload per rank (the node's NVMe is shared by its ranks).
    micro_off = boundary_off = 0.0
    shard_t = trainable / world
    if offload_optimizer != "none" or offload_param != "none":
        h2d = perf.h2d_pinned if pin_memory else perf.h2d_pageable
        d2h = perf.d2h_pinned if pin_memory else perf.d2h_pageable
        if offload_optimizer != "none":
            grads = shard_t * MASTER_BYTES / d2h
            if zero_stage == 1:
                boundary_off += grads
            else:
                micro_off += grads
            if zero_stage == 3 and offload_param == "none" and perf.device == "gpu":
                # one blocking copy_ into the device's partition: torch's host cast into a fresh pageable temporary,
                # then the pageable copy
                boundary_off += shard_t / perf.h2d_cast_rate(gpn, nbytes)
            else:
                # the updated fp32 partition cast to half precision on the host, every local rank at once
                boundary_off += shard_t * gpn / perf.host_cast_rate
                if offload_param == "none" and zero_stage < 3:
                    boundary_off += shard_t * nbytes / h2d  # the bit16 buffer goes back
            if offload_optimizer == "nvme":
                boundary_off += shard_t * OPTIMIZER_STATE_BYTES * gpn * (1.0 / perf.nvme_read + 1.0 / perf.nvme_write)
        if offload_param != "none":
            shard_p = mf.gathered(persistence_threshold)[1] / world  # persistent parameters stay on the device
            # the rank's partition, to the device in forward and for what backward gathers again
            fetched = shard_p + mf.regathered(persistence_threshold, reuse_distance)[1] / world
            micro_off += fetched * nbytes / h2d
            if offload_param == "nvme":
                micro_off += fetched * nbytes * gpn / perf.nvme_read

    if offload_optimizer != "none":
        optimizer = shard_t * gpn / perf.cpu_adam_params_per_s  # every local rank steps at once on the node's cores
    else:
        owned = trainable if zero_stage == 0 else shard_t
        grad_bytes = owned * 4.0
        optimizer = owned / perf.device_adam_params_per_s + (
            grad_bytes * _OPTIMIZER_PASSES / perf.elementwise_at(grad_bytes))
    adapted = adapted_linears(lora) if share < 1.0 else 0
    return (zero_stage, trainable, share, world, lora, saved, quantized, fp32_adapters, dequant, reduce_calls, kind,
            micro_comm, boundary_comm, boundary_exposed, forward_ag, backward_ag, reduce, first_gather, hidden,
            micro_off, boundary_off, optimizer, adapted, offload_optimizer != "none", precision)


def step_time_at(setup: tuple, mf: ModelFlops, perf: MachinePerf, seq_len: int, micro_batch: int, grad_accum: int,
                 gradient_checkpointing: bool, attention: str) -> StepTime:
    """One optimizer step of the setup `step_setup` priced, at this sequence, micro-batch, accumulation,
    checkpointing and attention kernel, on the same model and machine."""
    (zero_stage, trainable, share, world, lora, saved, quantized, fp32_adapters, dequant, reduce_calls, kind,
     micro_comm, boundary_comm, boundary_exposed, forward_ag, backward_ag, reduce, first_gather, hidden, micro_off,
     boundary_off, optimizer, adapted, offloaded, precision) = setup
    if micro_batch < 1 or seq_len < 1 or grad_accum < 1:
        raise BadInput(_COUNTS_AT_LEAST_1)
    ga = grad_accum

    # Compute of one micro-batch. LoRA: frozen weights skip their weight gradients; the adapters' own products
    # (2 FLOPs per trainable parameter and token, three passes) are tiny and run at the peak.
    fwd, bwd_in, bwd_w, recompute, weight_flops, score_flops, peak, best = _compute_parts(
        mf, perf, micro_batch, seq_len, precision, attention)
    tokens = micro_batch * seq_len
    adapter_t = adapter_flops = 0.0
    adapter_modules = 0
    if share < 1.0:
        copies, head = saved
        adapter_t, adapter_flops, adapter_modules, adapter_forward = _lora_parts(perf, lora, trainable - copies,
                                                                                 tokens, precision, peak,
                                                                                 fp32_adapters)
        recompute += adapter_forward
        if copies:
            copy_t, copy_flops = _saved_parts(perf, copies, head, tokens, precision)
            adapter_t += copy_t
            adapter_flops += copy_flops
    if quantized:  # QLoRA: the 4-bit base, dequantized on every pass
        fwd += dequant
        recompute += dequant
    # a frozen base computes no weight gradients: LoRA's trainable parameters are the adapters, priced apart
    bwd = bwd_in + (bwd_w if share >= 1.0 else 0.0) + adapter_t + dequant
    rec = recompute if gradient_checkpointing else 0.0
    micro_compute = fwd + bwd + rec
    flops_micro = (3.0 if share >= 1.0 else 2.0) * weight_flops + 3.0 * score_flops + adapter_flops

    # ZeRO-3's fetch and release hooks of one pass over the modules (host time: `exposed_hooks`)
    pass_hooks = (mf.parameter_modules + adapter_modules) * perf.zero3_module_overhead_s

    # What of the setup's communication the compute does not hide
    if kind == _COMM_FIXED:
        micro_exposed = micro_comm
    elif kind == _COMM_ZERO3_OVERLAP:
        micro_exposed = min(micro_comm, max(0.0, forward_ag - fwd) + first_gather
                            + max(0.0, backward_ag + reduce - bwd - rec))
    elif kind == _COMM_ZERO3_CPU:
        # DeepSpeed's CPU accelerator has no streams, but ZeRO-3 issues its all-gathers async_op=True
        # (`_dist_allgather_fn`) and gloo runs them on its own threads: a prefetched gather travels while
        # the rank computes and runs the hooks of the modules before it. The reduce-scatter waits
        # (`reduce_scatter_coalesced`). Over a link slower than the compute (benchmarks/step_time_nodes.py)
        # the rank's hooks hide in the gathers' wait.
        micro_exposed = min(micro_comm, max(0.0, forward_ag - fwd - pass_hooks) + first_gather
                            + max(0.0, backward_ag - bwd - rec - pass_hooks) + reduce)
    else:
        hidden = min(hidden, bwd + rec) if hidden else 0.0
        if kind == _COMM_ZERO2:
            micro_exposed = reduce - hidden
        else:
            micro_exposed = 0.0
            boundary_exposed = boundary_comm - hidden
    communication = ga * micro_comm + boundary_comm
    exposed = ga * micro_exposed + boundary_exposed
    offload = ga * micro_off + boundary_off

    overhead = perf.step_overhead_s
    if zero_stage:
        # gradient-bucket flushes: ZeRO-2 and 3 reduce in every backward, ZeRO-1 in the last one (one rank too)
        overhead += (ga if zero_stage > 1 else 1) * reduce_calls * perf.bucket_flush_s
    if zero_stage == 3:
        passes = 3.0 if gradient_checkpointing else 2.0
        overhead += ga * exposed_hooks(passes * pass_hooks, micro_compute, world, perf.device)

    if perf.host_op_s:
        overhead += host_excess(perf, mf, zero_stage, ga, micro_compute, reduce_calls if zero_stage else 0, adapted,
                                gradient_checkpointing, optimizer, offloaded)
    compute = ga * micro_compute
    step = compute + exposed + offload + optimizer + overhead
    tokens_step = tokens * ga * world
    flops_step = ga * flops_micro
    mfu = flops_step / (step * best)  # best: `_mfu_peak`
    return StepTime(step, tokens_step / step, mfu, compute, communication, exposed, offload, optimizer, overhead,
                    tokens_step, flops_step)
