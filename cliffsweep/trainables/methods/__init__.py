"""Method registry: name -> Method class (one file per method, imported lazily)."""

from __future__ import annotations

from cliffsweep.registry import lookup

from cliffsweep.trainables.methods.base import Method, MethodParams

METHODS: dict[str, str] = {
    "sft": "cliffsweep.trainables.methods.sft:SFT",
    "lora": "cliffsweep.trainables.methods.lora:LoRA",
    "sib": "cliffsweep.trainables.methods.sib:SIB",
    "ewc": "cliffsweep.trainables.methods.ewc:EWC",
    "mas": "cliffsweep.trainables.methods.mas:MAS",
    "l2sp": "cliffsweep.trainables.methods.l2sp:L2SP",
    "rpsft": "cliffsweep.trainables.methods.rpsft:RPSFT",
    "wise_ft": "cliffsweep.trainables.methods.wise_ft:WiSEFT",
    "kl": "cliffsweep.trainables.methods.kl:KL",
    "replay": "cliffsweep.trainables.methods.replay:Replay",
    "migu": "cliffsweep.trainables.methods.migu:MIGU",
    "nanoadam": "cliffsweep.trainables.methods.nanoadam:NanoAdam",
    "talr": "cliffsweep.trainables.methods.talr:TALR",
    "flow": "cliffsweep.trainables.methods.flow:Flow",
    "dft": "cliffsweep.trainables.methods.dft:DFT",
    "iw": "cliffsweep.trainables.methods.iw:IW",
}


def method_class(name: str) -> type[Method]:
    return lookup(METHODS, name, "method")


def build_method(name: str, params: dict | None = None) -> Method:
    cls = method_class(name)
    return cls(cls.Params(**(params or {})))


__all__ = ["METHODS", "method_class", "build_method", "Method", "MethodParams"]
