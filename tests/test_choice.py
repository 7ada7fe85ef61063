"""Categorical hyperparameters (issue 18): Hyperparameter.choice, the bin encoding, one
HyperController arm per option, PBT keeping or resampling options, every tuner and
population method returning option indices, HostTuner returning options, study files,
`--space`, and PPO training with the option's value."""
import os
import pickle
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hcjax
from agents import ppo
from experiments import cli
from experiments.study import presets, studyfile
from hcjax.population.pbt import perturb
from hcjax.space import Hyperparameter as H
from hcjax.tuners.hypercontroller import break_ties, masked_scores
from tests.cli_runs import ROOT, WALK, tiny_study
from tests.reference_controller import ReferenceController
from tests.test_integer_values import SMALL, assert_whole_and_inside, objectives, random_space
from tests.tiny_env import make_walk

OPTIMIZERS = ("adam", "sgd", "rmsprop")
RATES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
SPACE = hcjax.Space([H("lr", 1e-5, 1e-2, "log"), H.choice("optimizer", OPTIMIZERS, default="sgd"),
                     H.choice("rate", RATES), H("n", 2, 9, integer=True)])
PLAIN = hcjax.Space([p for p in SPACE.hyperparameters if p.options is None])  # the same without categoricals
CAT = SPACE.is_categorical
# Issue 17's random integer hyperparameters (tests/test_integer_values.py) after SPACE's: one
# compilation per tuner and population method checks option indices and whole values at once.
INTEGERS = random_space(0, h=15)
WITH_INTEGERS = hcjax.Space([*SPACE.hyperparameters, *INTEGERS.hyperparameters])
K = np.array([3, 5])  # options of the categoricals, in order
# Compiled once for the module (each shape once) rather than dispatched op by op:
decode, encode = jax.jit(SPACE.decode), jax.jit(SPACE.encode)
plain_decode, plain_encode = jax.jit(PLAIN.decode), jax.jit(PLAIN.encode)


def reference_decode(u: np.ndarray) -> np.ndarray:
    """(..., h) unit -> (..., h): bins for categoricals (float32 as the library), the plain space's decode else."""
    u = np.clip(np.asarray(u, np.float32), 0.0, 1.0)
    out = np.zeros(u.shape, np.float32)
    out[..., ~CAT] = np.asarray(plain_decode(u[..., ~CAT]))
    out[..., CAT] = np.minimum(np.floor(u[..., CAT] * K.astype(np.float32)), K - 1)
    return out


def test_choice_builds_an_integer_hyperparameter_over_option_indices():
    p = H.choice("optimizer", OPTIMIZERS, default="rmsprop")
    assert (p.low, p.high, p.integer, p.scale, p.default, p.options) == (0, 2, True, "linear", 2, OPTIMIZERS)
    assert H.choice("b", [np.int64(64), 128]).options == (64, 128) and H.choice("b", [64, 128]).default == 0
    assert H.choice("r", [1e-4, 3e-4], default=np.float32(3e-4)).default == 1
    np.testing.assert_array_equal(SPACE.default, [PLAIN.default[0], 1, 0, PLAIN.default[1]])
    np.testing.assert_array_equal(SPACE.n_options, [0, 3, 5, 0])
    np.testing.assert_array_equal(SPACE.is_categorical, [False, True, True, False])


@pytest.mark.parametrize("options,default,match", [
    (["a"], None, "at least 2"), (["a", "a"], None, "distinct"), ([1.0, 1.00000001], None, "distinct"),
    ([True, 2], None, r"options\[0\]"), ([1, float("nan")], None, r"options\[1\]"), ([1, 1e39], None, r"options\[1\]"),
    ("ab", None, "list or tuple"), ([1, 2], 3, "one of the options"), ([1, 2], True, "one of the options"),
    (["x", "y"], "z", "one of the options")])
def test_choice_refuses_bad_options_naming_the_hyperparameter(options, default, match):
    with pytest.raises(ValueError, match=f"'opt'.*{match}"):
        H.choice("opt", options, default=default)


