"""Property-based, for every command but lint (tests/test_lint_props.py has lint): whatever the options, config.json,
hostfile, ds_config or plan file, the answer is the documented exit code with one line on stderr, never a traceback
or exit 70; nothing is written on bad input; and no value reaches a generated script unquoted.

About 10,000 cases in all, run in-process through `zerokit.cli.main` (a few minutes on 2 busy cores).
ZEROKIT_HYPOTHESIS_SCALE=10 runs ten times as many.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from zerokit.cli import main

ROOT = Path(__file__).resolve().parent.parent
SCALE = float(os.environ.get("ZEROKIT_HYPOTHESIS_SCALE", "1"))


def examples(n: int):
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


def cli(capsys, argv: list[str], allowed: tuple[int, ...]) -> tuple[int, str, str]:
    """Run one command in-process and hold it to the contract: an allowed exit code; on an error, one line."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert code in allowed, (argv, code, err[-2000:])
    assert "Traceback" not in err and "internal error" not in err, (argv, err[-2000:])
    if code == 2:
        assert err.count("\n") == 1 and re.match(r"zerokit \w+: error: ", err), (argv, err)
    return code, out, err


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory(prefix="zk-props-") as d:
        yield Path(d)


def fresh(workdir: Path) -> Path:
    """An empty directory per example: anything found there afterwards was written by the command."""
    d = Path(tempfile.mkdtemp(dir=workdir))
    return d


# ---------------------------------------------------------------- values as people (and fuzzers) type them

digits = st.integers(0, 10**6).map(str)
huge = st.sampled_from(["9" * 400, "1e400", "1" + "0" * 40, "-1", "0", "-0", "1e-400", "2.5", "1.5k", "²", "١٢",
                        "0x10", "1_000", " 8 ", "", " ", "nan", "inf", "-inf", "NaN", "1e18", "99999999999999999999"])
units = st.sampled_from(["", "B", "KB", "MB", "GB", "GiB", "TB", "MiB", "G", "gb", "g", "TiB", "EB", "x"])
sizes = st.one_of(st.builds(lambda n, u: f"{n}{u}", st.one_of(digits, st.floats(0, 1e6).map(lambda f: f"{f:g}"),
                                                              huge), units), huge)
counts = st.one_of(digits, huge, st.builds(lambda n, s: f"{n}{s}", st.integers(0, 5000),
                                           st.sampled_from(["", "k", "K", "M", "B", "T", "x"])))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), huge,
                   st.sampled_from(["1e-4", "3e-5", "0.1", "-0.1", "1e309", "-1e309"]))
text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=24)
# The CLI's own parser refuses option-looking values; that is usage, exit 2, and is part of the property.
anything = st.one_of(text, huge, digits)

PRESETS = ["llama-2-7b", "mixtral-8x7b", "gpt2", "qwen2.5-0.5b", "falcon-7b", "gemma-2b", "opt-125m",
           "qwen1.5-moe-a2.7b", "phi-3-mini", "qwen3-0.6b"]
GPUS = ["a100-80gb", "h100-80gb", "v100-32gb", "t4", "rtx4090", "custom", "a100", "nvidia", ""]

PLAN_OPTIONS = {
    "--gpu-memory": sizes, "--gpus-per-node": counts, "--nodes": counts, "--cpu-memory": sizes,
    "--nvme-size": sizes, "--nvme-path": st.one_of(st.just("/tmp"), text), "--micro-batch": st.one_of(counts,
                                                                                                       st.just("auto")),
    "--global-batch": counts, "--global-batch-tokens": counts,
    "--zero-stage": st.sampled_from(["auto", "0", "1", "2", "3", "4", "-1", "x"]),
    "--offload-optimizer": st.sampled_from(["auto", "none", "cpu", "nvme", "gpu"]),
    "--offload-param": st.sampled_from(["auto", "none", "cpu", "nvme", "disk"]),
    "--gradient-checkpointing": st.sampled_from(["auto", "on", "off", "yes"]),
    "--attention": st.sampled_from(["sdpa", "flash", "eager", "xformers"]),
    "--precision": st.sampled_from(["auto", "bf16", "fp16", "fp32", "fp8"]),
    "--overhead": sizes, "--lr": floats, "--weight-decay": floats,
    "--warmup-steps": st.one_of(digits, huge), "--total-steps": st.one_of(digits, huge),
    "--target": st.sampled_from(["trainer", "accelerate", "deepspeed", "megatron"]),
    "--format": st.sampled_from(["table", "json", "markdown", "yaml"]),
}


