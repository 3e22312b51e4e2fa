"""The memory model against DeepSpeed's own estimators, the ZeRO paper's figure, and hand-computed bytes."""

from __future__ import annotations

import pytest

from zerokit.errors import BadInput
from zerokit.hardware import GPU_PRESETS, resolve_hardware
from zerokit.memory.buffers import buffer_ladder, default_overhead, hf_auto_settings
from zerokit.memory.host import host_memory
from zerokit.memory.states import deepspeed_estimate, model_states, paper_model_states

# Exact counts of real models (transformers instantiation): llama-2-7b, llama-2-70b, gpt2.
MODELS = {
    "llama-2-7b": (6_738_415_616, 131_072_000),
    "llama-2-70b": (68_976_648_192, 262_144_000),
    "gpt2": (124_439_808, 38_597_376),
}
LAYOUTS = [(1, 1), (8, 1), (8, 2), (4, 4)]  # (gpus_per_node, nodes)


@pytest.fixture(scope="module")
def ds_estimators():
    pytest.importorskip("torch")
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    return estimate_zero2_model_states_mem_needs, estimate_zero3_model_states_mem_needs


def _close(ours: int, theirs: int, rel: float = 0.05) -> bool:
    return abs(ours - theirs) <= rel * theirs


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("gpn,nodes", LAYOUTS)
@pytest.mark.parametrize("offload", [False, True])
def test_zero2_matches_deepspeed(ds_estimators, model, gpn, nodes, offload):
    zero2, _ = ds_estimators
    p, largest = MODELS[model]
    ds_cpu, ds_gpu = zero2(p, num_gpus_per_node=gpn, num_nodes=nodes, cpu_offload=offload)
    states = model_states(p, largest, gpn * nodes, 2, "cpu" if offload else "none")
    assert _close(states.total, ds_gpu)
    host = host_memory(p, largest, gpn, nodes, 2, "cpu" if offload else "none")
    # Deliberate difference (host.py docstring): DeepSpeed's estimator is the larger of the fp32 load and the
    # offloaded states times an additional_buffer_factor of 1.5 (and does not divide ZeRO-2's offloaded states by
    # nodes); the traced runs (tests/test_realrun_golden.py) hold the bytes without that margin.
    assert host.load_peak == 4 * p * gpn
    if not offload:
        assert _close(1.5 * host.load_peak, ds_cpu)
    assert host.cpu_bytes < ds_cpu


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("gpn,nodes", LAYOUTS)
@pytest.mark.parametrize("opt,param", [("none", "none"), ("cpu", "none"), ("cpu", "cpu")])
def test_zero3_matches_deepspeed(ds_estimators, model, gpn, nodes, opt, param):
    _, zero3 = ds_estimators
    p, largest = MODELS[model]
    ds_cpu, ds_gpu, _ = zero3(p, largest, num_gpus_per_node=gpn, num_nodes=nodes, cpu_offload=opt == "cpu",
                              cpu_offload_params=param == "cpu", zero_init=True)
    states = model_states(p, largest, gpn * nodes, 3, opt, param)
    assert _close(states.total, ds_gpu)
    # DeepSpeed's estimator adds a 1.5x margin to the host bytes (host.py docstring); ours are what a run holds.
    assert host_memory(p, largest, gpn, nodes, 3, opt, param).cpu_bytes < ds_cpu


@pytest.mark.parametrize("zero_init", [True, False])
@pytest.mark.parametrize("stage,opt,param", [(2, False, False), (2, True, False), (3, False, False),
                                             (3, True, False), (3, True, True)])
@pytest.mark.parametrize("gpn,nodes", LAYOUTS)
def test_deepspeed_formula_copy_is_exact(ds_estimators, zero_init, stage, opt, param, gpn, nodes):
    zero2, zero3 = ds_estimators
    p, largest = MODELS["llama-2-7b"]
    ours = deepspeed_estimate(p, largest, gpn, nodes, stage, opt, param, zero_init=zero_init)
    if stage == 2:
        theirs = zero2(p, num_gpus_per_node=gpn, num_nodes=nodes, cpu_offload=opt)
    else:
        theirs = zero3(p, largest, num_gpus_per_node=gpn, num_nodes=nodes, cpu_offload=opt, cpu_offload_params=param,
                       zero_init=zero_init)[:2]
    assert ours == theirs


