"""The training session around the loop: checkpoints, evaluation, compiled steps, hooks."""
