"""ZeRO-3's all-gathers a step, counted in real DeepSpeed trainings, against what the time model gathers.

    python benchmarks/zero3_gathers.py                  # print the committed counts beside the model's
    python benchmarks/zero3_gathers.py --measure        # count them again (2 ranks on this CPU, ~1 min a distance)
    python benchmarks/zero3_gathers.py --trace 2000000  # one step's fetches, gathers and releases at a distance

Each count is one optimizer step after two (DeepSpeed's trace is complete from the second), of benchmarks/
step_time.py's llama at a plan's ZeRO-3 buffers, with `stage3_max_reuse_distance` set to each distance: the calls to
`deepspeed.comm.allgather_fn` and the elements they gather (the whole parameters), with `stage3_max_live_parameters`
the same (a plan writes both). The time model gathers
`ModelFlops.gathered` in forward and `ModelFlops.regathered` again in backward: the modules DeepSpeed's reuse window
released (`__params_to_release`). The counts are in tests/data/step_time/2026-11-29-zero3-gathers.json, which
tests/test_perf_golden.py holds the model to.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from step_time import MICRO_BATCH, MODEL, RANKS, SEQ_LEN, _write_json, buffers, ds_config, runner_env

from zerokit.launch.runner import free_port, remove_shm_buffers
from zerokit.perf.flops import model_flops

DATA = ROOT / "tests" / "data" / "step_time" / "2026-11-29-zero3-gathers.json"
DISTANCES = (1_000_000_000, 2_000_000, 1_000_000)
"""DeepSpeed's default (a plan's "auto"), and two below the model's 3.9M parameters, as a frugal rung's 1e8 is below
a 7B's; each the live limit too (`stage3_max_live_parameters`), as a plan writes them."""

WORKER = """
import json, os, sys
import deepspeed, torch, torch.distributed as dist
import deepspeed.comm as comm
from transformers import AutoModelForCausalLM, LlamaConfig
spec_path, out_path = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]
spec = json.load(open(spec_path))
deepspeed.init_distributed()
config = LlamaConfig(**{k: v for k, v in spec["model"].items() if k != "model_type"})
with deepspeed.zero.Init(config_dict_or_path=spec["ds_config"]):
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
engine, *_ = deepspeed.initialize(model=model, config=spec["ds_config"], model_parameters=model.parameters())
counted, counting, trace = [0, 0], [False], []
if spec["trace"]:  # every module fetch, every gather of a parameter not yet gathered, every release, in order
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator as C
    names = {id(p): n for n, p in model.named_parameters()} | {id(m): n for n, m in model.named_modules()}
    step_of = lambda self: self._PartitionedParameterCoordinator__step_id
    fetch, gather = C.fetch_sub_module, C._PartitionedParameterCoordinator__all_gather_params
    release = C._PartitionedParameterCoordinator__release_param
    def traced_fetch(self, module, forward):
        if counting[0]:
            trace.append(f"{step_of(self):4d} {'forward ' if forward else 'backward'} fetch   {names.get(id(module))}")
        return fetch(self, module, forward)
    def traced_gather(self, params, forward):
        if counting[0]:
            trace.extend(f"{step_of(self):4d}          gather  {names.get(id(p))}" for p in params
                         if p.ds_status == ZeroParamStatus.NOT_AVAILABLE)
        return gather(self, params, forward)
    def traced_release(self, param, free_data=True):
        if counting[0] and param.ds_status == ZeroParamStatus.AVAILABLE and not param.ds_active_sub_modules:
            trace.append(f"{step_of(self):4d}          release {names.get(id(param))}")
        return release(self, param, free_data)
    C.fetch_sub_module = traced_fetch
    C._PartitionedParameterCoordinator__all_gather_params = traced_gather
    C._PartitionedParameterCoordinator__release_param = traced_release
allgather = comm.allgather_fn
def counting_allgather(output, input_, *args, **kwargs):
    if counting[0]:
        counted[0] += 1
        counted[1] += output.numel()
    return allgather(output, input_, *args, **kwargs)
comm.allgather_fn = counting_allgather
g = torch.Generator().manual_seed(dist.get_rank())
for step in range(3):
    counting[0] = step == 2
    ids = torch.randint(0, config.vocab_size, (spec["micro_batch"], spec["seq_len"]), generator=g)
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    engine.step()
if dist.get_rank() == 0:
    json.dump({"calls": counted[0], "elements": counted[1], "trace": trace}, open(out_path, "w"))
dist.barrier()
dist.destroy_process_group()
# the process group is gone; leave without C++ static destructors, which on the CPU accelerator occasionally
# abort a rank at exit ("terminate called without an active exception"), as examples/train_hf.py does
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
"""


