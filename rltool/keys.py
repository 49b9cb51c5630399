"""Every TensorDict key of the data contract, named once (see docs/design.md).

Rollouts have batch dims [T, B] (time, env). Per element:
observation [*obs]; is_init [1] bool; action [*act]; sample_log_prob []; logits [n] or
loc / scale [*act]; state_value [1]; action_value [n]; recurrent states [num_layers, hidden];
("next", ...) holds what is true *after* the step.
"""

NEXT = "next"

OBSERVATION = "observation"
IS_INIT = "is_init"
ACTION = "action"
SAMPLE_LOG_PROB = "sample_log_prob"
LOGITS = "logits"
LOC = "loc"
SCALE = "scale"
STATE_VALUE = "state_value"
ACTION_VALUE = "action_value"
CHOSEN_ACTION_VALUE = "chosen_action_value"
REWARD = "reward"
TERMINATED = "terminated"
TRUNCATED = "truncated"
DONE = "done"
RECURRENT_STATE_H = "recurrent_state_h"
RECURRENT_STATE_C = "recurrent_state_c"
PREV_ACTION = "prev_action"
PREV_REWARD = "prev_reward"
# [n] bool (Discrete) / [sum(nvec)] bool (MultiDiscrete, per factor): True where the action is
# allowed; written by the env layer at the root and under "next" (env.action_mask)
ACTION_MASK = "action_mask"

# written by the returns / losses
ADVANTAGE = "advantage"
VALUE_TARGET = "value_target"
MASK = "mask"

# written by the replay buffer (DQN)
INDEX = "index"  # where a sampled window starts in the storage (for priority updates)
PRIORITY_WEIGHT = "priority_weight"  # importance weight of a prioritized sample

# episode statistics written by the env layer, under "next" on the last step of an episode
EPISODE_RETURN = "episode_return"
EPISODE_LENGTH = "episode_length"


def nxt(key):
    """The key of ``key`` under "next": ``nxt("reward") == ("next", "reward")``."""
    return (NEXT, *key) if isinstance(key, tuple) else (NEXT, key)
