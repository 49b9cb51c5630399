"""Data-parallel ranks (torch.distributed) and their gradient sums."""