def count(distance: int, trace: bool = False) -> dict:
    """One step's all-gathers with `distance` as the reuse distance and the live limit."""
    case = {"stage": 3, "reuse_distance": distance}
    env = runner_env()
    with tempfile.TemporaryDirectory(prefix="zerokit-gathers-") as tmp:
        spec, out, worker = Path(tmp) / "case.json", Path(tmp) / "count.json", Path(tmp) / "worker.py"
        config = ds_config(case)
        config["zero_optimization"]["stage3_max_live_parameters"] = distance
        spec.write_text(json.dumps({"model": MODEL, "seq_len": SEQ_LEN, "micro_batch": MICRO_BATCH,
                                    "ds_config": config, "trace": trace}))
        worker.write_text(WORKER)
        port = free_port()
        proc = subprocess.run(["deepspeed", "--num_gpus", str(RANKS), "--master_port", str(port), str(worker),
                               str(spec), str(out)], env=env, capture_output=True, text=True, timeout=900,
                              check=False)
        remove_shm_buffers(port)
        if proc.returncode != 0 or not out.exists():
            raise SystemExit(f"reuse distance {distance}: the training failed:\n"
                             + "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:]))
        return json.loads(out.read_text())


def modelled(distance: int) -> tuple[int, int]:
    """(calls, elements) the time model gathers a micro-batch: forward's, and backward's again."""
    threshold = buffers({"stage": 3}).param_persistence_threshold
    mf = model_flops(MODEL)
    forward, again = mf.gathered(threshold), mf.regathered(threshold, distance)
    return forward[0] + again[0], forward[1] + again[1]


def report() -> None:
    counts = json.loads(DATA.read_text())["counts"]
    print("ZeRO-3 all-gathers in one step (2 ranks, benchmarks/step_time.py's llama), counted in DeepSpeed against "
          "the time model")
    print(f"{'reuse distance, live limit':>26} {'counted calls':>14} {'elements':>10} {'model calls':>12} "
          f"{'elements':>10} {'error':>7}")
    for c in counts:
        calls, elements = modelled(c["reuse_distance"])
        print(f"{c['reuse_distance']:>26,} {c['calls']:>14} {c['elements']:>10,} {calls:>12} {elements:>10,} "
              f"{(elements - c['elements']) / c['elements']:>+7.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true", help="count them again in real trainings")
    ap.add_argument("--trace", type=int, metavar="DISTANCE",
                    help="print one step's module fetches, parameter gathers and releases at this distance")
    args = ap.parse_args()
    if args.trace is not None:
        print("\n".join(count(args.trace, trace=True)["trace"]))
        return
    if args.measure:
        counts = []
        for distance in DISTANCES:
            counts.append({"reuse_distance": distance, **{k: v for k, v in count(distance).items() if k != "trace"}})
            print(f"reuse distance {distance:,}: {counts[-1]['calls']} all-gathers, {counts[-1]['elements']:,} "
                  "elements", flush=True)
        _write_json(DATA, {"command": "python benchmarks/zero3_gathers.py --measure", "model": MODEL,
                           "seq_len": SEQ_LEN, "micro_batch": MICRO_BATCH, "ranks": RANKS, "counts": counts})
    report()


if __name__ == "__main__":
    main()