def test_options_given_to_the_constructor_must_match_the_bounds():
    with pytest.raises(ValueError, match="'x'.*low must be 0, high 1"):
        H("x", 0, 3, integer=True, options=("a", "b"))
    with pytest.raises(ValueError, match="'x'.*low must be 0, high 1"):
        H("x", 0, 1, options=("a", "b"))
    with pytest.raises(ValueError, match="'x'.*option index"):
        H("x", 0, 2, integer=True, default=0.5, options=("a", "b", "c"))
    assert H("x", 0, 1, integer=True, options=("a", "b")) == H.choice("x", ["a", "b"])


@pytest.mark.slow
def test_encode_decode_grid_natural_against_numpy():
    rng = np.random.default_rng(0)
    u = rng.uniform(-0.1, 1.1, size=(2000, SPACE.h)).astype(np.float32)
    u[:20, 1:3] = (np.arange(20)[:, None] % K) / K  # bin edges
    values = np.asarray(decode(u))
    np.testing.assert_array_equal(values, reference_decode(u))
    unit = np.asarray(encode(values))
    np.testing.assert_array_equal(unit[:, ~CAT], np.asarray(plain_encode(values[:, ~CAT])))
    np.testing.assert_allclose(unit[:, CAT], (values[:, CAT] + 0.5) / K, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(decode(unit))[:, CAT], values[:, CAT])  # bin centre -> option
    for d in (2, 4, 7):
        grid = SPACE.grid(d)
        u = np.broadcast_to(np.linspace(0, 1, d), (SPACE.h, d)).T
        np.testing.assert_array_equal(grid[CAT], reference_decode(u).T[CAT])
        np.testing.assert_array_equal(grid[~CAT], PLAIN.grid(d))
        np.testing.assert_allclose(SPACE.unit_grid(d)[CAT], (grid[CAT] + 0.5) / K[:, None], rtol=1e-6)
        np.testing.assert_array_equal(SPACE.unit_grid(d)[~CAT], PLAIN.unit_grid(d))
        arms, n_arms = SPACE.arm_grid(d)
        np.testing.assert_array_equal(n_arms, [d, 3, 5, d])
        for i in range(SPACE.h):
            row = np.arange(n_arms[i]) if CAT[i] else grid[i]
            np.testing.assert_array_equal(arms[i, :n_arms[i]], row)
    natural = np.asarray(jax.jit(SPACE.natural)(values))
    expected = values.copy()
    expected[:, 2] = np.asarray(RATES, np.float32)[values[:, 2].astype(int)]
    np.testing.assert_array_equal(natural, expected)
    one = SPACE.as_dict(values[7])
    assert one["optimizer"].dtype == jnp.int32 and int(one["optimizer"]) == int(values[7, 1])
    assert float(one["rate"]) == np.float32(RATES[int(values[7, 2])])
    named = SPACE.names_to_values(values[7])
    assert named["optimizer"] == OPTIMIZERS[int(values[7, 1])] and named["rate"] == RATES[int(values[7, 2])]


def test_snap_and_clip_keep_option_indices():
    x = np.asarray([[5e-4, 1.4, 3.6, 4.0], [5e-4, -2.0, 9.0, 4.0]], np.float32)  # NumPy into the program
    clipped, snapped = map(np.asarray, jax.jit(lambda x: (SPACE.clip(x), SPACE.snap(SPACE.clip(x), 6)))(x))
    np.testing.assert_array_equal(clipped[:, 1:3], [[1, 4], [0, 4]])
    grid = SPACE.grid(6)
    for r, row in enumerate(clipped):
        assert grid[1, snapped[r, 1]] == row[1] and grid[2, snapped[r, 2]] == row[2]


