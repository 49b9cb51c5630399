"""Policies: MLP / LSTM / GRU torsos with actor, critic and Q heads."""

from rltool.modules.factory import make_policy
from rltool.modules.policy import ActorCritic
from rltool.modules.recurrent import GRUModule, LSTMModule, recurrent_mode

__all__ = ["ActorCritic", "GRUModule", "LSTMModule", "make_policy", "recurrent_mode"]
