"""Integer hyperparameters (issue 17): bounds must be whole numbers, and every value a
tuner, a HostTuner or a population method returns for one is a whole number inside them
(checked in tests/test_choice.py on `random_space` joined to the categorical space there:
one compilation per method for both issues' checks)."""
import numpy as np
import pytest

import hcjax

SMALL = {"gp_ucb": dict(buffer=16, candidates=32, fit_points=16, refine_steps=2),
         "pb2": dict(buffer=16, candidates=32, fit_points=16, refine_steps=2),
         "hyperband": dict(budget=20), "hypercontroller": dict(d=7),
         "pb2_population": dict(buffer=32, candidates=32, fit_points=16)}


def random_space(seed: int, h: int) -> hcjax.Space:
    """h integer hyperparameters with random whole bounds (linear and log, narrow and wide
    ranges, up to float32's exact integers), plus one real hyperparameter first."""
    rng = np.random.default_rng(seed)
    params = [hcjax.Hyperparameter("real", 0.0, 1.0)]
    for i in range(h):
        log = bool(rng.uniform() < 0.4)
        low = int(rng.integers(1, 1000)) if log else int(rng.integers(-1000, 1000))
        width = int(rng.choice([1, 2, 3, 7, 999, 2 ** 20, 2 ** 24 - 2000]))
        params.append(hcjax.Hyperparameter(f"n{i}", low, low + width, "log" if log else "linear", integer=True,
                                           default=None if rng.uniform() < 0.5 else low + width // 3))
    return hcjax.Space(params)


def objectives(seed: int, shape) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(np.float32)
    x[rng.uniform(size=shape) < 0.1] = np.nan
    return x


def assert_whole_and_inside(space: hcjax.Space, values) -> None:
    """values: (..., h) natural units."""
    x = np.asarray(values, np.float64)
    ints = space.is_integer
    low = np.array([p.low for p in space.hyperparameters])
    high = np.array([p.high for p in space.hyperparameters])
    assert np.all(x[..., ints] == np.round(x[..., ints])), "an integer hyperparameter got a fractional value"
    assert np.all(x >= low) and np.all(x <= high), "a value outside its bounds"


def test_integer_bounds_must_be_whole_numbers():
    with pytest.raises(ValueError, match="'batch_size'.*bounds must be whole numbers"):
        hcjax.Hyperparameter("batch_size", 100.5, 200.7, integer=True)
    with pytest.raises(ValueError, match="'batch_size'.*bounds must be whole numbers"):
        hcjax.ppo_space(batch_size=(0.5, 2.5))
    with pytest.raises(ValueError, match="'n'.*bounds must be whole numbers"):  # not exact in float32
        hcjax.Hyperparameter("n", 2 ** 24 + 1, 2 ** 24 + 9, integer=True)
    assert hcjax.Hyperparameter("n", 100.0, np.int64(200), integer=True).high == 200
    assert hcjax.Hyperparameter("x", 100.5, 200.7).low == 100.5  # real hyperparameters keep any bounds