@st.composite
def plan_argv(draw) -> list[str]:
    model = draw(st.one_of(st.sampled_from(PRESETS), counts, text))
    argv = ["plan", "--model", model]
    gpu = draw(st.sampled_from(GPUS + [None]))
    if gpu is not None:
        argv += ["--gpu", gpu]
    if gpu is None or gpu == "custom" or draw(st.booleans()):
        argv += ["--gpu-memory", draw(sizes)]
    argv += ["--seq-len", draw(st.one_of(st.sampled_from(["512", "4096", "1", str(2**24), str(2**24 + 1)]), counts))]
    for option in draw(st.lists(st.sampled_from(sorted(PLAN_OPTIONS)), max_size=5, unique=True)):
        argv += [option, draw(PLAN_OPTIONS[option])]
    return argv


@examples(2500)
@given(argv=plan_argv(), write=st.booleans())
def test_plan_options(capsys, workdir, argv, write):
    out_dir = fresh(workdir)
    target = out_dir / "ds_config.json"
    code, out, _ = cli(capsys, [*argv, *(["-o", str(target)] if write else [])], (0, 1, 2))
    written = sorted(p.name for p in out_dir.iterdir())
    if write and code == 0:
        assert written == ["ds_config.json"]
        assert isinstance(json.loads(target.read_text()), dict)
    else:  # bad input or nothing fits: nothing written, not even a temp file
        assert written == []
    if code in (0, 1) and "--format" in argv and argv[argv.index("--format") + 1] == "json":
        json.loads(out)  # NaN/Infinity would make this strict JSON invalid
        assert "NaN" not in out and "Infinity" not in out
    shutil.rmtree(out_dir)


# ---------------------------------------------------------------- config.json contents

CONFIG_KEYS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
               "intermediate_size", "vocab_size", "num_local_experts", "num_experts", "num_experts_per_tok",
               "moe_intermediate_size", "max_position_embeddings", "n_embd", "n_layer", "n_head", "n_inner",
               "n_positions", "ffn_dim", "tie_word_embeddings", "model_type", "num_kv_heads", "decoder_sparse_step",
               "mlp_only_layers", "shared_expert_intermediate_size", "word_embed_proj_dim", "new_decoder_architecture",
               "multi_query", "parallel_attn", "attention_bias", "torch_dtype"]
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.integers(-2**70, 2**70),
                         st.sampled_from([10**9, 10**18, 10**40, 2**31, 0, 1, 3, 7, 4097]),
                         st.floats(), text,
                         st.sampled_from(["llama", "mixtral", "gpt2", "no_such_model", "", "auto"]))
json_values = st.recursive(json_scalars, lambda kids: st.lists(kids, max_size=3)
                           | st.dictionaries(st.sampled_from(CONFIG_KEYS) | text, kids, max_size=3), max_leaves=8)
FAMILY_CONFIGS = [json.loads((ROOT / "zerokit" / "data" / "models" / f"{name}.json").read_text()) for name in PRESETS]


@st.composite
def config_json(draw) -> dict:
    config = {k: v for k, v in draw(st.sampled_from(FAMILY_CONFIGS)).items() if not k.startswith("_")}
    for _ in range(draw(st.integers(0, 4))):
        key = draw(st.sampled_from(CONFIG_KEYS))
        if draw(st.integers(0, 4)) == 0:
            config.pop(key, None)
        else:
            config[key] = draw(json_values)
    if config.get("model_type") not in ("llama", "mixtral", "gpt2", "qwen2", "falcon", "gemma", "opt", "qwen2_moe",
                                        "phi3", "qwen3"):
        config["model_type"] = draw(st.sampled_from(["llama", "mixtral", "gpt2", "qwen2_moe", "falcon", "opt"]))
    return config


