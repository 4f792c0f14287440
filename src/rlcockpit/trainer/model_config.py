"""The models' configuration: which weights, where they live, in which precision, how they fit.

Stdlib only (like trainer/config.py, which composes it into ``TrainConfig``). The device and
precision keys are read by ``devices.py``, the memory keys by ``memory.py``, ``model.lora`` by
``adapters.py``; docs/trainer.md ("Real models on a GPU") says what each option saves.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, check, option

DTYPE_NAMES = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class LoRAConfig(Config):
    """Low-rank adapters (peft) on the actor and the critic's backbone; r = 0 trains every weight."""

    r: int = option(0, help="LoRA rank; 0 = off (full fine-tuning). With LoRA the frozen base weights are "
                    "stored in model.dtype, only the adapters (and the critic's value head) train, and the "
                    "reference is the actor with its adapters disabled (no second copy of the model).",
                    range=(0, 4096))
    alpha: float = option(16.0, help="LoRA scaling numerator: the update is (alpha / r) * B A.", range=(0.0, 1e6))
    dropout: float = option(0.0, help="Dropout on the adapters' input, active only in UPDATE's forward + "
                            "backward (the rollout and scoring passes stay deterministic, so PPO's old "
                            "logprobs are exact; above 0 the first epoch's ratio is no longer exactly 1).",
                            range=(0.0, 0.9))
    target_modules: tuple[str, ...] = option(default_factory=tuple, help='Module names the adapters wrap '
                                             '(e.g. [q_proj, v_proj]); empty = every linear layer except the '
                                             'LM head (peft\'s "all-linear").')


@dataclass(frozen=True)
class ModelConfig(Config):
    """The policy (actor), the frozen reference and the critic: weights, device, precision, memory."""

    path: str = option("tiny", help='Policy weights: "tiny" = the shipped tiny-world SFT checkpoint, '
                       "or a local Hugging Face causal-LM directory (config.json + weights + tokenizer). "
                       "The reference model is a frozen copy of it.")
    critic_path: str = option("", help="Backbone for the critic (a causal-LM directory whose hidden states feed "
                              'the value head); "" = the same as model.path.')
    value_head_init_std: float = option(0.01, help="Std of the normal init of the critic's value head "
                                        "(seed 000 §3.2: 0.01 keeps the early critic stable).", range=(0.0, 1.0))
    normalize_values: bool = option(False, help="Critic output normalisation (seed 000 §3.2/§4.2): the critic "
                                    "predicts returns normalised by running statistics; predictions are "
                                    "denormalised before GAE.")
    threads: int = option(0, help="torch.set_num_threads for training; 0 = torch's default (all cores). On a "
                          "busy shared machine 1 is often fastest for the tiny model.", range=(0, 256))
    device: str = option("auto", help='Where actor and critic live: "auto" = cuda when available (data '
                         'parallel: cuda:LOCAL_RANK), else cpu; or "cpu", "cuda", "cuda:N".')
    ref_device: str = option("", help='Where the frozen reference lives: "" = model.device; "cpu" keeps it '
                             "off the GPU (its forward in SCORE then runs on the CPU). Ignored with LoRA "
                             "(the reference is the actor itself).")
    dtype: str = option("fp32", help="Compute precision. bf16 / fp16: forwards run under torch.autocast, "
                        "weights that train stay fp32 (master weights, AdamW states), frozen weights (the "
                        "reference, LoRA's base) are stored in this dtype; fp16 adds a dynamic loss scaler "
                        "(torch.amp.GradScaler). Losses, logprobs and KL are always computed in fp32.",
                        choices=DTYPE_NAMES)
    gradient_checkpointing: bool = option(False, help="Recompute each transformer block's activations in the "
                                          "backward pass instead of keeping them (actor and critic): less "
                                          "memory in UPDATE for about one more forward pass.")
    micro_batch_size: int = option(0, help="Samples per forward (+ backward) inside a minibatch; gradients "
                                   "accumulate to the same token-mean loss. 0 = on CUDA from the free memory "
                                   "at each UPDATE / SCORE, on the CPU the whole minibatch. An out-of-memory "
                                   "error halves it and retries (an oom_retry event); the halved size stays.",
                                   range=(0, 65536))
    lora: LoRAConfig = option(default_factory=LoRAConfig, help="Low-rank adapters instead of full fine-tuning.")

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("device", "ref_device"):
            value = getattr(self, key)
            ok = value in ("auto", "cpu", "cuda") or (value == "" and key == "ref_device") or \
                (value.startswith("cuda:") and value[5:].isdigit())
            check(ok, f"model.{key}", value, 'must be "auto", "cpu", "cuda" or "cuda:N"'
                  + (' ("" = model.device)' if key == "ref_device" else ""))
