#!/usr/bin/python3
"""What tools/make_megatron_golden.py pickles beside the models: Megatron's ModelType enums registered under the
module names its checkpoints pickle them with (importing this module registers them), and the optimizer, scheduler
and RNG state save_checkpoint stores (training_state); and dir_bytes. Moved out of tools/make_megatron_golden.py
unchanged (it imports them from here; they read none of its module globals).
"""
import collections
import enum
import os
import random
import sys
import types

import numpy as np
import torch


# ----------------------------------------------------------------------------
# Megatron's enums, under the module names its checkpoints pickle them with (no Megatron install
# needed): megatron/model/enums.py (285068c) and megatron/core/enums.py (core_r0.6.0).

def fake_module(name, **members):
    """Registers `name` (and its parents) in this process only, so pickle can name classes defined here."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    for k, v in members.items():
        v.__module__ = name
        v.__qualname__ = k
        setattr(sys.modules[name], k, v)


def model_type_enum():
    class ModelType(enum.Enum):
        encoder_or_decoder = 1
        encoder_and_decoder = 2
    return ModelType


LegacyModelType = model_type_enum()
CoreModelType = model_type_enum()
fake_module("megatron.model.enums", ModelType=LegacyModelType)
fake_module("megatron.core.enums", ModelType=CoreModelType)



def training_state(tp_rank, pp_rank, ep_rank, save_rng):
    """What save_checkpoint stores beside the model (small here): the optimizer's state_dict and the
    scheduler's, and get_rng_state's list (Python's random, numpy's and torch's generator states) unless
    the run had --no-save-rng (most cases here: it is 11 KB a file)."""
    seed = 100 * tp_rank + 10 * pp_rank + ep_rank
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    state = collections.OrderedDict([
        ("optimizer", {"optimizer": {"state": {0: {"step": torch.tensor(1000.0),
                                                   "exp_avg": torch.randn(4, generator=gen),
                                                   "exp_avg_sq": torch.rand(4, generator=gen)}},
                                     "param_groups": [{"lr": 1.5e-4, "betas": (0.9, 0.95), "eps": 1e-8,
                                                       "weight_decay": 0.01, "params": [0]}]},
                       "fp32_from_fp16_params": [], "grad_scaler": {"scale": 65536.0}}),
        ("opt_param_scheduler", {"max_lr": 1.5e-4, "min_lr": 1e-5, "num_steps": 8000, "warmup_steps": 10,
                                 "decay_style": "cosine"}),
    ])
    if save_rng:
        state["rng_state"] = [{"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(),
                               "torch_rng_state": torch.get_rng_state(), "rng_tracker_states": {}}]
    return state


def dir_bytes(root):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