@examples(2000)
@given(config=config_json(), seq=st.sampled_from(["128", "2048"]), raw=st.sampled_from([None, b"", b"\xef\xbb\xbf",
                                                                                        b"\xff\xfe", b"[1]"]))
def test_plan_config_json(capsys, workdir, config, seq, raw):
    d = fresh(workdir)
    path = d / "config.json"
    payload = json.dumps(config).encode()  # NaN and Infinity too, which json.load reads
    path.write_bytes(payload if raw is None else raw + payload)
    code, _, err = cli(capsys, ["plan", "--model", str(path), "--gpu", "h100-80gb", "--gpus-per-node", "8",
                                "--seq-len", seq, "--format", "json"], (0, 1, 2))
    if raw in (b"\xff\xfe", b"[1]", b"\xef\xbb\xbf"):
        assert code == 2, err  # not UTF-8; not JSON; a BOM (transformers' json.load refuses it)
    shutil.rmtree(d)


# ---------------------------------------------------------------- launch: the command line and generated scripts

host = st.one_of(st.sampled_from(["node1", "node-2", "10.0.0.1", "gpu-a.cluster", "localhost"]), text)
hosts_option = st.lists(st.builds(lambda h, s: f"{h}:{s}" if s is not None else h, host,
                                  st.one_of(st.none(), digits, huge)), min_size=1, max_size=3).map(",".join)
env_value = st.one_of(st.sampled_from(["INFO", "eth0", "x y", "$(touch PWNED)", "`id`", "a;b", "'q'", '"d"', "\n",
                                       "a\nb", "$HOME", "\\", ""]), text)
env_option = st.builds(lambda k, v: f"{k}={v}", st.one_of(st.sampled_from(["NCCL_DEBUG", "X", "GLOO_SOCKET_IFNAME",
                                                                           "1BAD", "A-B", ""]), text), env_value)
script_args = st.lists(st.one_of(env_value, text, st.sampled_from(["--deepspeed", "--lr", "-x", "--", "$(id)"])),
                       max_size=5)


@st.composite
def launch_argv(draw) -> tuple[list[str], list[str], dict[str, str]]:
    argv: list[str] = []
    env: dict[str, str] = {}
    mode = draw(st.sampled_from(["one", "hosts", "no-ssh"]))
    if mode == "one":
        argv += ["--gpus-per-node", draw(st.one_of(st.sampled_from(["1", "2", "8"]), anything))]
    else:
        argv += ["--hosts", draw(hosts_option)]
        if draw(st.booleans()):
            argv += ["--gpus-per-node", draw(st.sampled_from(["1", "4", "0", "x"]))]
        if draw(st.booleans()):
            argv += ["--master-addr", draw(host)]
        argv += ["--launcher", draw(st.sampled_from(["pdsh", "openmpi", "slurm", "mpich", "ssh"]))]
    if mode == "no-ssh":
        argv += ["--no-ssh", "--node-rank", draw(st.sampled_from(["0", "1", "2", "-1", "x"]))]
    for _ in range(draw(st.integers(0, 3))):
        item = draw(env_option)
        argv += ["--env", item]
        key, _, value = item.partition("=")
        env[key] = value
    if draw(st.integers(0, 5)) == 0:
        argv += ["--master-port", draw(st.sampled_from(["0", "29500", "65535", "65536", "x"]))]
    if draw(st.integers(0, 5)) == 0:
        argv += ["--nodes", draw(st.sampled_from(["1", "2", "3", "0"]))]
    args = draw(script_args)
    return argv, args, env