def test_random_tuner_draws_every_option_with_probability_one_over_k():
    tuner = hcjax.make_tuner("random", SPACE)
    n = 30000
    # the keys split inside the program and the values read in NumPy: no eager op to compile
    values = np.asarray(jax.jit(lambda key: jax.vmap(lambda k: tuner.ask(tuner.init(k), k)[1])(
        jax.random.split(key, n)))(jax.random.key(3)))
    for column, k in zip((1, 2), K):
        counts = np.bincount(values[:, column].astype(int), minlength=k)
        assert counts.size == k
        chi2 = float(np.sum((counts - n / k) ** 2 / (n / k)))
        assert chi2 < 25.0, (counts, chi2)  # k - 1 <= 4 degrees of freedom: P(chi2 > 25) < 1e-4


@pytest.mark.parametrize("d,s", [(4, 1), (3, 2)])
def test_hypercontroller_has_one_arm_per_option_and_matches_the_reference(d, s):
    space = hcjax.Space([H("x", 0.0, 1.0), H.choice("c", ["a", "b"]), H.choice("k", list(range(6)))])
    n_arms = [d, 2, 6]
    D = 6
    tuner = hcjax.make_tuner("hypercontroller", space, d=d, s=s)
    ask, tell = jax.jit(tuner.ask), jax.jit(tuner.tell)
    rng = np.random.default_rng(d)
    key = jax.random.PRNGKey(d)
    state = jax.jit(tuner.init)(key)
    assert state.models.shape[:3] == (3, D ** s, D)
    ref = ReferenceController(3, D, s, n_arms=n_arms)
    arms_grid, _ = space.arm_grid(d)
    seen = [set() for _ in range(3)]
    for t in range(60):
        key, sub = jax.random.split(key)
        state, values = ask(state, sub)
        arms = np.asarray(state.arms)
        np.testing.assert_array_equal(np.asarray(values), arms_grid[np.arange(3), arms])
        scores = ref.scores()
        for i in range(3):
            assert 0 <= arms[i] < n_arms[i]
            seen[i].add(int(arms[i]))
            best = max(scores[i])
            near = [a for a, v in enumerate(scores[i]) if v >= best - 1e-4 * max(1.0, abs(best))]
            assert arms[i] in near, (t, i, arms[i], scores[i])
        ref.arms = [int(a) for a in arms]
        x = float("nan") if t % 17 == 5 else float(rng.normal() + np.sin(t / 5.0))
        state = tell(state, jnp.float32(x))
        ref.tell(x)
    assert [len(a) for a in seen] == n_arms, seen


def test_masked_arms_lose_to_nan_scores():
    scores = np.asarray([[np.nan, -np.inf, 5.0], [np.nan, np.nan, 7.0]], np.float32)
    draw = jax.jit(jax.vmap(lambda k: break_ties(jax.random.key(k), masked_scores(scores, np.asarray([2, 1])))))
    arms = np.asarray(draw(np.arange(50, dtype=np.int32)))  # 50 keys in one program: row k drawn with jax.random.key(k)
    assert arms.shape == (50, 2)
    assert np.all((arms[:, 0] == 0) | (arms[:, 0] == 1)) and np.all(arms[:, 1] == 0)


def test_pbt_keeps_or_resamples_options_as_a_numpy_reference():
    n = 4000
    key = jax.random.key(5)

    @jax.jit
    def draws(key):  # the donors' uniforms and perturb(key)'s two draws, in one program: (n, h) each
        k_resample, _, k_uniform = jax.random.split(key, 3)
        return [jax.random.uniform(k, (n, SPACE.h)) for k in (jax.random.key(6), k_resample, k_uniform)]

    donor_unit, resample_unit, fresh_unit = map(np.asarray, draws(key))
    donors = decode(donor_unit)
    explored = np.asarray(jax.jit(lambda k, v: perturb(SPACE, k, v, 0.3, (0.8, 1.2)))(key, donors))
    resample = resample_unit < 0.3
    fresh = reference_decode(fresh_unit)
    expected = np.where(resample, fresh, np.asarray(donors))
    np.testing.assert_array_equal(explored[:, CAT], expected[:, CAT])
    changed = np.mean(explored[:, CAT] != np.asarray(donors)[:, CAT], axis=0)
    np.testing.assert_allclose(changed, 0.3 * (1 - 1 / K), atol=0.025)  # resampled to another option


