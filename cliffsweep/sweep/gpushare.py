"""One GPU, honestly shared (issue 39): each process's GPU memory is a budget.

A Ray GPU fraction (`resources.gpus_per_worker: 0.3`, `eval.gpus_per_evaluator: 0.2`) is a
scheduling label, not a memory limit: PyTorch's caching allocator keeps what a peak took, so on
the first real-model sweep of an H100 (2 trainers x 0.3 + 2 evaluators x 0.2) one process's peak
starved its neighbours and 7 evaluations and training attempts died of CUDA out-of-memory. So
every process that holds a fraction of a GPU caps its own memory to that fraction (or to the
spec's explicit `gpu_memory_gb`): the trainers with `torch.cuda.set_per_process_memory_fraction`
(trainables/parallel.py), an hf evaluator the same way, a vLLM evaluator through
`gpu_memory_utilization`, which vLLM also sizes its KV cache from. A process that reaches its cap
fails alone, with a sentence naming its share and the settings that change it.

Pure functions and one record, no torch: the driver derives the shares from the spec, the
workers apply them, `plan` and `validate` add them up per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass


SCORE_TOKEN_BUDGET = 16_384
"""hf scoring: tokens (rows x padded width) per forward pass (evals/backends/hf_backend.py); the
planner prices an hf evaluator's peak from it (planner/packing.py)."""
LOGIT_CHUNK = 1_024
"""hf scoring: continuation positions per LM-head pass: 1,024 x 152k vocabulary in fp32 is 0.6 GB."""


class GpuShareExceeded(RuntimeError):
    """A process reached its own GPU memory cap; the message is one sentence: its share and
    the settings that change it (GpuShare.out_of_memory)."""


@dataclass(frozen=True)
class GpuShare:
    """What one process may hold of its GPU: `gpus` (its Ray fraction) or, when given,
    `memory_gb`; `role` and `settings` name it in the out-of-memory sentence."""

    gpus: float
    memory_gb: float | None
    role: str
    settings: str

    def fraction(self, total_gb: float) -> float | None:
        """The share of a device of `total_gb` this process may use; None: no cap (a whole GPU or
        more, no explicit memory, or no GPU at all)."""
        if self.memory_gb is not None:
            return min(1.0, self.memory_gb / total_gb)
        if self.gpus <= 0 or self.gpus >= 1:
            return None
        return self.gpus

    def out_of_memory(self, total_gb: float, detail: str = "") -> str:
        """The one sentence a process that reached its cap fails with."""
        frac = self.fraction(total_gb)
        cap = f"{frac:.2g} of {total_gb:.0f} GiB = {frac * total_gb:.1f} GiB" if frac else f"{total_gb:.0f} GiB"
        return (f"CUDA out of memory in a {self.role} within its share of the GPU ({cap}){': ' + detail if detail else ''}; "
                f"give it more ({self.settings}) or fewer processes per GPU")


def trainer_share(resources) -> GpuShare:
    """A Train worker's share (resources: the spec's ResourcesSpec)."""
    return GpuShare(resources.gpus_per_worker, resources.gpu_memory_gb, "Train worker",
                    "resources.gpus_per_worker or resources.gpu_memory_gb; or recipe.micro_batch_size / "
                    "gradient_checkpointing to need less")


def evaluator_share(eval_spec) -> GpuShare:
    """An evaluator's share (eval_spec: the spec's EvalSpec)."""
    return GpuShare(eval_spec.gpus_per_evaluator, eval_spec.gpu_memory_gb, "evaluator",
                    "eval.gpus_per_evaluator or eval.gpu_memory_gb; or eval.max_model_len / kv_cache_mb")