def quoted(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def logical_lines(text: str) -> list[str]:
    """Split shell text into commands the way bash does for what shlex.quote writes: a newline ends a command only
    outside quotes, and a `#` at the start of a line starts a comment (dropped)."""
    commands, current, quote, i = [], "", None, 0
    while i < len(text):
        c = text[i]
        if quote:
            current += c
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
            current += c
        elif c == "\n":
            commands.append(current)
            current = ""
        elif c == "#" and not current.strip():
            i = text.find("\n", i)
            i = len(text) if i == -1 else i
            continue
        else:
            current += c
        i += 1
    assert quote is None, "an unterminated quote"
    commands.append(current)
    return [c for c in commands if c.strip()]


@examples(1500)
@given(case=launch_argv())
def test_launch_dry_run(capsys, workdir, case):
    argv, args, env = case
    d = fresh(workdir)
    (d / "train.py").write_text("")
    cwd = os.getcwd()
    os.chdir(d)
    try:
        code, out, _ = cli(capsys, ["launch", *argv, "--dry-run", "train.py", *args], (0, 2))
    finally:
        os.chdir(cwd)
    assert sorted(p.name for p in d.iterdir()) == ["train.py"]  # a dry run writes nothing
    if code == 0:
        line = logical_lines(out)[-1]  # the printed command: every value shell-quoted, as given
        assert line.endswith(" " + quoted(["train.py", *args]))
        for key, value in env.items():
            assert f"{key}={shlex.quote(value)} " in line
    shutil.rmtree(d)


SCRIPT_COMMANDS = ("set ", "cd ", "export ", "exec ", "mkdir ", "cat ", 'scontrol="$(command -v scontrol)"',
                   'srun="$(command -v srun)"', 'bash="$(command -v bash)"', 'master_addr="$("$scontrol" ',
                   'hostfile="${SLURM_SUBMIT_DIR:-$PWD}/', '"$srun" ', '"$scontrol" ',
                   # the one-node guard against a CUDA_VISIBLE_DEVICES the runner would drop (launch.sh.j2)
                   'if [ -n "${CUDA_VISIBLE_DEVICES:-}" ] && { [ -e ', '  echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES: ',
                   "  exit 2", "fi",
                   # the .deepspeed_env block: the user's own env files read at run time, then --env's (launch.sh.j2)
                   "(", "  umask 077", '  tmp="$(mktemp ', """  trap 'rm -f "$tmp"' EXIT""", "  {", '    for f in "$HOME/${DS_ENV_FILE:-.deepspeed_env}"',
                   '      case "${DS_ENV_FILE:-}" in /*) f="$DS_ENV_FILE";; esac',
                   '      if [ -f "$f" ]; then while IFS= read -r line', "    done", "    cat <<'ZEROKIT_EOF'",
                   "  } > ", "  if [ -d ", '  mv -f "$tmp" ', ")",
                   # the hostfile, written the same way
                   """  cat > "$tmp" <<'ZEROKIT_EOF'""")


def _expanding(command: str) -> str:
    """The characters of a shell word sequence that bash expands: everything outside single quotes (double quotes
    expand $ and `), quotes themselves dropped. shlex.quote writes a ' as '"'"', which a regex pairing single quotes
    reads wrongly."""
    out, quote = [], None
    for c in command:
        if quote == "'":
            quote = None if c == "'" else quote
        elif quote == '"':
            if c == '"':
                quote = None
            else:
                out.append(c)
        elif c in "'\"":
            quote = c
        else:
            out.append(c)
    return "".join(out)


def check_script(text: str, args: list[str], env: dict[str, str]) -> None:
    """Every line is a comment or one of the template's commands (a newline in a value would start a new one), and
    every value appears exactly as shlex.quote writes it: `export K='v'`, `... train.py 'arg' ...`, and for SLURM
    the node command quoted once more for `bash -c`, with only the script's own variables outside quotes."""
    lines = text.split("\n")
    kept = []
    i = 0
    while i < len(lines):
        line = lines[i]
        kept.append(line)
        if line.lstrip().startswith("cat ") and line.endswith("<<'ZEROKIT_EOF'"):
            i = lines.index("ZEROKIT_EOF", i + 1)  # a quoted here-document: literal, nothing expands
        i += 1
    body = logical_lines("\n".join(kept))
    for line in body:
        assert line.startswith(SCRIPT_COMMANDS), line
    for key, value in env.items():
        assert f"export {key}={shlex.quote(value)}" in body
    tail = " " + quoted(["train.py", *args])
    command = next(line for line in body if line.startswith(("exec ", '"$srun" ')))
    if command.startswith('"$srun" '):
        prefix = '"$srun" --kill-on-bad-exit=1 "$bash" -c '
        assert command.startswith(prefix)
        inner = shlex.split(command[len(prefix):])
        assert len(inner) == 1 and shlex.quote(inner[0]) == command[len(prefix):]
        command = inner[0]
        outside = _expanding(command)  # what single quotes do not protect
        assert set(re.findall(r"[$`]\w*|[$`]", outside)) <= {"$HOSTFILE", "$SLURM_NODEID", "$MASTER_ADDR",
                                                              "$MASTER_PORT"}, outside
    assert command.endswith(tail), (command, tail)


@examples(1200)
@given(case=launch_argv(), which=st.sampled_from(["--emit-script", "--emit-sbatch"]), write=st.booleans())
# cases random draws found once, kept: a remote host's .deepspeed_env block, and a quote beside a $(...) argument
@example(case=(["--hosts", "node1:1", "--launcher", "pdsh", "--env", "NCCL_DEBUG=INFO", "--nodes", "1"], [],
               {"NCCL_DEBUG": "INFO"}), which="--emit-script", write=False)
@example(case=(["--gpus-per-node", "1", "--nodes", "1"], ["'", "$(touch PWNED)"], {}), which="--emit-sbatch",
         write=False)
def test_launch_emit(capsys, workdir, case, which, write):
    argv, args, env = case
    d = fresh(workdir)
    target = d / "job.sh"
    extra = ["--gpus-per-node", "2"] if which == "--emit-sbatch" and "--gpus-per-node" not in argv else []
    code, out, _ = cli(capsys, ["launch", *argv, *extra, which, str(target), *([] if write else ["--dry-run"]),
                                "train.py", *args], (0, 2))
    written = sorted(p.name for p in d.iterdir())
    if code == 0 and write:
        assert written == ["job.sh"] and os.access(target, os.X_OK)
        text = target.read_bytes().decode()  # as written: read_text would turn \r into \n
    else:
        assert written == []  # bad input, or a dry run: nothing written, no temp file
        text = out.split("\n", 1)[1] if code == 0 else ""
    if code == 0:
        check_script(text, args, env)
    shutil.rmtree(d)


@examples(60)
@given(args=st.lists(st.one_of(env_value, st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12)),
                     max_size=4),
       value=env_value)
