"""rltool: a Hydra-driven RL training toolkit for memory (recurrent) policies."""

__version__ = "0.1.0"
