"""Policies: MLP torsos, or memory torsos (LSTM / GRU / minGRU / FFM / TrXL, or a registered
memory: ``rltool/memories.py``), with actor, critic and Q heads."""

from rltool.modules.factory import make_policy
from rltool.modules.ffm import FFMModule
from rltool.modules.memory import Memory, recurrent_mode
from rltool.modules.mingru import MinGRUModule
from rltool.modules.policy import ActorCritic
from rltool.modules.recurrent import GRUModule, LSTMModule
from rltool.modules.trxl import TrXLModule

__all__ = [
    "ActorCritic",
    "FFMModule",
    "GRUModule",
    "LSTMModule",
    "Memory",
    "MinGRUModule",
    "TrXLModule",
    "make_policy",
    "recurrent_mode",
]