def assert_option_indices(values) -> None:
    x = np.asarray(values)
    assert np.all(np.isfinite(x))
    assert np.all(x[..., CAT] == np.round(x[..., CAT])) and np.all(x[..., CAT] >= 0)
    assert np.all(x[..., CAT] <= K - 1)
    assert np.all(x >= SPACE.low) and np.all(x <= SPACE.high)


@pytest.mark.parametrize("name", sorted(hcjax.available()))
@pytest.mark.slow
def test_every_tuner_returns_option_indices_and_host_tuner_the_options(name):
    """The pure tuner's values after each ask (`values(state)`: what the jitted ask returned)
    are option indices and whole values inside the integer bounds, and the HostTuner's asks
    their options and Python ints inside the bounds: one compiled ask for both."""
    host = hcjax.HostTuner(name, WITH_INTEGERS, seed=1, **SMALL.get(name, {}))
    values_of = jax.jit(host.tuner.values)
    for objective in objectives(1, 12):
        asked = host.ask()
        values = np.asarray(values_of(host.state))
        assert_option_indices(values[:SPACE.h])
        assert_whole_and_inside(INTEGERS, values[SPACE.h:])
        assert asked["optimizer"] in OPTIMIZERS and asked["rate"] in RATES and isinstance(asked["n"], int)
        assert (asked["optimizer"], asked["rate"]) == (OPTIMIZERS[int(values[1])], RATES[int(values[2])])
        assert all(isinstance(asked[n], int) for n in INTEGERS.names[1:])
        assert_whole_and_inside(INTEGERS, [asked[n] for n in INTEGERS.names])
        host.tell(objective)
    copy = pickle.loads(pickle.dumps(host))
    assert copy.ask() == host.ask()


@pytest.mark.parametrize("name", sorted(hcjax.populations()))
@pytest.mark.slow
def test_every_population_method_returns_option_indices(name):
    """Option indices, and whole values inside the integer bounds, after init and every step."""
    pop = hcjax.make_population(name, WITH_INTEGERS, **SMALL.get(name, {}))
    step = jax.jit(pop.step)

    def check(values):
        assert_option_indices(np.asarray(values)[:, :SPACE.h])
        assert_whole_and_inside(INTEGERS, np.asarray(values)[:, SPACE.h:])

    state, values = jax.jit(pop.init, static_argnums=1)(jax.random.PRNGKey(0), 6)
    check(values)
    for k, objs in enumerate(objectives(3, (4, 6))):
        state, values, _ = step(state, jax.random.PRNGKey(10 + k), jnp.asarray(objs))
        check(values)


HEADER = 'envs = ["CartPole-v1"]\nmethods = ["random"]\nseeds = 1\niterations = 2\n'


def test_study_file_options_round_trip_and_build_the_space():
    text = HEADER + ('\n[[space]]\nname = "learning_rate"\noptions = [1e-4, 3e-4]\ndefault = 3e-4\n'
                     '\n[[space]]\nname = "batch_size"\noptions = [64, 128]\n')
    plan = presets.resolve(studyfile.loads(text))
    assert plan.space.hyperparameters == (H.choice("learning_rate", [1e-4, 3e-4], default=3e-4),
                                          H.choice("batch_size", [64, 128]))
    assert studyfile.loads(studyfile.dumps(plan.preset)) == plan.preset


@pytest.mark.parametrize("entry,match", [
    ('name = "learning_rate"\noptions = [1e-4, 3e-4]\nlow = 0', r"space\[0\]: 'learning_rate'.*not give \['low'\]"),
    ('name = "learning_rate"\noptions = [1e-4]', r"space\[0\].*'learning_rate'.*at least 2"),
    ('name = "learning_rate"\noptions = [1e-4, 3e-4]\ndefault = 2e-4', r"space\[0\].*one of the options"),
    ('name = "learning_rate"', r"space\[0\]: missing \['low', 'high'\]")])
