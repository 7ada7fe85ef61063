"""PPOConfig (static PPO configuration) and the checks of a tuner's space against it."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from agents import networks as nets

OBJECTIVES = ("reward_change", "reward", "return_change")
EVAL_POLICIES = ("greedy", "sampled")  # PPOConfig.eval_policy: the mean action / argmax, or a draw from the policy
OPTIMIZER_LAYOUTS = ("auto", "flat", "per_array")  # PPOConfig.optimizer_layout
METRIC_KEYS = ("train_reward", "objective", "hparams", "frames", "rejected", "episode_return")

# Allowed range (low, high or None, low excluded?) of every real-valued PPOConfig field.
REAL_FIELDS = {
    "learning_rate": (0.0, None, True), "clip_eps": (0.0, None, False), "gae_lambda": (0.0, 1.0, False),
    "gamma": (0.0, 1.0, False), "ent_coef": (0.0, None, False), "vf_coef": (0.0, None, False),
    "max_grad_norm": (0.0, None, False), "adam_eps": (0.0, None, True), "obs_clip": (0.0, None, True),
    "reward_scale": (0.0, None, True), "init_log_std": (-20.0, 5.0, False), "vf_clip_eps": (0.0, None, False),
}
OPTIONAL_REAL = ("vf_clip_eps",)  # REAL_FIELDS that may be None (the feature off)
# Fields a tuner may set during training (traced values); every other field is static.
TUNABLE = ("learning_rate", "clip_eps", "gae_lambda", "batch_size", "ent_coef", "vf_coef", "gamma",
           "max_grad_norm", "reward_scale", "adam_eps", "obs_clip", "vf_clip_eps", "normalize_advantage")
# TUNABLE switches: tuned only as a categorical of these options (0 off, 1 on)
SWITCHES = {"normalize_advantage": (0, 1)}
OPTIMIZER_HPARAMS = ("learning_rate", "max_grad_norm", "adam_eps")  # through optax.inject_hyperparams
INTEGER_FIELDS = ("num_iterations", "num_envs", "batch_size", "num_minibatches", "update_epochs", "tune_every",
                  "eval_steps", "eval_episodes")
DEFAULT_MINIBATCHES = 16  # PPOConfig.num_minibatches' default


def in_range(field: str, v) -> bool:
    """`v` lies in REAL_FIELDS[field]'s allowed range."""
    low, high, low_open = REAL_FIELDS[field]
    return (v > low if low_open else v >= low) and (high is None or v <= high)


def range_text(field: str) -> str:
    """The allowed range of `field` in words, e.g. '>= 0.0 and <= 1.0'."""
    low, high, low_open = REAL_FIELDS[field]
    return f"{'>' if low_open else '>='} {low}" + ("" if high is None else f" and <= {high}")


