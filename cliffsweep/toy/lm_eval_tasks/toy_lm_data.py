"""The data of toy_arith_lm.yaml: the `toy_arith` task's evaluation items (lm-eval calls this
with the task's metadata as keyword arguments)."""

from __future__ import annotations


def arith(**kwargs):
    import datasets

    from cliffsweep.toy.tasks import ToyArith

    n = int(kwargs.get("n_eval", 200))
    items = ToyArith(ToyArith.Params(n_eval=n)).eval_examples()
    return {"test": datasets.Dataset.from_list([{"question": e.prompt, "answer": e.reference} for e in items])}
