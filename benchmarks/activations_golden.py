#!/usr/bin/env python3
"""Regenerate the measured activation golden data that the fast tests compare the analytic model against.

    python benchmarks/activations_golden.py --device cpu  -o tests/data/activations_cpu.json   # ~30 min, 2 cores
    python benchmarks/activations_golden.py --device cuda -o tests/data/activations_cuda.json  # ~5 min, one GPU

Each case is a miniature from ``benchmarks/activations.py`` (2 layers, a real checkpoint's ratios) at one setting,
measured by ``benchmarks/measure_lora.py`` (the method of ``shared/measure_activations.py``, plus CUDA and QLoRA).
The output is a JSON list of cases with the measured bytes, written as it goes (one line per case), so an interrupted
run keeps what it measured. A case the libraries refuse (gemma2 with sdpa, MoE experts with LoRA dropout) is kept with
its error so the tests can check that zerokit refuses it too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from activations import MINIATURES
from measure_lora import measure

# the smallest LoRA target lists worth checking besides all-linear: attention-only and MLP-only
SMALL_TARGETS = {
    "gpt2": ("c_attn", "c_fc"), "gpt_neox": ("query_key_value", "dense_4h_to_h"),
    "falcon": ("query_key_value", "dense_4h_to_h"), "phi3": ("qkv_proj", "down_proj"), "opt": ("q_proj,v_proj", "fc2"),
    "mixtral": ("q_proj,v_proj", "w1,w3,w2"), "qwen3_moe": ("q_proj,v_proj", "gate_proj,up_proj,down_proj"),
    "qwen2_moe": ("q_proj,v_proj", "shared_expert_gate"),
}
SAVE_ALONE = ("llama", "gpt2", "gpt_neox", "falcon", "opt", "gemma")
"""The families whose modules_to_save cases also train the embedding alone and the head alone."""
LORA_FAMILIES = ("llama", "qwen3", "mistral", "gpt2", "gpt_neox", "falcon", "mixtral", "qwen2_moe", "qwen3_moe",
                 "phi3", "gemma3_text", "opt", "gemma", "gemma2", "qwen2", "granite")


def cases(device: str) -> list[dict]:
    """The special cases (windows, fp32, transients, QLoRA) first, then full fine-tuning over every family and
    setting, then LoRA: an interrupted run keeps the rare cases."""
    out: list[dict] = _special(device)
    full_shapes = ((64, 1), (64, 3), (256, 1)) if device == "cpu" else ((256, 1), (256, 4), (1024, 4), (2048, 1))
    for fam in MINIATURES:
        for s, b in full_shapes:
            for att in ("sdpa", "eager"):
                for ck in (False, True):
                    out.append({"family": fam, "seq": s, "batch": b, "attention": att, "ckpt": ck})
    lora_shapes = ((64, 1), (64, 3)) if device == "cpu" else ((256, 1), (512, 4), (2048, 1))
    for fam in LORA_FAMILIES:
        small = SMALL_TARGETS.get(fam, ("q_proj,v_proj", "down_proj"))
        for targets, dropout in (("all-linear", 0.0), ("all-linear", 0.1), (small[0], 0.0), (small[1], 0.1)):
            for s, b in lora_shapes:
                for att in ("sdpa", "eager"):
                    for ck in (False, True):
                        out.append({"family": fam, "seq": s, "batch": b, "attention": att, "ckpt": ck,
                                    "lora": {"rank": 16, "targets": targets, "dropout": dropout}})
    for rank in (8, 64):
        out.append({"family": "llama", "seq": 512, "batch": 2, "attention": "sdpa", "ckpt": False,
                    "lora": {"rank": rank, "targets": "all-linear", "dropout": 0.05}})
    out += modules_to_save_cases(lora_shapes)
    for fam in ("llama", "qwen3", "gpt2", "mixtral"):  # QLoRA last: each reloads a 4-bit copy of the model
        for targets in ("all-linear", SMALL_TARGETS.get(fam, ("q_proj,v_proj",))[0]):
            for ck in (False, True):
                out.append({"family": fam, "seq": 256, "batch": 2, "attention": "sdpa", "ckpt": ck,
                            "lora": {"rank": 16, "targets": targets, "dropout": 0.0, "qlora": True}})
    return out


def modules_to_save_cases(shapes: tuple[tuple[int, int], ...]) -> list[dict]:
    """LoRA with PEFT's modules_to_save: the embedding and the head (`--lora-modules-to-save`) on every LoRA family,
    and each alone on a few, where a trainable embedding changes what the first layer keeps and a trainable head
    what the final norm keeps."""
    out = []
    for fam in LORA_FAMILIES:
        for saves in (("embedding", "head"),) + ((("embedding",), ("head",)) if fam in SAVE_ALONE else ()):
            for s, b in shapes if len(saves) == 2 else shapes[-1:]:
                for att in ("sdpa", "eager"):
                    for ck in (False, True):
                        out.append({"family": fam, "seq": s, "batch": b, "attention": att, "ckpt": ck,
                                    "lora": {"rank": 16, "targets": "all-linear", "dropout": 0.0, "save": saves}})
    return out


def _special(device: str) -> list[dict]:
    out: list[dict] = []
    special = [
        ("mistral", {"sliding_window": 512}, 512), ("mistral", {"sliding_window": 512}, 1024),
        ("qwen2", {"use_sliding_window": True, "sliding_window": 256, "max_window_layers": 1}, 512),
        ("gemma3_text", {"sliding_window": 256}, 1024),
        ("gemma3_text", {"sliding_window": 256, "layer_types": ["sliding_attention", "sliding_attention"]}, 512),
    ]
    for fam, overrides, s in special:
        for att in ("sdpa", "eager"):
            out.append({"family": fam, "seq": s, "batch": 2, "attention": att, "ckpt": False, "overrides": overrides})
    for fam in ("llama", "gpt2", "falcon", "qwen3"):
        for att in ("sdpa", "eager"):
            out.append({"family": fam, "seq": 256, "batch": 2, "attention": att, "ckpt": False, "dtype": "fp32"})
    for fam in ("llama", "gpt2", "mixtral", "falcon"):
        for ck in (False, True):
            out.append({"family": fam, "seq": 512, "batch": 2, "attention": "sdpa", "ckpt": ck, "transient": True})
    return out


def small(config: dict) -> dict:
    """A narrower copy of a miniature for the CPU golden data: half the width (head_dim kept where the config fixes
    it), a quarter of the vocabulary. The model is exact in every dimension, so nothing is lost but CPU time."""
    c = dict(config)
    for key in ("hidden_size", "n_embd", "intermediate_size", "ffn_dim", "moe_intermediate_size",
                "shared_expert_intermediate_size", "word_embed_proj_dim"):
        if key in c:
            c[key] //= 2
    c["vocab_size"] = c["vocab_size"] // 4
    return c


def run_case(case: dict, device: str) -> dict:
    config = case["config"]
    lora = case.get("lora") or {}
    save = None
    if lora.get("save"):  # roles, named as the family names its modules
        from zerokit.models.lora import saveable_names

        names = saveable_names(config)
        save = [names[role] for role in lora["save"]]
    t0 = time.time()
    try:
        m = measure(config, case["seq"], case["batch"], case["attention"], case.get("dtype", "bf16"), case["ckpt"],
                    device=device, lora_rank=lora.get("rank", 0), lora_targets=lora.get("targets", "all-linear"),
                    lora_dropout=lora.get("dropout", 0.0), qlora=lora.get("qlora", False),
                    transient=case.get("transient", False), modules_to_save=save)
    except Exception as exc:  # noqa: BLE001 - the libraries refuse some combinations; record which and why
        return {**case, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"}
    finally:
        if device == "cuda":
            import torch

            torch.cuda.empty_cache()
    return {**case, **m, "seconds": round(time.time() - t0, 2)}


def _with_configs(todo: list[dict], device: str) -> list[dict]:
    """Each case carries its full config, so the golden data stands alone."""
    out = []
    for case in todo:
        base = small(MINIATURES[case["family"]]) if device == "cpu" else MINIATURES[case["family"]]
        out.append({**case, "config": {**base, **case.get("overrides", {})}})
    return out


def _case_key(case: dict) -> str:
    keys = ("family", "seq", "batch", "attention", "ckpt", "dtype", "lora", "config", "transient")
    return json.dumps({k: case.get(k) for k in keys}, sort_keys=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--only", help="comma list of families")
    ap.add_argument("--lora-first", action="store_true", help="measure the LoRA cases before full fine-tuning")
    ap.add_argument("--kind", choices=["all", "full", "lora"], default="all", help="only these cases")
    ap.add_argument("--resume", action="store_true", help="keep the cases already in the .jsonl beside -o")
    ap.add_argument("--merge", nargs="+", metavar="JSONL", help="instead: merge .jsonl files (runs split across "
                    "processes) into -o, one row per case")
    a = ap.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()
    if a.merge:
        rows: dict[str, dict] = {}
        for path in a.merge:
            with open(path) as f:
                for line in f:
                    if line.strip():
                        row = json.loads(line)
                        rows[_case_key(row)] = row
        _write(a.output, a.device, list(rows.values()))
        return 0
    todo = cases(a.device)
    if a.only:
        keep = set(a.only.split(","))
        todo = [c for c in todo if c["family"] in keep]
    if a.kind != "all":
        todo = [c for c in todo if ("lora" in c) == (a.kind == "lora")]
    if a.lora_first:
        todo.sort(key=lambda c: "lora" not in c)
    todo = _with_configs(todo, a.device)
    lines = os.path.splitext(a.output)[0] + ".jsonl"
    done = []
    if a.resume and os.path.exists(lines):
        with open(lines) as f:
            done = [json.loads(line) for line in f if line.strip()]
        have = {_case_key(r) for r in done}
        todo = [c for c in todo if _case_key(c) not in have]
    with open(lines, "a" if a.resume else "w") as f:
        for i, case in enumerate(todo):
            try:
                row = run_case(case, a.device)
            except Exception:  # noqa: BLE001 - keep the run going, print why
                traceback.print_exc()
                continue
            done.append(row)
            f.write(json.dumps(row) + "\n")
            f.flush()
            if i % 25 == 0:
                print(f"{i}/{len(todo)} {row.get('family')} {row.get('activations', row.get('error'))}", flush=True)
    _write(a.output, a.device, done)
    return 0


def _write(output: str, device: str, rows: list[dict]) -> None:
    import torch
    import transformers

    meta = {"device": device, "torch": torch.__version__, "transformers": transformers.__version__,
            "command": f"python benchmarks/activations_golden.py --device {device} -o {output}"}
    try:
        import peft

        meta["peft"] = peft.__version__
    except ImportError:
        pass
    if device == "cuda":
        meta["gpu"] = torch.cuda.get_device_name()
    rows = sorted(rows, key=lambda r: (r["family"], "lora" in r, _case_key(r)))
    tmp = output + ".tmp"
    with open(tmp, "w") as f:
        f.write('{"meta": ' + json.dumps(meta) + ',\n "cases": [\n')
        f.write(",\n".join(json.dumps(r, sort_keys=True) for r in rows))
        f.write("\n]}\n")
    os.replace(tmp, output)
    print(f"{len(rows)} cases -> {output}")


if __name__ == "__main__":
    sys.exit(main())
