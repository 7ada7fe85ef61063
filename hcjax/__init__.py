"""hcjax: online hyperparameter tuners for reinforcement learning, in pure JAX.

    tuner = hcjax.make_tuner("hypercontroller", space, d=10, s=1)
    state = tuner.init(key)
    state, values = tuner.ask(state, key)
    state = tuner.tell(state, objective)
"""
from hcjax.space import Hyperparameter, Space, ppo_space, unit_space
from hcjax.tuner import Tuner, available, make_tuner, options

__all__ = ["Hyperparameter", "Space", "Tuner", "available", "make_tuner", "options", "ppo_space", "unit_space"]
__version__ = "0.1.0"