def test_bad_study_file_options_name_the_entry(entry, match):
    with pytest.raises(ValueError, match=match):
        presets.resolve(studyfile.loads(HEADER + "\n[[space]]\n" + entry + "\n"))


def test_space_argument_parses_options():
    assert cli.parse_hyperparameter("batch_size=512,1024:default=1024") == {
        "name": "batch_size", "options": [512, 1024], "default": 1024}
    assert cli.parse_hyperparameter("learning_rate=1e-4,3e-4") == {"name": "learning_rate", "options": [1e-4, 3e-4]}
    assert cli.parse_hyperparameter("act=tanh,relu") == {"name": "act", "options": ["tanh", "relu"]}
    for bad, match in [("x=1,,2", "empty"), ("x=1,2:log", "only default")]:
        with pytest.raises(ValueError, match=match):
            cli.parse_hyperparameter(bad)


BAD_SPACE = [("learning_rate=fast,slow", "learning_rate is categorical"), ("clip_eps=0.1,0.1", "'clip_eps'.*distinct"),
             ("batch_size=64,0.5", "batch_size is categorical")]


def run_with_space(out, space: str) -> list[str]:
    """`hcjax run` arguments of a one-iteration smoke study with `--space SPACE`."""
    return ["run", "--preset", "smoke", "--iterations", "1", "--seeds", "1", "--no-progress", "--out", str(out),
            "--space", space]


@pytest.mark.parametrize("arg,message", BAD_SPACE)
def test_bad_space_argument_exits_2_naming_the_field(arg, message, tmp_path, capsys):
    """In process: the exit status `cli.main` returns, and the message (the command's
    own exit status: the next test)."""
    assert cli.main(run_with_space(tmp_path / "study", arg)) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert not (tmp_path / "study").exists()


@pytest.mark.slow
def test_bad_space_argument_is_the_commands_exit_status_2(tmp_path):
    """The command on a study file of tests/tiny_env.py's walker (the smoke preset's CartPole
    would import gymnax first, ~4 CPU s more, to build it before the space is checked)."""
    arg, message = BAD_SPACE[0]
    config = tmp_path / "walk.toml"
    config.write_text(tiny_study(["random"], seeds=1, iterations=1, eval_every=1, envs=(), env_factories=(WALK,)))
    args = ["run", "--config", str(config), "--no-progress", "--out", str(tmp_path / "study"), "--space", arg]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-m", "experiments", *args],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert re.search(message, result.stderr), result.stderr
    assert not (tmp_path / "study").exists()


@pytest.mark.slow
def test_ppo_refuses_string_options_and_trains_with_the_option_value():
    with pytest.raises(ValueError, match="learning_rate is categorical: its options must be numbers"):
        ppo.check_space(hcjax.Space([H.choice("learning_rate", ["slow", "fast"])]))
    with pytest.raises(ValueError, match="clip_eps is categorical: its options"):
        ppo.check_space(hcjax.Space([H.choice("clip_eps", [-0.1, 0.2])]))
    space = hcjax.Space([H.choice("learning_rate", [1e-4, 2.5e-3], default=2.5e-3),
                         H.choice("batch_size", [16, 32])])
    config = ppo.PPOConfig(num_envs=4, num_minibatches=2, update_epochs=1, hidden_sizes=(8,), num_iterations=2,
                           tune_every=100)
    # tests/tiny_env.py's walker: the point is the option values, not the environment
    learner = ppo.make_learner(config, make_walk(), hcjax.make_tuner("fixed", space))
    assert learner.max_steps == 8  # the largest batch_size option, 32 frames over 4 envs
    state, metrics = jax.jit(lambda k: learner.iterate(learner.init(k), 2, 0))(jax.random.key(0))
    assert float(state.opt_state.hyperparams["learning_rate"]) == np.float32(2.5e-3)
    np.testing.assert_array_equal(np.asarray(state.hparams), [1, 0])  # the tuner's values: option indices
    np.testing.assert_array_equal(np.asarray(metrics["frames"]), [16, 16])