def test_emitted_scripts_run_with_every_value_intact(capsys, workdir, args, value):
    """The strongest form of "quoted": bash runs the script and a stub runner records what arrives."""
    d = fresh(workdir)
    (d / "bin").mkdir()
    record = d / "record.json"
    stub = d / "bin" / "deepspeed"
    stub.write_text(f"#!{sys.executable}\nimport json, os, sys\njson.dump({{'argv': sys.argv[1:], 'x': "
                    f"os.environ.get('X')}}, open({str(record)!r}, 'w'))\n")
    stub.chmod(0o755)
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{d / 'bin'}:{path}"
    try:
        code, _, _ = cli(capsys, ["launch", "--gpus-per-node", "1", "--env", f"X={value}", "--emit-script",
                                  str(d / "run.sh"), "train.py", *args], (0, 2))
    finally:
        os.environ["PATH"] = path
    assert code == 0
    subprocess.run(["bash", str(d / "run.sh")], cwd=d, check=True, timeout=60,
                   env={**os.environ, "PATH": f"{d / 'bin'}:{path}"})
    got = json.loads(record.read_text())
    assert got == {"argv": ["--num_gpus", "1", "--master_port", "29500", "train.py", *args], "x": value}
    assert sorted(p.name for p in d.iterdir()) == ["bin", "record.json", "run.sh"]  # nothing else ran
    shutil.rmtree(d)


