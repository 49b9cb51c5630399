"""Collectors: env + policy -> rollouts of batch [T, B]."""

from rltool.collectors.collector import Collector

__all__ = ["Collector"]
