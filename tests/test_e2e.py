"""The whole path on this machine's CPU: `zerokit plan` writes a config, `zerokit launch --gpus-per-node 2` starts
the real `deepspeed` runner, two ranks train the tiny llama from examples/ with the HF Trainer (or plain
`deepspeed.initialize`) on DeepSpeed's CPU accelerator, and the loss must come out finite.

bf16 is what these runs use: DeepSpeed's CPU accelerator supports fp32 and bf16 (fp16 only where oneDNN has
it), and the HF Trainer trains bf16 on the CPU with `use_cpu=True`. The first CPU-offload run JIT-compiles
cpu_adam and the first NVMe run async_io (minutes each; cached in ~/.cache/torch_extensions afterwards).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _support import pids_with

from zerokit.launch.runner import free_port

pytest.importorskip("deepspeed")
pytest.importorskip("transformers")
pytest.importorskip("zerokit.planner.engine")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "examples" / "models" / "tiny-llama"
TRAIN_HF = ROOT / "examples" / "train_hf.py"
TRAIN_DS = ROOT / "examples" / "train_ds.py"
RUN_TIMEOUT = 900  # a first cpu_adam/async_io JIT build on 2 busy cores takes several minutes
HAS_LIBAIO = any(Path(d, "libaio.h").exists() for d in ("/usr/include", "/usr/local/include"))


def zerokit(*args: str, timeout: float = RUN_TIMEOUT, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerokit", *args], capture_output=True, text=True, timeout=timeout,
                          check=False, cwd=kw.pop("cwd", ROOT), **kw)


def plan(tmp_path: Path, name: str, *options: str, target: str = "trainer") -> Path:
    """A ds_config from `zerokit plan` for the tiny model on 2 ranks."""
    out = tmp_path / f"{name}.json"
    r = zerokit("plan", "--model", str(MODEL), "--gpu-memory", "16GB", "--gpus-per-node", "2", "--seq-len", "64",
                "--micro-batch", "2", "--precision", "bf16", "--target", target, *options, "-o", str(out), "--force",
                timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def launch_and_train(tmp_path: Path, config: Path, *script_args: str, script: Path = TRAIN_HF,
                     steps: int = 3) -> list[dict]:
    """Run the training through `zerokit launch` and return the losses rank 0 wrote."""
    losses = tmp_path / "losses.jsonl"
    extra = ["--bf16", "--output-dir", str(tmp_path / "out")] if script == TRAIN_HF else []
    port = free_port("0.0.0.0")
    r = zerokit("launch", "--config", str(config), "--gpus-per-node", "2", "--master-port", str(port),
                str(script), "--max-steps", str(steps), "--loss-file", str(losses), *extra, *script_args)
    output = r.stdout + r.stderr
    assert r.returncode == 0, output[-6000:]
    # DeepSpeed's CPU allreduce buffers of this job (69 MB per rank in /dev/shm) are gone with it
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"deepspeed_allreduce_buffer_{os.getuid()}_")
                and f"_{port}_" in n]
    assert "preflight: " in output and "failed" not in output.split("preflight: ", 1)[1].splitlines()[0]
    assert f"step {steps} loss " in output
    rows = [json.loads(line) for line in losses.read_text().splitlines()]
    assert [row["step"] for row in rows] == list(range(1, steps + 1))
    assert all(math.isfinite(row["loss"]) for row in rows), rows
    return rows


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_1_and_2_train_to_a_finite_loss(tmp_path, stage):
    config = plan(tmp_path, f"zero{stage}", "--zero-stage", str(stage), "--offload-optimizer", "none")
    assert json.loads(config.read_text())["zero_optimization"]["stage"] == stage
    rows = launch_and_train(tmp_path, config)
    assert 5.0 < rows[0]["loss"] < 7.5  # ln(512) = 6.24: a random model over a 512-token vocabulary


def test_zero_3_trains_saves_and_reloads_with_the_right_shapes(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = plan(tmp_path, "zero3", "--zero-stage", "3", "--offload-optimizer", "none", "--offload-param", "none")
    assert json.loads(config.read_text())["zero_optimization"]["stage"] == 3
    launch_and_train(tmp_path, config, "--save")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    cfg = AutoConfig.from_pretrained(MODEL)
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert shapes["model.embed_tokens.weight"] == (cfg.vocab_size, cfg.hidden_size) == (512, 64)
    assert shapes["lm_head.weight"] == (512, 64)
    assert shapes["model.layers.1.mlp.gate_proj.weight"] == (cfg.intermediate_size, cfg.hidden_size)
    assert sum(p.numel() for p in model.parameters()) == 156_480
    weights = model.model.embed_tokens.weight.detach()
    assert bool(weights.isfinite().all()) and float(weights.abs().sum()) > 0  # gathered, not empty partitions


def test_zero_2_with_cpu_optimizer_offload(tmp_path):
    config = plan(tmp_path, "zero2-cpu", "--zero-stage", "2", "--offload-optimizer", "cpu")
    assert json.loads(config.read_text())["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    launch_and_train(tmp_path, config)


@pytest.mark.skipif(not HAS_LIBAIO, reason="libaio headers (libaio-dev) are not installed: DeepSpeed cannot build "
                    "async_io for NVMe offload; `make system-deps` installs them")
def test_zero_3_with_nvme_offload_of_optimizer_and_parameters(tmp_path):
    nvme = tmp_path / "nvme"
    nvme.mkdir()
    config = plan(tmp_path, "zero3-nvme", "--zero-stage", "3", "--offload-optimizer", "nvme", "--offload-param",
                  "nvme", "--nvme-path", str(nvme))
    zero = json.loads(config.read_text())["zero_optimization"]
    assert zero["offload_optimizer"]["device"] == zero["offload_param"]["device"] == "nvme"
    launch_and_train(tmp_path, config)
    assert any(nvme.rglob("*")), "nothing was swapped to the NVMe path"


def test_plain_deepspeed_script_with_a_resolved_config(tmp_path):
    config = plan(tmp_path, "zero2-ds", "--zero-stage", "2", "--offload-optimizer", "none", target="deepspeed")
    assert json.loads(config.read_text())["train_micro_batch_size_per_gpu"] == 2
    launch_and_train(tmp_path, config, script=TRAIN_DS)


def test_the_jobs_exit_code_becomes_zeroks(tmp_path):
    script = tmp_path / "exit7.py"
    script.write_text("import sys\nprint('rank exiting with 7', flush=True)\nsys.exit(7)\n")
    r = zerokit("launch", "--no-preflight", "--gpus-per-node", "2", "--master-port", str(free_port("0.0.0.0")),
                str(script), timeout=300)
    assert r.returncode == 7, r.stdout + r.stderr
    assert "rank exiting with 7" in r.stdout


def test_ctrl_c_during_training_leaves_no_rank_behind(tmp_path):
    config = plan(tmp_path, "zero2-ctrlc", "--zero-stage", "2", "--offload-optimizer", "none")
    marker = f"zk-e2e-ctrlc-{os.getpid()}-{time.time_ns()}"
    argv = [sys.executable, "-u", "-m", "zerokit", "launch", "--no-preflight", "--config", str(config),
            "--gpus-per-node", "2", "--master-port", str(free_port("0.0.0.0")), "--grace", "10", str(TRAIN_HF),
            "--max-steps", "100000", "--bf16", "--output-dir", str(tmp_path / marker)]
    zk = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    seen = []
    try:
        deadline = time.monotonic() + 600
        for line in zk.stdout:
            seen.append(line)
            if "step 2 loss" in line or time.monotonic() > deadline:  # `in`: the ranks share the pipe, unbuffered
                break
        assert seen and "step 2 loss" in seen[-1], "".join(seen[-40:])
        ranks = [p for p in pids_with(marker) if p != zk.pid]
        assert len(ranks) >= 3, ranks  # the runner, DeepSpeed's launcher and two ranks carry the marker
        zk.send_signal(signal.SIGINT)
        assert zk.wait(timeout=60) == 128 + signal.SIGINT
        deadline = time.monotonic() + 15
        while pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not pids_with(marker), f"left behind: {pids_with(marker)}"
    finally:
        zk.kill()
        for pid in pids_with(marker):
            os.kill(pid, signal.SIGKILL)


def plan_lora(tmp_path: Path, stage: int, save: str = "") -> tuple[Path, Path, dict]:
    """`zerokit plan --peft lora` for the tiny model on 2 ranks: (ds_config, plan JSON, the plan); `save`:
    `--lora-modules-to-save`."""
    out, doc = tmp_path / f"lora{stage}.json", tmp_path / f"lora{stage}-plan.json"
    r = zerokit("plan", "--model", str(MODEL), "--gpu-memory", "16GB", "--gpus-per-node", "2", "--seq-len", "64",
                "--micro-batch", "2", "--precision", "bf16", "--peft", "lora", "--lora-rank", "8", "--zero-stage",
                str(stage), "--offload-optimizer", "none", "--format", "json", "-o", str(out), "--force",
                *(["--lora-modules-to-save", save] if save else []), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    doc.write_text(r.stdout)
    return out, doc, json.loads(r.stdout)


@pytest.mark.parametrize(("stage", "save"), [(2, ""), (3, ""), (2, "embed_tokens,lm_head"),
                                             (3, "embed_tokens,lm_head")])
def test_lora_trains_saves_an_adapter_and_reloads_to_the_same_logits(tmp_path, stage, save):
    """With `save`, the adapter also carries the trained copies of the embedding and the head (PEFT's
    modules_to_save), and the reloaded model computes with them."""
    import torch
    from peft import PeftModel
    from transformers import AutoConfig, AutoModelForCausalLM

    sys.path.insert(0, str(TRAIN_HF.parent))
    from train_hf import fixed_input

    config, plan_file, doc = plan_lora(tmp_path, stage, save)
    assert doc["peft"]["lora_config"]["r"] == 8
    copies = 2 * 512 * 64 if save else 0  # the 512 x 64 embedding and the untied head of the same shape
    # rank 8, all-linear, 2 layers: q, o 8*(64+64); k, v 8*(64+32); gate, up, down 8*(64+172)
    assert doc["model"]["trainable_parameters"] == 2 * 8 * (2 * 128 + 2 * 96 + 3 * 236) + copies == 18_496 + copies
    logits_file = tmp_path / "logits.pt"
    launch_and_train(tmp_path, config, "--plan", str(plan_file), "--save", "--logits-file", str(logits_file),
                     "--lr", "1e-2")
    adapter = tmp_path / "out"
    assert (adapter / "adapter_config.json").exists() and (adapter / "adapter_model.safetensors").exists()
    assert not (adapter / "model.safetensors").exists()  # the adapter only, not the base
    trained = torch.load(logits_file)

    torch.manual_seed(0)  # the same base as train_hf.py builds
    base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(MODEL)).to(torch.bfloat16)
    ids = fixed_input(base.config.vocab_size)
    with torch.no_grad():
        plain = base(input_ids=ids).logits.float()
    model = PeftModel.from_pretrained(base, adapter, autocast_adapter_dtype=False).eval()
    assert sum(p.numel() for n, p in model.named_parameters() if "lora_" in n) == 18_496
    assert sum(p.numel() for n, p in model.named_parameters() if "modules_to_save" in n) == copies
    with torch.no_grad():
        reloaded = model(input_ids=ids).logits.float()
    assert bool(trained.isfinite().all())
    torch.testing.assert_close(reloaded, trained, rtol=0, atol=2e-2)
    assert (reloaded - plain).abs().max() > 10 * (reloaded - trained).abs().max()  # the adapter did train