def _check_integer(field: str, v, low: int) -> None:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < low:
        raise ValueError(f"PPOConfig.{field} must be an integer >= {low}, got {v!r}")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Static PPO configuration, validated at construction (ValueError naming the field).

    The TUNABLE fields are used only when the tuner's space does not contain a
    hyperparameter of that name (otherwise the tuner sets them). max_batch_size: the rollout's
    fixed maximum (None: the space's batch_size upper bound, else batch_size); a batch
    size above it is clipped to it (metrics "frames" shows what was collected).
    reward_scale multiplies rewards for GAE and the value targets only (metrics and the
    objective use raw rewards). num_minibatches must not exceed the maximum batch.
    hidden_sizes may be given as a list. A budget in frames instead of iterations:
    `PPOConfig.from_timesteps(total_timesteps, **fields)`. An evaluation is the mean return of
    `eval_episodes` episodes of at most `eval_steps` steps, each from its own reset, acting with
    `eval_policy`: "greedy" (the mean action, or the argmax: deterministic) or "sampled" (actions
    drawn from the policy, as in training; where a greedy policy gets stuck, e.g. a sparse reward
    that one deterministic episode never reaches, a sampled one still measures something).

    ARLBench's PPO options. vf_clip_eps: None, the plain value loss 0.5 (V - target)^2; a number
    >= 0, the clipped one 0.5 max((V - target)^2, (V_clip - target)^2) with V_clip = V_old +
    clip(V - V_old, -vf_clip_eps, vf_clip_eps), V_old the rollout's value. normalize_advantage:
    advantages standardised per minibatch (over its valid samples) or used raw; tuned as a
    categorical of options 0 and 1. minibatch_size: instead of num_minibatches (not both), the
    number of minibatches is ceil(max batch / minibatch_size) (`minibatches`); our minibatches
    are of equal size (n_valid // M, `stages.minibatch_rows`), where ARLBench's last one holds the
    remainder. It is static, not tunable: a traced size would make one program pay for the
    largest number of the largest minibatches.

    optimizer_layout: where Adam keeps its moments. "flat": one vector of every parameter
    (`optax.flatten`); "per_array": one per weight array; "auto" (default): flat for networks of
    at most `learner.FLAT_MAX_PARAMS` parameters, per array above. The same arithmetic, not the
    same bits (the gradient norm sums in another order), and the state's shapes differ, so a
    checkpoint resumes only under the layout that wrote it. Speed on this project's 2-core CPU
    (docs/benchmarks.md, bench_peers' 2x64 agents): per array is 6-10% slower for one
    agent and between 3% slower and 4% faster for 16 or 256 vmapped agents; flat compiles faster.
    """

    num_iterations: int = 1000
    num_envs: int = 8
    batch_size: int = 1000
    max_batch_size: int | None = None
    num_minibatches: int = DEFAULT_MINIBATCHES
    update_epochs: int = 10
    learning_rate: float = 3e-4
    clip_eps: float = 0.2
    gae_lambda: float = 0.95
    gamma: float = 0.99
    ent_coef: float = 1e-4
    vf_coef: float = 0.5
    max_grad_norm: float = 1.0
    adam_eps: float = 1e-5
    hidden_sizes: tuple = (256, 256, 256)
    activation: str = "tanh"
    init_log_std: float = 0.0
    normalize_obs: bool = True
    obs_clip: float = 10.0
    reward_scale: float = 1.0
    tune_every: int = 5
    objective: str = "reward_change"
    eval_steps: int = 1000
    eval_episodes: int = 1
    eval_policy: str = "greedy"
    vf_clip_eps: float | None = None
    normalize_advantage: bool = True
    minibatch_size: int | None = None
    optimizer_layout: str = "auto"

    def __post_init__(self):
        for f in REAL_FIELDS:
            v = getattr(self, f)
            if v is None and f in OPTIONAL_REAL:
                continue
            ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
            if not (ok and math.isfinite(v) and in_range(f, v)):
                raise ValueError(f"PPOConfig.{f} must be a number {range_text(f)}, got {v!r}")
        for f in INTEGER_FIELDS:
            _check_integer(f, getattr(self, f), 1)
        if self.max_batch_size is not None:
            _check_integer("max_batch_size", self.max_batch_size, 1)
        if isinstance(self.hidden_sizes, list):  # a list (e.g. from JSON or TOML) is taken as the tuple it holds
            object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        hs = self.hidden_sizes
        if not isinstance(hs, tuple) or not all(isinstance(w, int) and w >= 1 for w in hs):
            raise ValueError(f"PPOConfig.hidden_sizes must be a tuple of integers >= 1, got {hs!r}")
        if self.activation not in nets.ACTIVATIONS:
            raise ValueError(f"PPOConfig.activation must be one of {sorted(nets.ACTIVATIONS)}, got {self.activation!r}")
        if self.eval_policy not in EVAL_POLICIES:
            raise ValueError(f"PPOConfig.eval_policy must be one of {EVAL_POLICIES}, got {self.eval_policy!r}")
        if self.optimizer_layout not in OPTIMIZER_LAYOUTS:
            raise ValueError(f"PPOConfig.optimizer_layout must be one of {OPTIMIZER_LAYOUTS}, "
                             f"got {self.optimizer_layout!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"PPOConfig.objective must be one of {OBJECTIVES}, got {self.objective!r}")
        for f in ("normalize_obs", "normalize_advantage"):
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"PPOConfig.{f} must be True or False, got {getattr(self, f)!r}")
        if self.minibatch_size is not None:
            _check_integer("minibatch_size", self.minibatch_size, 1)
            if self.num_minibatches != DEFAULT_MINIBATCHES:
                raise ValueError(f"PPOConfig: give minibatch_size or num_minibatches, not both (got minibatch_size="
                                 f"{self.minibatch_size}, num_minibatches={self.num_minibatches})")

    def minibatches(self, max_batch: int) -> int:
        """The number of minibatches M of an epoch over a rollout of at most `max_batch` frames:
        num_minibatches, or with minibatch_size ceil(max_batch / minibatch_size) (1 when
        minibatch_size >= max_batch: one minibatch of the whole batch)."""
        if self.minibatch_size is None:
            return self.num_minibatches
        return max(1, -(-max_batch // self.minibatch_size))

    @classmethod
    def from_timesteps(cls, total_timesteps: int, **fields) -> PPOConfig:
        """A PPOConfig whose budget is `total_timesteps` frames: num_iterations =
        total_timesteps // the largest batch (max_batch_size if given, else batch_size),
        at least one iteration's worth required. With a tuned batch size give max_batch_size
        (the space's upper bound): iterations that collect smaller batches then use fewer
        frames, so total_timesteps is an upper bound on the frames collected."""
        if "num_iterations" in fields:
            raise ValueError("PPOConfig.from_timesteps: give total_timesteps or num_iterations, not both")
        _check_integer("total_timesteps", total_timesteps, 1)
        largest = fields.get("max_batch_size") or fields.get("batch_size", cls.batch_size)
        _check_integer("max_batch_size" if fields.get("max_batch_size") else "batch_size", largest, 1)
        if total_timesteps < largest:
            raise ValueError(f"PPOConfig.total_timesteps must be >= the largest batch ({largest}) for one "
                             f"iteration, got {total_timesteps}")
        return cls(num_iterations=total_timesteps // largest, **fields)


def check_choice(p) -> None:
    """A categorical of a TUNABLE field: ValueError unless every option is a number in the
    field's allowed range (batch_size: whole numbers >= 1; a switch: SWITCHES' options); the
    learner uses the option's value."""
    where = f"tuner space: {p.name} is categorical"
    if any(isinstance(o, str) for o in p.options):
        raise ValueError(f"{where}: its options must be numbers (values of PPOConfig.{p.name}), got {list(p.options)}")
    if p.name in SWITCHES:
        if not all(o in SWITCHES[p.name] for o in p.options):
            raise ValueError(f"{where}: its options must be {SWITCHES[p.name]} (off, on), got {list(p.options)}")
    elif p.name == "batch_size":
        if not all(float(o).is_integer() and o >= 1 for o in p.options):
            raise ValueError(f"{where}: its options must be whole numbers >= 1, got {list(p.options)}")
    elif not all(in_range(p.name, o) for o in p.options):
        raise ValueError(f"{where}: its options {list(p.options)} must be {range_text(p.name)}")


def largest_batch(p) -> int:
    """The largest batch size a batch_size hyperparameter can take."""
    return int(max(p.options)) if p.options is not None else int(p.high)


def max_rollout_steps(config: PPOConfig, space) -> int:
    """The rollout's fixed length in steps: ceil(max batch / num_envs), the max batch being
    `max_batch_size`, else the space's largest batch_size, else `batch_size`."""
    if config.max_batch_size is not None:
        max_batch = config.max_batch_size
    elif "batch_size" in space.names:
        max_batch = largest_batch(space.hyperparameters[space.index("batch_size")])
    else:
        max_batch = config.batch_size
    return -(-max_batch // config.num_envs)


def check_batch_options(config: PPOConfig, space) -> None:
    """ValueError when two options of a categorical batch_size give the same rollout
    (ceil(batch_size / num_envs) steps, at most `max_rollout_steps`): they would be one
    configuration recorded as two."""
    if "batch_size" not in space.names or space.hyperparameters[space.index("batch_size")].options is None:
        return
    options = space.hyperparameters[space.index("batch_size")].options
    cap = max_rollout_steps(config, space)
    steps = [min(-(-int(o) // config.num_envs), cap) for o in options]
    if len(set(steps)) < len(steps):
        raise ValueError(f"tuner space: batch_size options {list(options)} give rollouts of {steps} steps with "
                         f"num_envs={config.num_envs} (ceil(batch_size / num_envs), at most {cap}): options of "
                         f"the same length are the same configuration; keep one per length (multiples of num_envs "
                         f"are exact)")


def check_space(space) -> None:
    """ValueError unless every hyperparameter of `space` names a TUNABLE field and its
    bounds (a categorical: its options, `check_choice`) lie in that field's allowed range."""
    static = [f.name for f in dataclasses.fields(PPOConfig) if f.name not in TUNABLE]
    for p in space.hyperparameters:
        if p.name not in TUNABLE:
            kind = "is a static PPOConfig field (fixed at compile time)" if p.name in static else \
                "is not a PPOConfig field"
            raise ValueError(f"tuner space: {p.name!r} {kind}; tunable fields: {', '.join(TUNABLE)}")
        if p.options is not None:
            check_choice(p)
        elif p.name in SWITCHES:
            raise ValueError(f"tuner space: {p.name} is a switch: give it as a categorical of the options "
                             f"{SWITCHES[p.name]} (off, on), e.g. Hyperparameter.choice({p.name!r}, [0, 1])")
        elif p.name == "batch_size":
            if not (p.integer and p.low >= 1):
                raise ValueError(f"tuner space: batch_size must be an integer hyperparameter with low >= 1, got {p}")
        elif not (in_range(p.name, p.low) and in_range(p.name, p.high)):
            raise ValueError(f"tuner space: {p.name} bounds [{p.low}, {p.high}] must be {range_text(p.name)}")
