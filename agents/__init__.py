"""PureJaxRL-style PPO with traced hyperparameters and any hcjax tuner in the loop."""
from agents.ppo import Learner, LearnerState, PPOConfig, make_learner, make_train

__all__ = ["Learner", "LearnerState", "PPOConfig", "make_learner", "make_train"]
