"""`cliffsweep plan` (cliffsweep/planner/: plan.py, costs.py, mfu.py, archs.py, tokenstats.py): each number of the budget is
checked against the real thing on small models: parameter counts against transformers' models
and the model cards, FLOPs against torch's FLOP counter, activation bytes against the tensors
autograd really saves, checkpoint bytes against the files training writes, method memory against
what each method really holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cliffsweep.planner import costs, mfu, plan
from cliffsweep.planner.archs import PUBLISHED, Arch, UnknownArch, arch_for
from cliffsweep.planner.tokenstats import PACKAGED, Lengths


def loaded(path: str) -> list:
    """[(path, spec)] as `cliffsweep plan PATH` reads it."""
    from cliffsweep.orchestrator.specfile import load_spec

    return [(path, load_spec(path))]

ROOT = Path(__file__).resolve().parents[1]
TINY = {kind: Arch(kind, hidden=64, layers=2, heads=4, kv_heads=2, intermediate=96, vocab=256, tied=tied,
                   max_positions=256)
        for kind, tied in (("qwen2", True), ("llama", False), ("qwen3", True), ("olmo2", False))}

# Totals the model cards publish (Qwen: "Number of Parameters"; Meta and AI2: the hub's
# safetensors total), as written there: compared to within one unit of the last digit.
CARD_PARAMS_B = {
    "Qwen/Qwen2.5-0.5B-Instruct": "0.49", "Qwen/Qwen2.5-1.5B-Instruct": "1.54", "Qwen/Qwen2.5-3B-Instruct": "3.09",
    "Qwen/Qwen2.5-7B-Instruct": "7.61", "Qwen/Qwen3-0.6B": "0.6", "Qwen/Qwen3-1.7B": "1.7", "Qwen/Qwen3-4B": "4.0",
    "Qwen/Qwen3-8B": "8.2", "meta-llama/Llama-3.2-1B-Instruct": "1.24", "meta-llama/Llama-3.2-3B-Instruct": "3.21",
    "meta-llama/Llama-3.1-8B-Instruct": "8.03", "allenai/OLMo-2-1124-7B-Instruct": "7.30",
    "allenai/OLMo-2-0425-1B-Instruct": "1.48",
}


def hf_model(arch: Arch, meta: bool = False, **kw):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    if meta:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(arch.hf_config())
    return AutoModelForCausalLM.from_config(arch.hf_config(), dtype=torch.float32, **kw)


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


# --- architectures ------------------------------------------------------------------------------
@pytest.mark.parametrize("hub", sorted(PUBLISHED))
def test_published_configs_count_what_transformers_builds_and_the_cards_publish(hub):
    arch = PUBLISHED[hub]
    assert n_params(hf_model(arch, meta=True)) == arch.params
    card = CARD_PARAMS_B[hub]
    assert abs(arch.params / 1e9 - float(card)) <= 10.0 ** -len(card.split(".")[1])


def test_local_config_json_is_read_for_toy_models():
    from cliffsweep.models import load_model, resolve_model

    for name in ("qwen2-tiny", "llama-tiny"):
        arch = arch_for(f"toy:{name}")
        model, _ = load_model(resolve_model(f"toy:{name}"))
        assert arch.params == n_params(model) and arch.source.endswith("config.json")
    with pytest.raises(UnknownArch, match="published configs"):
        arch_for("nobody/unknown-model")


def test_a_local_gpt2_folder_is_sized_as_transformers_builds_it(tmp_path):
    """001 finetunes GPT-2 (issue 40 part 5): its config.json is read (it once stopped `plan`:
    "model_type 'gpt2' is not one of ..."), and the counts are transformers' own, the tied head,
    learned positions, biases and LayerNorms included; FLOPs' N leaves the lookups out."""
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2Config(n_embd=64, n_layer=3, n_head=4, vocab_size=500, n_positions=128).save_pretrained(tmp_path)
    arch = arch_for(str(tmp_path))
    model = GPT2LMHeadModel(arch.hf_config())
    assert arch.model_type == "gpt2" and arch.params == n_params(model)
    lookups = model.transformer.wte.weight.numel() + model.transformer.wpe.weight.numel()
    assert arch.matmul_params == arch.params - lookups + arch.vocab * arch.hidden  # the tied head multiplies


