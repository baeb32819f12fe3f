"""How many bytes training takes per GPU: parameters, gradients, optimizer states, activations; ZeRO.

Per parameter (Ψ parameters in all), by precision:

* ``"fp32"``: weights 4 B, gradients 4 B; optimizer states: SGD 0, momentum 4 B, Adam 8 B (m and v);
* ``"mixed"`` (Micikevicius et al. 2018): FP16 weights 2 B and gradients 2 B; the optimizer keeps an
  FP32 **master** copy of the weights (4 B) besides its own states, so K = 4 (SGD), 8 (momentum) or
  12 (Adam) bytes of optimizer state. Adam in mixed precision: 2 + 2 + 12 = **16 bytes per parameter**,
  the "16N rule": 175B parameters (GPT-3) take 2.8 TB before a single activation.

ZeRO (Rajbhandari et al. 2020) splits over the N_d data-parallel GPUs what plain data parallelism
replicates: stage 1 (P_os) the optimizer states, stage 2 (P_os+g) also the gradients, stage 3
(P_os+g+p) also the parameters. With Ψ = 7.5B, K = 12, N_d = 64 that is 120, 31.4, 16.6 and 1.9 GB
per GPU (GB = 1e9 bytes). Activations are not split by ZeRO.
"""

from __future__ import annotations

from dataclasses import dataclass

OPTIMIZER_STATE_BYTES = {"sgd": 0, "momentum": 4, "adam": 8}  # FP32 states per parameter, master copy excluded
WEIGHT_BYTES = {"fp32": 4, "mixed": 2}  # bytes of a weight (and of a gradient) per parameter
MASTER_BYTES = {"fp32": 0, "mixed": 4}  # the FP32 master copy, counted with the optimizer states
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class TrainingMemory:
    """Bytes per GPU of each part of the training state."""

    parameters: float
    gradients: float
    optimizer_states: float
    activations: float

    @property
    def total(self) -> float:
        return self.parameters + self.gradients + self.optimizer_states + self.activations


def training_memory(num_params: float, *, optimizer: str = "adam", precision: str = "mixed",
                    zero_stage: int = 0, dp_degree: int = 1, activation_bytes: float = 0.0) -> TrainingMemory:
    """Bytes per GPU to train a model of ``num_params`` parameters.

    optimizer: "sgd", "momentum" or "adam"; precision: "fp32" or "mixed" (FP16 weights and gradients,
    FP32 master weights counted in ``optimizer_states``); zero_stage: 0 (plain data parallelism) to 3;
    dp_degree: N_d, the number of data-parallel GPUs the ZeRO stages split over;
    activation_bytes: the activations one GPU holds (e.g. from :func:`transformer_layer_activation_bytes`).
    """
    if optimizer not in OPTIMIZER_STATE_BYTES:
        raise ValueError(f"unknown optimizer {optimizer!r}, expected one of {sorted(OPTIMIZER_STATE_BYTES)}")
    if precision not in WEIGHT_BYTES:
        raise ValueError(f"unknown precision {precision!r}, expected one of {sorted(WEIGHT_BYTES)}")
    if isinstance(zero_stage, bool) or zero_stage not in ZERO_STAGES:
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    if isinstance(dp_degree, bool) or not isinstance(dp_degree, int) or dp_degree < 1:
        raise ValueError(f"dp_degree (N_d) must be an integer >= 1, got {dp_degree!r}")
    if num_params < 0 or activation_bytes < 0:
        raise ValueError(f"num_params and activation_bytes must be >= 0, got {num_params}, {activation_bytes}")
    per_param = WEIGHT_BYTES[precision] * num_params
    states = (OPTIMIZER_STATE_BYTES[optimizer] + MASTER_BYTES[precision]) * num_params
    return TrainingMemory(
        parameters=per_param / dp_degree if zero_stage >= 3 else per_param,
        gradients=per_param / dp_degree if zero_stage >= 2 else per_param,
        optimizer_states=states / dp_degree if zero_stage >= 1 else states,
        activations=float(activation_bytes),
    )


def transformer_layer_activation_bytes(seq_len: int, batch: int, hidden: int, heads: int,
                                       bytes_per_element: int = 2, dropout: bool = True) -> float:
    """Activation bytes one transformer layer keeps for its backward pass (no recomputation).

    Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (2022), §4.1:
    in 16-bit with 1-byte dropout masks a layer stores ``s b h (34 + 5 a s / h)`` = 34 sbh + 5 a s² b bytes
    (s: sequence length, b: batch, h: hidden size, a: heads). Split into tensors of ``bytes_per_element``
    and 1-byte dropout masks:

    * attention: inputs of the QKV projection (sbh), Q and K (2 sbh), softmax output (a s² b), its dropout
      output (a s² b) and mask (a s² b bytes), V (sbh), input of the output projection (sbh), dropout mask (sbh bytes);
    * MLP: input of the first linear (sbh), GELU input (4 sbh), input of the second linear (4 sbh), mask (sbh bytes);
    * two LayerNorm inputs (2 sbh).

    Elements: 16 sbh + 2 a s² b; mask bytes: 2 sbh + a s² b. Without dropout (``dropout=False``) the
    masks and the dropout output go: 16 sbh + a s² b elements.
    """
    for name, value in (("seq_len", seq_len), ("batch", batch), ("hidden", hidden), ("heads", heads),
                        ("bytes_per_element", bytes_per_element)):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    sbh, as2b = seq_len * batch * hidden, heads * seq_len ** 2 * batch
    if not dropout:
        return float(bytes_per_element * (16 * sbh + as2b))
    return float(bytes_per_element * (16 * sbh + 2 * as2b) + 2 * sbh + as2b)