def test_zero_paper_figure():
    """Rajbhandari et al. 2020, Figure 1: 7.5B parameters, 64 GPUs, K = 12."""
    gb = [round(paper_model_states(7_500_000_000, 64, stage) / 1e9, 1) for stage in (0, 1, 2, 3)]
    assert gb == [120.0, 31.4, 16.6, 1.9]


def test_states_split_stage0_and_1_by_hand():
    # 1e9 parameters on 8 GPUs, bf16: 2 B params, 2 B 16-bit grads, 4 B fp32 grads, 12 B master + Adam moments.
    s0 = model_states(10**9, 10**8, 8, 0)
    assert (s0.parameters, s0.gradients, s0.optimizer_states) == (2 * 10**9, 6 * 10**9, 12 * 10**9)
    s1 = model_states(10**9, 10**8, 8, 1)
    assert (s1.parameters, s1.gradients, s1.optimizer_states) == (2 * 10**9, 2 * 10**9 + 5 * 10**8, 15 * 10**8)
    s2 = model_states(10**9, 10**8, 8, 2)
    assert (s2.parameters, s2.gradients, s2.optimizer_states) == (2 * 10**9, 75 * 10**7, 15 * 10**8)
    # ZeRO-3: the gathered largest layer (params + grads, 2 B each) is the working set.
    s3 = model_states(10**9, 10**8, 8, 3)
    assert (s3.parameters, s3.gradients, s3.optimizer_states) == (2 * 10**8 + 25 * 10**7, 2 * 10**8 + 5 * 10**8,
                                                                  15 * 10**8)
    # Every stage at N=1 holds DeepSpeed's 20 bytes per parameter (plus the ZeRO-3 working set).
    assert model_states(10**9, 10**8, 1, 1).total == model_states(10**9, 10**8, 1, 2).total == 20 * 10**9


def test_states_fp32_and_offload_by_hand():
    s = model_states(10**9, 10**8, 4, 2, precision="fp32")
    assert (s.parameters, s.gradients, s.optimizer_states) == (4 * 10**9, 2 * 10**9, 3 * 10**9)
    s = model_states(10**9, 10**8, 4, 3, "cpu", "cpu")
    assert (s.parameters, s.gradients, s.optimizer_states) == (2 * 10**8, 2 * 10**8, 0)
    s = model_states(10**9, 10**8, 4, 1, "cpu")  # ZeRO-1 + offload still accumulates full 16-bit gradients
    assert (s.parameters, s.gradients, s.optimizer_states) == (2 * 10**9, 2 * 10**9, 0)


def test_hf_auto_buffer_sizes_follow_the_hidden_size():
    h = 4096
    auto = hf_auto_settings(h)
    assert (auto.reduce_bucket_size, auto.prefetch_bucket_size, auto.param_persistence_threshold) == (
        16_777_216, 15_099_494, 40_960)
    assert auto.overlap_comm and not hf_auto_settings(h, overlap_comm=False).overlap_comm


def test_buffer_ladder_goes_from_hf_auto_to_frugal():
    ladder = buffer_ladder(4096, 3)
    assert ladder[0].hf_auto and ladder[0].overlap_comm
    assert not ladder[-1].hf_auto and not ladder[-1].overlap_comm
    # each rung leaves the activations at least as much room as the one before, as the cost layer prices it
    from zerokit.memory.estimate import costs_of
    from zerokit.models.resolve import resolve_model

    spec = resolve_model("llama-2-7b")
    rooms = [costs_of(spec, 8, "gpu", 3, "none", "none", 1, "bf16", s, 0).headroom(80 * 10**9) for s in ladder]
    assert all(r is not None for r in rooms) and rooms == sorted(rooms), rooms