# ---------------------------------------------------------------- preflight: hostfiles, configs, plans

host_word = st.one_of(st.sampled_from(["node1", "worker-2", "10.0.0.3", "a.b", "-x", "a;b", "$(id)", "h\tx"]), text)
slot_word = st.one_of(st.sampled_from(["slots=1", "slots=8", "slots=0", "slots = 8", "slots=²", "slots=08",
                                       "slots=4096", "slots=4097", "slots=x", "slot=2", "slots=", "slots=1 # c"]),
                      st.builds(lambda n: f"slots={n}", st.integers(-5, 10**6)))
hostfile_line = st.one_of(st.builds(lambda h, sep, s: f"{h}{sep}{s}", host_word, st.sampled_from([" ", "\t", "  "]),
                                    slot_word), st.sampled_from(["", "# comment", "   ", "#node1 slots=2"]), text)


@examples(1500)
@given(lines=st.lists(hostfile_line, max_size=5), encoding=st.sampled_from(["utf-8", "utf-8", "utf-16", "latin-1"]))
def test_hostfiles(capsys, workdir, lines, encoding):
    """zerokit accepts only what DeepSpeed's own parser accepts, with the same hosts and slots."""
    from zerokit.errors import BadInput
    from zerokit.launch import preflight
    from zerokit.launch.hostfile import read_hostfile

    d = fresh(workdir)
    path = d / "hostfile"
    text = "\n".join(lines) + "\n"
    try:
        path.write_bytes(text.encode(encoding))
    except UnicodeEncodeError:
        path.write_bytes(text.encode("utf-8"))
    try:
        ours = read_hostfile(str(path))
    except BadInput:
        ours = None
    check = preflight.check_hostfile(preflight.Target(hostfile=str(path)))
    assert check.ok == (ours is not None)
    if ours is not None:
        runner = pytest.importorskip("deepspeed.launcher.runner")
        with open(path) as f:  # as DeepSpeed's fetch_hostfile reads it
            assert dict(runner._parse_hostfile(f.readlines())) == ours
    code, _, _ = cli(capsys, ["launch", "--hostfile", str(path), "--dry-run", "train.py"], (0, 2))
    assert (code == 0) == (ours is not None)
    shutil.rmtree(d)


ds_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), text,
              st.sampled_from(["nvme", "cpu", "none", "auto", "/tmp", "/nonexistent", ""])),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.sampled_from(
        ["zero_optimization", "offload_optimizer", "offload_param", "device", "nvme_path", "stage", "cpu_offload",
         "memory", "per_gpu", "per_node_cpu", "nvme", "total", "hardware", "gpus_per_node"]) | text, kids, max_size=4),
    max_leaves=12)


@examples(1300)
@given(config=ds_values, plan=st.one_of(st.none(), ds_values), raw=st.sampled_from([None, b"\xff", b"{", b"\x00"]))
def test_preflight_configs_and_plans(capsys, workdir, config, plan, raw):
    d = fresh(workdir)
    cfg, plan_path = d / "ds.json", d / "plan.json"
    cfg.write_bytes(raw if raw is not None else json.dumps(config).encode())
    argv = ["preflight", "--config", str(cfg), "--master-port", "1", "--format", "json"]
    if plan is not None:
        plan_path.write_text(json.dumps(plan))
        argv += ["--plan", str(plan_path)]
    code, out, _ = cli(capsys, argv, (0, 2, 3))
    if raw is not None or not isinstance(config, dict):
        assert code == 2
    if code != 2:
        report = json.loads(out)
        assert report["ok"] is (code == 0) and all(set(c) == {"name", "ok", "detail", "fix", "checked"}
                                                   and isinstance(c["checked"], bool) for c in report["checks"])
    shutil.rmtree(d)
