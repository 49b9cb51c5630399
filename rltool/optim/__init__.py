"""Optimizer steps: flat Adam and the non-finite guard."""