def test_default_overhead():
    assert default_overhead(80 * 2**30) == 2**30 + 4_294_967_296


def test_host_memory_nvme_by_hand():
    p, largest = MODELS["llama-2-7b"]
    h = host_memory(p, largest, 8, 1, 3, "nvme", "nvme")
    assert h.nvme_bytes == 18 * p
    per_rank = -(-p // 8)
    pinned = 8 * 4 * per_rank * 4 + 8 * 5 * 10**8 * 2  # optimizer swap buffers + parameter swap buffers (1e8)
    assert h.pinned == pinned
    # the host keeps a 16-bit staging copy of the parameter partition and the gradient partitions (e x P/N each)
    assert h.steady_state == 8 * (2 * per_rank + 2 * per_rank) + pinned
    assert h.load_peak == 4 * largest * 8  # zero.Init: only the largest module is ever whole on the host
    assert h.cpu_bytes == max(h.load_peak, h.steady_state)


def test_host_memory_zero2_offload_two_nodes_by_hand():
    p, largest = 10**9, 10**8
    h = host_memory(p, largest, 8, 2, 2, "cpu")
    per_rank = -(-p // 16)
    # fp32 master, gradient and Adam moments (16 B) plus the pinned 16-bit partition (2 B) per partitioned parameter,
    # and a 16-bit gradient staging buffer of the largest layer, per rank; 8 ranks per node
    assert h.steady_state == 8 * (18 * per_rank + 2 * largest)
    assert h.load_peak == 4 * p * 8
    assert h.cpu_bytes == max(h.load_peak, h.steady_state) == 32 * 10**9



@pytest.mark.parametrize("dtype, width", [("bfloat16", 2), ("float16", 2), ("float32", 4)])
def test_the_load_peak_is_the_checkpoints_dtype_as_from_pretrained_loads_it(tmp_path, dtype, width):
    """transformers 5's from_pretrained loads the dtype config.json names (dtype="auto"), not fp32: a real tiny
    llama saved in each dtype and loaded back without a dtype argument holds `load_bytes` bytes a parameter."""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, LlamaConfig

    from zerokit.memory.host import load_bytes

    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, vocab_size=64)
    AutoModelForCausalLM.from_config(config).to(getattr(torch, dtype)).save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    import json

    assert {p.element_size() for p in model.parameters()} == {width}
    assert load_bytes(json.loads((tmp_path / "config.json").read_text())) == width
    assert load_bytes({}) == 4 and load_bytes({"torch_dtype": "bfloat16"}) == 2  # from_config's fp32; transformers 4
    p, largest = MODELS["llama-2-7b"]
    assert host_memory(p, largest, 8, 1, 2, load_width=width).load_peak == width * p * 8


def test_a_qlora_base_loads_onto_the_gpu_and_the_host_holds_one_tensor_at_a_time():
    p, largest = MODELS["llama-2-70b"]
    h = host_memory(p, largest, 8, 1, 0, load_width=2, loads_on_gpu=True)
    assert h.load_peak == 2 * largest * 8 and h.cpu_bytes == h.load_peak

# ------------------------------------------------------------------------------------------------- hardware

def test_presets_as_reported_by_the_driver():
    assert resolve_hardware("a100-80gb").gpu_memory_bytes == 81920 * 2**20
    assert resolve_hardware("h100-80gb").gpu_memory_bytes == 81559 * 2**20
    assert resolve_hardware("v100-32gb").bf16 is False
    assert resolve_hardware("H100_80GB").gpu_name == "h100-80gb"
    assert {"a100-40gb", "h200", "l40s", "a10g", "l4", "rtx3090", "rtx4090", "v100-16gb", "mi250x",
            "mi300x"} <= set(GPU_PRESETS)


def test_resolve_hardware_sizes_and_override():
    hw = resolve_hardware("a100-40gb", gpu_memory="80GiB", gpus_per_node="8", nodes=2, cpu_memory="1TB",
                          nvme_path="/nvme", nvme_size="3.2TB")
    assert (hw.gpu_memory_bytes, hw.world_size, hw.cpu_memory_bytes, hw.nvme_bytes, hw.bf16) == (
        80 * 2**30, 16, 10**12, 32 * 10**11, True)
    custom = resolve_hardware(gpu_memory="24GB")
    assert (custom.gpu_name, custom.gpu_memory_bytes) == ("custom", 24 * 10**9)


@pytest.mark.parametrize("kwargs,match", [
    ({"gpu": "a100-80"}, None),
    ({"gpu": "a100-08gb"}, r"unknown GPU preset 'a100-08gb'; did you mean 'a100-80gb'\?"),
    ({}, r"give --gpu .* or --gpu-memory"),
    ({"gpu": "h100-80gb", "gpus_per_node": 0}, r"--gpus-per-node must be at least 1"),
    ({"gpu": "h100-80gb", "nodes": "-2"}, r"--nodes must be at least 1"),
    ({"gpu": "h100-80gb", "gpus_per_node": 4097}, r"--gpus-per-node 4097 is too large; at most 4,096"),
    ({"gpu": "h100-80gb", "nodes": "65537"}, r"--nodes '65537' is too large; at most 65,536"),
    ({"gpu": "h100-80gb", "gpus_per_node": 32, "nodes": 32769},
     (r"--gpus-per-node 32 x --nodes 32769 is 1,048,608 GPUs, more than any cluster has; zerokit plans up to "
     r"1,048,576: check both options")),
    ({"gpu_memory": "1MB"}, r"below 1 GiB"),
    ({"gpu_memory": "80G"}, r"did you mean 80GB"),
    ({"gpu_memory": "80GBB"}, r"did you mean 80GB\?"),
    ({"gpu_memory": "80XB"}, r"unknown unit 'XB'; write it like 80GB \(10\^9 bytes\) or 80GiB"),  # not "80B"
    ({"gpu_memory": "80Gb"}, (r"'80Gb' is in bits \(a lowercase b, as in 100Gb/s\); sizes are in bytes: did you mean "
                             r"80GB\?")),  # read as 80 GB before, where the bandwidth options read 80 gigabits
    ({"gpu": "l4", "cpu_memory": "512Mib"}, r"did you mean 512MiB\?"),
    ({"gpu": "l4", "nvme_size": "1TB"}, r"--nvme-size needs --nvme-path"),
])
def test_resolve_hardware_bad_input(kwargs, match):
    if match is None:
        assert resolve_hardware(**kwargs).gpu_name == "a100-80gb"  # an alias, not an error
        return
    with pytest.raises(BadInput, match=match):
        resolve_hardware(**kwargs)


@pytest.mark.parametrize("accelerator", ["cuda", "cpu"])
def test_zero1_and_zero2_cost_the_same_without_accumulation(accelerator):
    """The planner prices both with one cache entry (`zerokit.planner.rules._costs_key`): hold that to the cost
    layer, at every buffer setting, with and without optimizer offload, full training and LoRA's arguments."""
    from zerokit.memory.estimate import StepCosts, costs_of
    from zerokit.models.resolve import resolve_model

    model = resolve_model("llama-2-7b")
    ladder = buffer_ladder(model.hidden_size, 1)
    assert ladder == buffer_ladder(model.hidden_size, 2)
    lora = {"trainable": 20_000_000, "frozen_bytes": 2 * model.parameters, "adapter_bytes": 2}
    for buffers in ladder:
        for opt in ("none", "cpu"):
            for extra in ({}, lora):
                one, two = (costs_of(model, 8, accelerator, stage, opt, "none", 1, "bf16", buffers, 10**9, **extra)
                            for stage in (1, 2))
                assert [getattr(one, k) for k in StepCosts.__slots__] == [getattr(two, k) for k in StepCosts.__slots__]


@pytest.mark.parametrize(("sizes", "n", "expected"), [
    ((4, 6, 2), 2, 10),  # shares [0, 6) and [6, 12): the first reaches the 4 and the 6, the second the 6 and the 2
    ((4, 4, 4), 3, 4),  # tensors on the boundaries: each share holds one whole
    ((10,), 4, 10),  # one tensor every share reaches
    ((1, 1, 1, 1), 1, 4),
])
def test_the_gradient_partition_counts_each_tensor_it_reaches_whole(sizes, n, expected):
    """ZeRO-1/2's gradient-partition buffer (`copy_grads_in_partition` sums the numel of every parameter in the
    rank's partition, a straddling one whole): mixtral-z2's ranks held 4,065,792 and 4,393,216 elements there where
    an even split gives 3,705,216, and the real-run optimizer step went from -1.5% to 0.0% with it."""
    from zerokit.memory.estimate import whole_share

    assert whole_share(sizes, n) == expected


@pytest.mark.parametrize("stage", [0, 3])
def test_cublas_workspaces_count_in_every_phase_on_a_gpu_and_not_on_the_cpu(stage):
    """torch allocates a 32 MiB cuBLAS workspace per handle and stream through the caching allocator on Hopper, one
    for the forward's thread and one for autograd's: every one-GPU training in tests/data/gpu held 67,108,864 bytes
    beyond the model's tensors in every phase. DeepSpeed's CPU accelerator has no cuBLAS. (At ZeRO-0 and 3 nothing
    else tells the two accelerators apart in the cost layer.)"""
    from zerokit.memory.activations import ActivationEstimate
    from zerokit.memory.estimate import CUBLAS_WORKSPACES, costs_of
    from zerokit.models.resolve import resolve_model

    assert CUBLAS_WORKSPACES == 2 * 32 * 2**20 == 67_108_864
    model = resolve_model("llama-2-7b")
    act = ActivationEstimate(activations=10**9, transient=3 * 10**8, generic=False, forward_transient=10**8, loss_transient=2 * 10**8,
                             head_transient=10**8, layer_transient=3 * 10**8, head_weight_gradient=10**8)
    gpu, cpu = (costs_of(model, 8, accelerator, stage, "none", "none", 1, "bf16", hf_auto_settings(4096), 10**9)
                for accelerator in ("cuda", "cpu"))
    on_gpu, on_cpu = gpu.phases(act), cpu.phases(act)
    for phase in on_gpu:
        assert on_gpu[phase].total - on_cpu[phase].total == CUBLAS_WORKSPACES, phase
        assert on_gpu[phase].buffers - on_cpu[phase].buffers == CUBLAS_WORKSPACES, phase
    assert gpu.need(act) - cpu.need(act) == CUBLAS_WORKSPACES
    assert gpu.headroom(200 * 2**30)[0] + CUBLAS_WORKSPACES == cpu.headroom(200 * 2**30)[0]


def test_kept_with_views_adds_the_held_parameters_of_the_modules_the_window_releases():
    """By hand: distance 12 over (10, 5, 5, 5, 0, 10). From the end the head (10) is kept, the persistent 0 is
    passed, and the third 5 would take 10 past 12 with 2 x 10 after it >= 12: the kept suffix starts at index 4.
    The held parameters of modules 0-3 (4 each in the three 5s) stay allocated: 10 + 12."""
    from zerokit.memory.buffers import kept_gathered, kept_with_views

    sizes, held = (10, 5, 5, 5, 0, 10), (0, 4, 4, 4, 0, 0)
    assert kept_gathered(sizes, 12) == (1, 10)
    assert kept_with_views(sizes, held, 12) == 22
    assert kept_with_views(sizes, held, 1e9) == 35  # everything kept: nothing released, nothing extra
    assert kept_with_views(sizes, (0,) * 6, 12) == 10


def test_an_moe_holds_its_stacked_experts_at_zero3_without_checkpointing_only():
    """Mixtral-8x7B: each layer's experts are 8 x 3 x 4096 x 14336 = 1,409,286,144 parameters (gate_up_proj and
    down_proj, stacked); the router's (8, 4096) weight reaches its matmul whole and holds nothing. At HF's auto
    buffers (live limit and reuse distance 1e9) the window keeps the head (131M) and layer 32 (2 x 131M after it is
    below 1e9); layer 31 would take the kept past 1e9: 31 layers are released, and their experts stay, 2 bytes
    each in bf16. A dense llama holds nothing; checkpointing saves no views."""
    from zerokit.memory.estimate import costs_of, held_trace, saves_views
    from zerokit.models.resolve import resolve_model

    mixtral, llama = resolve_model("mixtral-8x7b"), resolve_model("llama-2-7b")
    experts = 8 * 3 * 4096 * 14336
    # per module in forward order: the embedding, each layer's input norm, q, k, v, o, post-attention norm, router
    # and experts (the norms and the router, 32,768, below the threshold), the final norm and the head
    assert held_trace(mixtral, 40960) == (0,) + (0, 0, 0, 0, 0, 0, 0, experts) * 32 + (0, 0)
    assert saves_views(mixtral) and not saves_views(llama) and held_trace(llama, 40960) == ()
    buffers = hf_auto_settings(4096)
    bare, recomputed = (costs_of(mixtral, 32, "gpu", 3, "none", "none", 1, "bf16", buffers, 0, saved_views=views)
                        for views in (True, False))
    assert bare.gathered - recomputed.gathered == 2 * 31 * experts
    for stage in (1, 2):  # below ZeRO-3 every parameter is resident: a view adds nothing
        assert costs_of(mixtral, 32, "gpu", stage, "none", "none", 1, "bf16", buffers, 0, saved_views=True).gathered \
            == 0


def test_qlora_at_zero3_holds_its_gathered_4bit_weights_through_the_step():
    """The realrun llama (256 wide, 4 layers, MLP 688, 2 of 4 heads for k and v): a layer's 4-bit weights are stored
    four to an element, q 16,384, k and v 8,192 each, o 16,384, gate, up and down 44,032 each: 181,248. Without
    checkpointing layer 0's q, k and v see the frozen embedding's output and hold nothing (148,480 there); with it
    every layer holds all. At the step all of them stay, 2 bytes an element (bf16 storage)."""
    import json
    from pathlib import Path

    from zerokit.memory.estimate import costs_of, quantized_held
    from zerokit.models.resolve import spec_from_config

    root = Path(__file__).resolve().parent
    spec = spec_from_config(json.loads((root / "data" / "realrun" / "models" / "llama.json").read_text()), "llama")
    # per module in forward order: the embedding, each layer's input norm, q, k, v, o, post-attention norm, gate, up
    # and down, the final norm and the head
    layer = (0, 16_384, 8_192, 8_192, 16_384, 0, 44_032, 44_032, 44_032)
    first = (0, 0, 0, 0, 16_384, 0, 44_032, 44_032, 44_032)
    assert sum(layer) == 181_248 and sum(first) == 148_480
    assert quantized_held(spec, 2560, front=True) == (0,) + first + layer * 3 + (0, 0)
    assert quantized_held(spec, 2560, front=False) == (0,) + layer * 4 + (0, 0)
    assert quantized_held(spec, 20_000, front=False) == (0,) + (0, 0, 0, 0, 0, 0, 44_032, 44_032, 44_032) * 4 + (0, 0)
    buffers = hf_auto_settings(256)
    qlora = {"trainable": 10**5, "frozen_bytes": 10**6, "replicated_bytes": 1000}
    for front, held in ((True, 692_224), (False, 724_992)):
        costs = costs_of(spec, 2, "cpu", 3, "none", "none", 1, "bf16", buffers, 0, front_released=front, **qlora)
        assert costs.step_held == 2 * held
    plain = costs_of(spec, 2, "cpu", 3, "none", "none", 1, "bf16", buffers, 0, trainable=10**5, frozen_bytes=10**6)
    assert plain.step_held == 0  # LoRA's 16-bit base reaches DeepSpeed's zero3_linear_wrap whole: nothing held
