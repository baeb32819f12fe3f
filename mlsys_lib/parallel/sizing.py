"""3-D parallelism sizing (Narayanan et al., 2021): n GPUs as p pipeline × t tensor × d data ranks.

For a GPT-style transformer (L layers, hidden size h, a heads, sequence length s) trained with a
global batch of B sequences in microbatches of b, with 1F1B:

* microbatches per pipeline m = B / (d·b); bubble (p − 1)/m of the ideal time, (p − 1)/(m + p − 1) of the step;
* bytes each GPU sends per step, e bytes per element (ring collectives send 2(k − 1)/k of the data):
  - tensor parallel: 4 all-reduces per layer per microbatch (2 forward, 2 backward) of b·s·h elements,
    on L/p layers: (L/p)·m·4·2(t − 1)/t·b·s·h·e;
  - pipeline: each microbatch's activations to the next stage and their gradient back, b·s·h elements
    split over the t tensor ranks; a middle stage sends both: 2·m·b·s·h·e/t (one direction if p = 2);
  - data parallel: one all-reduce of the GPU's gradients per step: 2(d − 1)/d·(Ψ/(p·t))·e;
* memory per GPU from ``mlsys_lib.memory.training_memory`` for Ψ/(p·t) parameters, and the
  activations of the first stage, which holds min(p, m) microbatches under 1F1B, each of L/p layers
  of ``transformer_layer_activation_bytes`` split t ways (sequence parallelism in the TP regions).

Ψ = 12·L·h²: the layers' weight matrices (embeddings and biases left out). The lecture's takeaways:
tensor parallelism within a node (t ≤ GPUs per node: its all-reduces are per layer and microbatch),
pipeline parallelism across nodes, p·t as small as the GPU memory allows, data parallelism for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlsys_lib.memory import TrainingMemory, training_memory, transformer_layer_activation_bytes


@dataclass(frozen=True)
class Transformer:
    """A GPT-style model: ``num_layers`` L, ``hidden`` h, ``heads`` a, ``seq_len`` s (tokens per sequence)."""

    num_layers: int
    hidden: int
    heads: int
    seq_len: int

    @property
    def num_params(self) -> int:
        """Ψ = 12·L·h²: per layer 4h² of attention (Q, K, V, output) and 8h² of MLP (h × 4h twice)."""
        return 12 * self.num_layers * self.hidden ** 2


@dataclass(frozen=True)
class Sizing:
    """One (p, t, d) configuration: microbatches, bubble, bytes sent per GPU per step, memory per GPU."""

    p: int
    t: int
    d: int
    num_microbatches: int
    bubble_ratio: float
    bubble_fraction: float
    tp_bytes: float
    pp_bytes: float
    dp_bytes: float
    memory: TrainingMemory


def _positive_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value


def sizing(model: Transformer, n: int, p: int, t: int, d: int, global_batch: int, microbatch: int, *,
           bytes_per_element: int = 2, optimizer: str = "adam", precision: str = "mixed",
           zero_stage: int = 0) -> Sizing:
    """The numbers of the module docstring for ``model`` on n = p·t·d GPUs (ValueError if they do not fit)."""
    for name, value in (("n", n), ("p", p), ("t", t), ("d", d), ("global_batch", global_batch),
                        ("microbatch", microbatch)):
        _positive_int(name, value)
    if p * t * d != n:
        raise ValueError(f"p·t·d must equal the number of GPUs: {p}·{t}·{d} = {p * t * d}, not n = {n}")
    if global_batch % (d * microbatch):
        raise ValueError(f"the global batch B = {global_batch} must be divisible by d·b = {d}·{microbatch} "
                         f"= {d * microbatch} (whole microbatches per pipeline)")
    if model.num_layers % p:
        raise ValueError(f"{model.num_layers} layers cannot be split evenly into p = {p} pipeline stages")
    if model.heads % t or model.hidden % t:
        raise ValueError(f"t = {t} must divide the heads ({model.heads}) and the hidden size ({model.hidden})")
    m = global_batch // (d * microbatch)
    layers = model.num_layers // p
    activation = microbatch * model.seq_len * model.hidden * bytes_per_element  # b·s·h elements, bytes
    params = model.num_params / (p * t)
    per_layer = transformer_layer_activation_bytes(model.seq_len, microbatch, model.hidden, model.heads,
                                                   bytes_per_element) / t
    return Sizing(
        p=p, t=t, d=d, num_microbatches=m,
        bubble_ratio=(p - 1) / m,
        bubble_fraction=(p - 1) / (m + p - 1),
        tp_bytes=layers * m * 4 * 2 * (t - 1) / t * activation,
        pp_bytes=min(p - 1, 2) * m * activation / t,
        dp_bytes=2 * (d - 1) / d * params * bytes_per_element,
        memory=training_memory(params, optimizer=optimizer, precision=precision, zero_stage=zero_stage,
                               dp_degree=d, activation_bytes=layers * min(p, m) * per_layer),
    )


def configurations(n: int) -> list[tuple[int, int, int]]:
    """Every (p, t, d) of positive ints with p·t·d = n, in increasing p, then t."""
    _positive_int("n", n)
    return [(p, t, n // (p * t)) for p in range(1, n + 1) if n % p == 0
            for t in range(1, n // p + 1) if (n // p) % t == 0]