# --- FLOPs and activations ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_six_n_d_matches_torch_flop_counter(kind):
    """FlopCounterMode counts every matmul of forward + backward; 6 N D must account for all but
    the attention scores (computed apart and added here; eager attention, whose matmuls the
    counter sees)."""
    from torch.utils.flop_counter import FlopCounterMode

    arch = TINY[kind]
    model = hf_model(arch, attn_implementation="eager")
    rows, seq = 2, 32
    ids = torch.randint(0, arch.vocab, (rows, seq))
    with FlopCounterMode(display=False) as fc:
        model(input_ids=ids, labels=ids).loss.backward()
    attention = 3 * 2 * 2 * arch.layers * rows * seq * seq * arch.heads * arch.hd  # QK^T and AV, fwd + 2x bwd
    assert fc.get_total_flops() == pytest.approx(costs.flops_per_token(arch, "sft", False) * rows * seq + attention, rel=0.02)


@pytest.mark.parametrize("kind", ["qwen2", "llama", "qwen3", "olmo2"])
def test_activation_estimate_matches_what_autograd_saves(kind):
    arch = TINY[kind]
    model = hf_model(arch)
    rows, seq = 2, 64
    params = {p.data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        if t.data_ptr() not in params and t.dtype.is_floating_point:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    ids = torch.randint(0, arch.vocab, (rows, seq))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        hidden = model.model(input_ids=ids).last_hidden_state  # the layers, without the LM head
    hidden.sum().backward()
    est = costs.train_memory(arch, "sft", {}, "adamw", costs.precision("float32", False), "ddp", 1, rows, seq,
                            False).parts["activations"]
    assert sum(seen.values()) == pytest.approx(est, rel=0.15), (sum(seen.values()), est)


# --- checkpoints and method memory -------------------------------------------------------------
@pytest.mark.parametrize("method", ["sft", "lora"])
def test_checkpoint_bytes_match_the_files_training_writes(method, tmp_path):
    from cliffsweep.trainables import resume
    from cliffsweep.trainables.methods import build_method
    from cliffsweep.trainables.optimizers import build_optimizer

    # big enough that torch.save's per-tensor overhead is small next to the tensors
    arch = Arch("qwen2", hidden=256, layers=2, heads=4, kv_heads=2, intermediate=512, vocab=2048, tied=True)
    m = build_method(method, {"rank": 4} if method == "lora" else {})
    model = m.prepare(hf_model(arch), {})
    opt = build_optimizer("adamw", model, 1e-3, 0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    ids = torch.randint(0, arch.vocab, (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    resume.save(tmp_path, 1, model, opt, sched, m)
    m.export(model).save_pretrained(tmp_path / "export", safe_serialization=True)
    got = costs.checkpoint_bytes(arch, method, {"rank": 4} if method == "lora" else {}, "adamw", "float32", "ddp")
    from safetensors.torch import load_file

    exported = [t for f in (tmp_path / "export").glob("*.safetensors") for t in load_file(f).values()]
    assert sum(t.nbytes for t in exported) == got.export  # + a small header per file
    assert (tmp_path / resume.TRAIN_STATE).stat().st_size == pytest.approx(got.train_state, rel=0.05)


@pytest.mark.parametrize("method", ["sft", "sib", "lora", "kl", "iw", "l2sp", "ewc", "mas"])
def test_method_copies_match_what_the_method_holds(method):
    from cliffsweep.trainables.methods import build_method

    arch = TINY["llama"]
    m = build_method(method)
    model = hf_model(arch)
    ids = torch.randint(1, arch.vocab, (2, 12))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids,
             "example_idx": torch.arange(2), "is_retain": torch.ones(2, dtype=torch.bool)}
    stats = m.compute_stats(model, [batch], [batch]) if m.stats_inputs() is not None else {}
    model = m.prepare(model, stats)
    own = {p.data_ptr() for p in model.parameters()}
    held: dict[int, int] = {}

    def walk(x):
        if isinstance(x, torch.Tensor):
            if x.data_ptr() not in own:
                held[x.data_ptr()] = x.nbytes
        elif isinstance(x, torch.nn.Module):
            for t in [*x.parameters(), *x.buffers()]:
                walk(t)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(vars(m))
    weights = arch.params * 4
    assert sum(held.values()) / weights == pytest.approx(type(m).costs.weight_copies, abs=0.05)


def test_every_method_declares_its_costs_in_its_own_file_and_every_optimizer_has_plan_facts():
    """Issue 33: a new method touches one file and one registry line. It must declare `costs`
    itself (not inherit SFT's or the base's silently), or take them from the shared shape that
    causes them (methods/shared.py: a frozen base copy, issue 50), a statistics pass exactly
    when it computes statistics, and nothing about it lives in the planner. Issue 38:
    optimizers likewise."""
    from cliffsweep.trainables.methods import METHODS, method_class
    from cliffsweep.trainables.methods.base import Method
    from cliffsweep.trainables.optimizers import OPTIMIZERS

    registered = {method_class(n) for n in METHODS}

    def owner(cls):  # the class whose `costs` the method has
        return next(c for c in cls.__mro__ if "costs" in vars(c))

    undeclared = sorted(n for n in METHODS if owner(method_class(n)) is Method
                        or owner(method_class(n)) in registered - {method_class(n)})
    assert not undeclared, f"methods that do not declare `costs = Costs(...)` in their own class: {undeclared}"
    import importlib

    from cliffsweep.trainables.optimizers.costs import OptimizerCosts

    for n, target in OPTIMIZERS.items():  # each optimizer declares its state in its own file
        assert isinstance(vars(importlib.import_module(target.split(":")[0])).get("costs"), OptimizerCosts), n
    with_stats = {n for n in METHODS if method_class(n).compute_stats is not Method.compute_stats}
    assert {n for n in METHODS if method_class(n).costs.stats_data is not None} == with_stats
    planner = Path(costs.__file__).parent
    for n in (*METHODS, *OPTIMIZERS):  # no method or optimizer named in the planner's code
        assert not [f.name for f in planner.glob("*.py") if f'"{n}"' in f.read_text()], n


def test_fsdp_shards_weights_grads_and_optimizer_but_not_the_kl_base():
    arch, prec = PUBLISHED["meta-llama/Llama-3.1-8B-Instruct"], costs.precision("float32", True)
    ddp = costs.train_memory(arch, "kl", {}, "adamw", prec, "ddp", 4, 1, 1024, True).parts
    fsdp = costs.train_memory(arch, "kl", {}, "adamw", prec, "fsdp", 4, 1, 1024, True).parts
    for k in ("weights", "grads", "optimizer"):
        assert fsdp[k] == pytest.approx(ddp[k] / 4)
    assert fsdp["method"] == ddp["method"] == arch.params * 4
    assert ddp["weights"] + ddp["grads"] + ddp["optimizer"] == 16 * arch.params  # mixed precision AdamW


# --- token lengths ------------------------------------------------------------------------------
def test_lengths_quantiles_mean_and_padded_width():
    lengths = Lengths.of(list(range(1, 1001)), "1..1000")
    assert lengths.quantiles[0] == 1 and lengths.quantiles[-1] == 1000
    assert lengths.mean(10_000) == pytest.approx(500.5, rel=0.01)
    assert lengths.mean(100) == pytest.approx(95, rel=0.02)  # truncation
    assert lengths.expected_max(1, 10_000) == pytest.approx(lengths.mean(10_000))
    widths = [lengths.expected_max(k, 10_000) for k in (1, 2, 8, 64)]
    assert widths == sorted(widths) and widths[2] == pytest.approx(1000 * 8 / 9, rel=0.02)


def test_packaged_proxy_follows_n_train_and_split():
    from cliffsweep.planner.tokenstats import packaged

    assert packaged("chem_l3", {}).n == PACKAGED["chem_l3"].n
    assert packaged("chem_l3", {"n_train": 100}).n == 100
    assert packaged("chem_l3", {"test_fraction": 0.6}).n == round(PACKAGED["chem_l3"].n * 0.5)
    from cliffsweep.planner.tokenstats import UnknownLengths

    with pytest.raises(UnknownLengths, match="local `path:`"):
        packaged("toy_facts", {})


# --- the whole plan -----------------------------------------------------------------------------
def test_plan_of_the_toy_sweep_adds_up():
    from cliffsweep.sweep.grid import expand_grid
    from cliffsweep.orchestrator.specfile import load_spec

    spec = load_spec(ROOT / "cliffsweep/configs/toy.yaml")
    plans = plan.plan_spec(spec)
    assert [p.name for p in plans] == [m.name for m in spec.models]
    assert sum(p.trials for p in plans) == len(expand_grid(spec))
    n_eval = 200 + 400  # toy_facts + toy_arith, see toy.yaml
    points = spec.eval.points_per_trial
    for p in plans:
        assert p.generations == (p.trials * points + 1) * n_eval
        assert any("exact lengths" in n for n in p.notes)
        assert set(p.memory) == {"sft", "lora(rank=16)"}
        assert p.memory["lora(rank=16)"].total < p.memory["sft"].total


def test_kept_checkpoint_bytes_follow_keep_checkpoints():
    """`final` (the default) keeps one export per done trial, what ledger.prunable leaves;
    `all` keeps every export plus the two latest training states, like a running trial."""
    from cliffsweep.orchestrator.specfile import load_spec

    spec = load_spec(ROOT / "cliffsweep/configs/toy.yaml")
    assert spec.keep_checkpoints == "final"
    final = plan.plan_spec(spec)
    every = plan.plan_spec(spec.model_copy(update={"keep_checkpoints": "all"}))
    for f, a in zip(final, every):
        assert f.ckpt_written == a.ckpt_written
        assert f.ckpt_kept < a.ckpt_kept <= a.ckpt_written
        assert 0 < f.ckpt_running <= a.ckpt_written
    ck = costs.CheckpointBytes(export=10.0, train_state=30.0)
    assert (ck.kept(4, "final"), ck.kept(4, "all"), ck.running(4), ck.written(4)) == (10, 100, 100, 160)
    assert ck.kept(1, "all") == ck.running(1) == 40


def test_cli_plan_prints_the_budget_of_the_paper_grid():
    files = sorted(str(p) for p in (ROOT / "cliffsweep/configs").glob("paper*.yaml"))
    r = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "plan", *files], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    for word in ("H100-SXM h", "ckpt written", "Peak memory per training GPU", "Assumptions", "total",
                 "Peak memory of the once-per-model statistics"):
        assert word in r.stdout
    if len(files) > 1:
        assert "== all files" in r.stdout


# --- the paper grid's precision, and the GPU benchmark's CPU smoke runs ---------------------------
def test_paper_grid_trains_in_fp32_because_bf16_swallows_small_lr_updates():
    from cliffsweep.orchestrator.specfile import load_spec

    for path in (ROOT / "cliffsweep/configs").glob("paper*.yaml"):
        assert {m.dtype for m in load_spec(path).models} == {"float32"}, path.name
    torch.manual_seed(0)
    changed = {}
    for dtype in (torch.bfloat16, torch.float32):
        w = torch.nn.Parameter((torch.randn(512, 512) * 0.02).to(dtype))  # weights of typical scale
        w0 = w.detach().clone()
        w.grad = torch.randn_like(w)
        torch.optim.AdamW([w], lr=1e-5, weight_decay=0.01).step()
        changed[dtype] = float((w.detach() != w0).float().mean())
    assert changed[torch.float32] == 1.0 and changed[torch.bfloat16] < 0.3  # measured 0.155 (4096 x 1024)


def run_bench(*args: str, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/bench_gpu.py", "--tiny", "--steps", "2", "--micro", "2",
                           "--seq", "64", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_gpu_bench_trains_a_tiny_config_on_cpu(tmp_path):
    import json

    r = run_bench("--recipes", "autocast", "--json", str(tmp_path / "b.json"), timeout=300)
    assert r.returncode == 0, r.stderr
    (row,) = json.loads((tmp_path / "b.json").read_text())["rows"]
    assert row["train_tokens_per_s"] > 0 and row["mfu"] is None and row["plan_memory_gb"] > 0
    assert row["compute"] == "fp32 none"  # autocast is never on a CPU


@pytest.mark.slow
@pytest.mark.vllm
def test_gpu_bench_generates_with_vllm_on_cpu(tmp_path):
    import json

    r = run_bench("--recipes", "autocast", "--vllm", "--prompts", "4", "--prompt-len", "16", "--gen-tokens", "8",
                  "--json", str(tmp_path / "b.json"), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    row = json.loads((tmp_path / "b.json").read_text())["rows"][-1]
    assert row["gen_tokens"] == 4 * 8 and row["gen_tokens_per_s"] > 0


@pytest.mark.slow
def test_packaged_token_lengths_reproduce_from_the_real_data(smollm2_folder, real_data):
    """PACKAGED is what `python -m cliffsweep.planner.tokenstats "$(python tests/realdata.py)"` measures."""
    from transformers import AutoTokenizer

    from cliffsweep.planner.tokenstats import measure

    tok = AutoTokenizer.from_pretrained(smollm2_folder)
    for name, sub in (("chem_l3", "sciknoweval-chem-l3"), ("gsm8k", "gsm8k")):
        got = measure(tok, name, {"path": str(real_data / sub)})
        assert (got.n, got.quantiles) == (PACKAGED[name].n, PACKAGED[name].quantiles), name


def test_statistics_are_planned_within_the_training_step_memory():
    """Issue 15: the statistics task runs in the recipe's micro-batches (with its checkpointing and
    precision), so its planned peak stays under the same series' training peak, for every
    statistics method on every paper model, with and without checkpointing."""
    from cliffsweep.planner.archs import arch_for
    from cliffsweep.orchestrator.specfile import load_spec

    spec = load_spec(ROOT / "cliffsweep/configs/paper.yaml")
    for m in spec.models:
        arch = arch_for(m.path)
        for on_gpu in (True, False):
            prec = costs.precision("float32", on_gpu)
            for ckpt in (False, True):
                for method, params in (("ewc", {}), ("mas", {}), ("sib", {}), ("flow", {}), ("rpsft", {"k": 768})):
                    stats = costs.stats_memory(arch, method, params, prec, 8, 1024, ckpt).total
                    train = costs.train_memory(arch, method, params, "adamw", prec, "ddp", 2, 8, 1024, ckpt).total
                    assert stats <= train, (m.name, method, on_gpu, ckpt, stats / 2**30, train / 2**30)


@pytest.fixture
def built_in_rows_only(tmp_path, monkeypatch):
    """No filed GPU check (cliffsweep/measured/): the mechanism's tests price from the built-in rows."""


    monkeypatch.setattr(mfu, "MEASURED_DIR", tmp_path / "none-filed")


def test_plan_takes_the_mfu_measured_nearest_each_models_size_on_its_path(tmp_path, built_in_rows_only):
    """Issue 15: GPU-hours from measured MFU per size and precision path, not a flat 35 %."""


    assert mfu.measured_mfu(0.5e9, "float32")[0] == 0.124  # Qwen2.5-0.5B's own row
    got, source = mfu.measured_mfu(3e9, "float32")  # nearest measured: 1.5B
    assert got == 0.204 and "nearest size" in source
    assert mfu.measured_mfu(8e9, "bfloat16")[0] == 0.422 and mfu.measured_mfu(1e9, "bfloat16")[0] == 0.422
    from cliffsweep.planner.text import plan_text

    text = plan_text(loaded("cliffsweep/configs/paper.yaml"))
    assert "qwen2.5-0.5b 12.4% (measured: Qwen2.5-0.5B" in text and "qwen2.5-1.5b 20.4%" in text
    # the hours follow each model's MFU: a flat --mfu gives 0.124 / 0.35 of the 0.5B model's hours
    def hours(t: str, model: str) -> float:
        row = next(line for line in t.splitlines() if line.startswith(model + " "))
        return float(row.split()[6].replace(",", ""))  # A100-80GB h (the largest figures: least rounding)

    flat = plan_text(loaded("cliffsweep/configs/paper.yaml"), mfu=0.35)
    assert "--mfu" in flat
    assert hours(text, "qwen2.5-0.5b") == pytest.approx(hours(flat, "qwen2.5-0.5b") * 0.35 / 0.124, rel=0.05)


def test_a_gpu_checks_rows_price_the_plan_without_code_changes(tmp_path, built_in_rows_only):
    """Issue 23 part 4: `plan --measured gpu_check.json` (bench/gpu_check.sh's output) takes the
    fast path's measured MFU for fp32 models (recipe.precision auto = fsdp_bf16), preferring the
    recipe's kernels; without it the autocast rows stand in, and the plan says so."""
    import json


    from cliffsweep.planner.text import plan_text

    got, source = mfu.measured_mfu(1.54e9, "float32")
    assert got == 0.204 and "autocast path; fsdp_bf16 not measured yet" in source
    row = {"model": "Qwen/Qwen2.5-1.5B-Instruct", "params": 1.54e9, "gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-01",
           "micro": 8, "seq": 1024, "grad_ckpt": False, "recipe": "fsdp_bf16+liger", "path": "fsdp_bf16",
           "kernels": "liger", "compile": False, "mfu": 0.45}
    rows = [row, {**row, "recipe": "fsdp_bf16", "kernels": "none", "mfu": 0.33},
            {**row, "recipe": "autocast", "path": "autocast", "kernels": "none", "mfu": None, "error": "exit 1"}]
    f = tmp_path / "gpu_check.json"
    f.write_text(json.dumps({"gpu": row["gpu"], "train_small": {"rows": rows}, "fused": {}}))
    measured = mfu.measured_rows((str(f),))
    assert len(measured) == len(mfu.MEASURED_MFU) + 2  # the failed row prices nothing
    assert mfu.measured_mfu(1.54e9, "float32", rows=measured) == (0.45, "measured: Qwen2.5-1.5B fsdp_bf16+liger, "
                                                                   "NVIDIA H100 80GB HBM3, 2026-12-01, micro 8")
    assert mfu.measured_mfu(1.54e9, "float32", kernels="none", rows=measured)[0] == 0.33
    assert mfu.measured_mfu(1.54e9, "float32", precision="autocast", rows=measured)[0] == 0.204
    before = plan_text(loaded("cliffsweep/configs/paper.yaml"))
    after = plan_text(loaded("cliffsweep/configs/paper.yaml"), measured=(str(f),))
    assert "qwen2.5-1.5b 45.0% (measured: Qwen2.5-1.5B fsdp_bf16+liger" in after

    def h100(t: str) -> float:
        return float(next(line for line in t.splitlines() if line.startswith("qwen2.5-1.5b ")).split()[7])
    assert h100(after) == pytest.approx(h100(before) * 0.204 / 0.45, rel=0.03)


def test_the_filed_h200_check_prices_the_fast_path():
    """The first GPU check that ran (docs/gpu.md, H200, 2026-11-26), filed in cliffsweep/measured/:
    fp32 models on the default recipe are priced from its fsdp_bf16+liger rows, not the autocast
    stand-in."""


    got, source = mfu.measured_mfu(1.54e9, "float32")
    assert 0.2 < got < 0.3 and source.startswith("measured: Qwen2.5-1.5B fsdp_bf16+liger, NVIDIA H200")
    assert "Llama-3.2-3B fsdp_bf16+liger" in mfu.measured_mfu(3.2e9, "float32")[1]


def test_each_optimizers_state_is_what_its_file_declares():
    """AdamW keeps two moments per weight, RMS-aligned SGD one momentum, Muon one momentum on the
    hidden matrices and AdamW's two elsewhere; LoRA's adapters are all matrices (issue 38)."""
    from cliffsweep.planner.archs import arch_for
    from cliffsweep.trainables.optimizers import optimizer_costs

    arch = arch_for("Qwen/Qwen2.5-0.5B-Instruct")
    hidden = arch.layers * sum(a * b for a, b in arch.layer_linears().values())
    n = arch.params
    assert costs.optimizer_state_elements(arch, "adamw", n, lora=False) == 2 * n
    assert costs.optimizer_state_elements(arch, "sgd", n, lora=False) == n
    assert costs.optimizer_state_elements(arch, "muon", n, lora=False) == hidden + 2 * (n - hidden)
    assert costs.optimizer_state_elements(arch, "muon", 1000, lora=True) == 1000
    assert optimizer_costs("muon").hidden_matrix_states == 1
