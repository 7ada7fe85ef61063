"""PureJaxRL-style PPO with traced hyperparameters and any hcjax tuner in the loop."""
from hcjax.extras import require

require("the agents package (PPO)", "flax", "optax", "chex")  # else an ImportError naming hcjax[agents]

from agents.ppo import Learner  # noqa: E402  (after the check of its extra), LearnerState, PPOConfig, make_learner, make_train

__all__ = ["Learner", "LearnerState", "PPOConfig", "make_learner", "make_train"]
