"""Training (step.py), under a memory budget (checkpoint.py), in mixed precision (precision.py)."""
from .step import compile, from_torch, SGD, Adam, AdamW, TrainStep, _kg
from .precision import LossScaler
