"""HostTuner: the same values as the jitted pure tuner under the documented key
schedule, Python types, exact checkpoint round trips, and its errors."""
import io
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hcjax
import hcjax.host

SPACE = hcjax.ppo_space()
SMALL_GP = dict(buffer=16, candidates=32, fit_points=16, refine_steps=2)
OPTIONS = {
    "fixed": dict(values=[1e-4, 0.3, 0.97, 2500]),
    "random": {},
    "random_start": {},
    "hyperband": dict(budget=30),
    "gp_ucb": SMALL_GP,
    "pb2": SMALL_GP,
    "hypercontroller": dict(d=6, s=2),
}
STEPS = 20


def test_every_registered_tuner_is_covered():
    assert set(OPTIONS) == set(hcjax.available())


def objectives(seed, n):
    """(n,) float32 objectives with a NaN and an overflow among them (ignored and counted)."""
    x = np.random.default_rng(seed).normal(size=n).astype(np.float32)
    x[3], x[7] = np.nan, 1e30
    return x


def drive(tuner, xs, start=0):
    """ask, then tell one objective (two every third step) -> list of (h,) float32 values."""
    out = []
    for k, x in enumerate(xs, start):
        out.append(np.array(list(tuner.ask().values()), np.float32))
        tuner.tell(float(x))
        if k % 3 == 0:
            tuner.tell(np.float32(-x))
    return out


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.slow
def test_same_values_as_the_jitted_tuner_with_the_documented_keys(name):
    seed, xs = 5, objectives(0, STEPS)
    host = hcjax.HostTuner(name, SPACE, seed=seed, **OPTIONS[name])
    host_values = drive(host, xs)

    tuner = hcjax.make_tuner(name, SPACE, **OPTIONS[name])
    base = jax.random.PRNGKey(seed)
    ask, tell = jax.jit(tuner.ask), jax.jit(tuner.tell)
    state = jax.jit(tuner.init)(jax.random.fold_in(base, 0))
    for k, x in enumerate(xs):
        state, values = ask(state, jax.random.fold_in(base, k + 1))
        np.testing.assert_array_equal(host_values[k], np.asarray(values), err_msg=f"ask {k}")
        state = tell(state, np.float32(x))
        if k % 3 == 0:
            state = tell(state, np.float32(-x))
    # k = 3 tells NaN twice, k = 7 tells 1e30 once: three ignored objectives, counted alike
    assert int(state.n_invalid) == host.n_invalid == 3


def test_asked_values_are_python_numbers_in_order_and_in_bounds():
    tuner = hcjax.HostTuner("random", SPACE, seed=1)
    for _ in range(20):
        hp = tuner.ask()
        assert list(hp) == list(SPACE.names)
        assert [type(v) for v in hp.values()] == [float, float, float, int]
        for p in SPACE.hyperparameters:
            assert p.low <= hp[p.name] <= p.high
        tuner.tell(1.0)
    assert tuner.n_asks == 20 and tuner.n_tells == 20 and tuner.n_invalid == 0


def test_counts_invalid_objectives():
    tuner = hcjax.HostTuner("hypercontroller", SPACE)
    tuner.ask()
    for x in [float("nan"), float("inf"), 10 ** 400, -1e16, np.float64(1e300), 0.5, 3, np.int64(2)]:
        tuner.tell(x)
    assert tuner.n_invalid == 5 and tuner.n_tells == 8
    assert int(tuner.state.t) == 3  # the valid ones were learned from


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.slow
def test_checkpoint_round_trip_continues_identically(name, tmp_path):
    xs = objectives(1, 2 * STEPS)
    original = hcjax.HostTuner(name, SPACE, seed=3, **OPTIONS[name])
    drive(original, xs[:STEPS])
    saved = original.state_dict()
    snapshot = {k: v.copy() for k, v in saved.items()}
    np.savez(tmp_path / "tuner.npz", **saved)

    restored = hcjax.HostTuner(name, SPACE, seed=99, **OPTIONS[name])  # another seed: the key comes from the file
    restored.load_state_dict(np.load(tmp_path / "tuner.npz"))
    assert (restored.n_asks, restored.n_tells, restored.n_invalid) == (original.n_asks, original.n_tells,
                                                                      original.n_invalid)
    a, b = drive(original, xs[STEPS:], STEPS), drive(restored, xs[STEPS:], STEPS)
    np.testing.assert_array_equal(np.stack(a), np.stack(b))
    # The saved dict is a copy: continuing (which donates the device state) left it unchanged.
    assert saved.keys() == snapshot.keys()
    for k in saved:
        np.testing.assert_array_equal(saved[k], snapshot[k], err_msg=k)


def test_state_dict_names_and_types():
    d = hcjax.HostTuner("hypercontroller", SPACE, d=4).state_dict()
    assert set(d) == {"tuner", "space", "options", "key", "asks", "tells", "state.models", "state.current",
                      "state.history", "state.window", "state.arms", "state.t", "state.n_invalid"}
    assert all(isinstance(v, np.ndarray) for v in d.values())
    assert str(d["tuner"]) == "hypercontroller" and d["asks"] == 0 and d["tells"] == 0
    np.testing.assert_array_equal(d["key"], np.asarray(jax.random.PRNGKey(0)))
    assert d["state.models"].shape == (4, 4, 4, 3)


def loaded_dict(**changes):
    tuner = hcjax.HostTuner("hypercontroller", SPACE, d=4)
    tuner.ask()
    tuner.tell(1.0)
    d = tuner.state_dict()
    d.update(changes)
    return {k: v for k, v in d.items() if v is not None}


@pytest.mark.parametrize("bad,match", [
    (loaded_dict(**{"state.window": None}), r"missing entries \['state.window'\]"),
    (loaded_dict(extra=np.zeros(1)), r"unexpected entries \['extra'\]"),
    (loaded_dict(tuner=np.asarray("gp_ucb")), "'tuner' must be 'hypercontroller'"),
    (loaded_dict(**{"state.models": np.zeros((4, 5, 5, 3), np.float32)}), "'state.models' must have shape"),
    (loaded_dict(**{"state.window": np.zeros(1, np.float64)}), "dtype float32, got shape .* dtype float64"),
    (loaded_dict(**{"state.window": np.full(1, np.nan, np.float32)}), "'state.window' has non-finite"),
    (loaded_dict(key=np.zeros(2, np.int32)), "'key' must have shape"),
    (loaded_dict(tells=np.asarray(-1, np.int64)), "'tells' must be >= 0, got -1"),
    (loaded_dict(**{"state.n_invalid": np.asarray(2, np.int32)}), r"'state.n_invalid' .* <= 'tells' = 1, got 2"),
    (loaded_dict(**{"state.t": np.asarray(5, np.int32)}), r"'state.t' .* <= 'tells' = 1, got 5"),
    (loaded_dict(**{"state.n_invalid": np.asarray(-3, np.int32)}), r"'state.n_invalid' must be >= 0 .*, got -3"),
    (loaded_dict(**{"state.arms": np.array([0, -1, 2, 3], np.int32)}), r"'state.arms' must be >= 0 .*, got -1"),
    (loaded_dict(**{"state.history": np.full((4, 1), -2, np.int32)}), r"'state.history' must be >= 0"),
    (loaded_dict(**{"state.arms": np.array([0, 10 ** 6, 2, 3], np.int32)}),
     r"'state.arms' holds indices up to 1000000, out of this tuner's range \(entries must be < \[4, 4, 4, 4\]"),
    (loaded_dict(**{"state.history": np.full((4, 1), 4, np.int32)}), r"'state.history' holds indices up to 4,"),
    (loaded_dict(options=np.asarray('{"d": 4, "s": 2, "ridge": 1.0, "beta": 0.0}')),
     r"'options' differs from this tuner's: s 2 saved, 1 here"),
    (loaded_dict(space=np.asarray("[]")), r"'space' differs .* hyperparameters \[\] saved, \['learning_rate'"),
    (loaded_dict(space=np.asarray("not json")), r"'space' must be JSON text"),
    ([("tuner", "hypercontroller")], "expected a mapping"),
])
def test_bad_state_dict_raises_and_changes_nothing(bad, match):
    tuner = hcjax.HostTuner("hypercontroller", SPACE, seed=2, d=4)
    twin = hcjax.HostTuner("hypercontroller", SPACE, seed=2, d=4)
    with pytest.raises(ValueError, match=match):
        tuner.load_state_dict(bad)
    for _ in range(5):
        assert tuner.ask() == twin.ask()
        tuner.tell(0.5)
        twin.tell(0.5)


def test_loading_another_tuners_options_is_refused():
    other = hcjax.HostTuner("hypercontroller", SPACE, d=5).state_dict()
    with pytest.raises(ValueError, match="'options' differs from this tuner's: d 5 saved, 4 here"):
        hcjax.HostTuner("hypercontroller", SPACE, d=4).load_state_dict(other)


@pytest.mark.parametrize("bad,match", [
    ([1.0, 2.0], r"shape \(2,\)"), ([0.5], r"shape \(1,\)"), (np.zeros(1), r"shape \(1,\)"),
    (jnp.zeros((2,)), r"shape \(2,\)"), ("1.0", "real number"), (True, "real number"), (None, "real number"),
])
def test_bad_objective_raises(bad, match):
    tuner = hcjax.HostTuner("gp_ucb", SPACE, **SMALL_GP)
    with pytest.raises(ValueError, match=r"HostTuner\('gp_ucb'\).tell: .*" + match):
        tuner.tell(bad)
    assert tuner.n_tells == 0


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="hypercontroller", ridge=float("inf")), "hypercontroller.ridge"),
    (dict(name="hypercontroller", lr=1.0), "unknown option"),
    (dict(name="bayes"), "unknown tuner name"),
    (dict(name="gp_ucb", buffer=10 ** 5), "memory_limit_gib"),
    (dict(name="random", seed=-1), "HostTuner.seed"),
    (dict(name="random", seed=2 ** 32), "HostTuner.seed"),
    (dict(name="random", seed=1.5), "HostTuner.seed"),
    (dict(name="random", seed=True), "HostTuner.seed"),
])
def test_options_are_validated_as_in_make_tuner(kwargs, match):
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=match):
        hcjax.HostTuner(name, SPACE, **kwargs)


def test_numpy_seed_and_raised_memory_limit_are_accepted():
    tuner = hcjax.HostTuner("hypercontroller", SPACE, seed=np.uint32(7), d=np.int64(30), s=2, memory_limit_gib=1)
    assert tuner.tuner.memory_bytes > 0 and tuner.ask().keys() == set(SPACE.names)
    with pytest.raises(ValueError, match="memory_limit_gib=0.001"):
        hcjax.HostTuner("hypercontroller", SPACE, d=30, s=2, memory_limit_gib=0.001)


def test_save_load_through_a_bytes_buffer():
    tuner = hcjax.HostTuner("hyperband", SPACE, budget=20)
    for _ in range(7):
        tuner.ask()
        tuner.tell(0.1)
    buf = io.BytesIO()
    np.savez(buf, **tuner.state_dict())
    buf.seek(0)
    fresh = hcjax.HostTuner("hyperband", SPACE, budget=20)
    fresh.load_state_dict(dict(np.load(buf)))
    assert [fresh.ask() for _ in range(10)] == [tuner.ask() for _ in range(10)]


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.slow
def test_pickle_round_trip_continues_identically(name):
    """Issue 17: pickling goes through state_dict; the copy makes the original's next asks."""
    xs = objectives(4, 2 * STEPS)
    original = hcjax.HostTuner(name, SPACE, seed=7, **OPTIONS[name])
    drive(original, xs[:STEPS])
    copy = pickle.loads(pickle.dumps(original))
    assert (copy.name, copy.n_asks, copy.n_tells, copy.n_invalid, copy.device) == (
        original.name, original.n_asks, original.n_tells, original.n_invalid, original.device)
    np.testing.assert_array_equal(np.stack(drive(copy, xs[STEPS:], STEPS)),
                                  np.stack(drive(original, xs[STEPS:], STEPS)))


def devices_of(tuner):
    return set().union(*(leaf.devices() for leaf in jax.tree_util.tree_leaves(tuner.state)))


@pytest.mark.parametrize("device", [None, "cpu", jax.devices("cpu")[0]])
def test_state_lives_on_the_chosen_device_default_the_cpu(device):
    """Issue 18: the state stays on one device (default: the first CPU device) through
    ask, tell and load_state_dict."""
    cpu = jax.devices("cpu")[0]
    kwargs = {} if device is None else {"device": device}
    tuner = hcjax.HostTuner("hypercontroller", SPACE, d=4, **kwargs)
    assert tuner.device == cpu and devices_of(tuner) == {cpu}
    tuner.ask()
    tuner.tell(1.0)
    assert devices_of(tuner) == {cpu}
    tuner.load_state_dict(tuner.state_dict())
    assert devices_of(tuner) == {cpu}
    tuner.ask()
    assert devices_of(tuner) == {cpu}


def test_state_on_the_accelerator_when_asked():
    # On a GPU machine device="gpu" puts the state there (the default stays on the CPU);
    # on a machine without one, asking for it is refused naming the argument.
    default = hcjax.HostTuner("gp_ucb", SPACE, **SMALL_GP)
    assert {d.platform for d in devices_of(default)} == {"cpu"}
    if not any(d.platform == "gpu" for d in jax.devices()):
        with pytest.raises(ValueError, match="HostTuner.device"):
            hcjax.HostTuner("gp_ucb", SPACE, device="gpu", **SMALL_GP)
        return
    on_gpu = hcjax.HostTuner("gp_ucb", SPACE, device="gpu", **SMALL_GP)
    assert {d.platform for d in devices_of(on_gpu)} == {"gpu"}
    on_gpu.ask()
    on_gpu.tell(0.5)
    assert {d.platform for d in devices_of(on_gpu)} == {"gpu"}


@pytest.mark.parametrize("bad", ["warp9", 3, jnp.zeros(())])
def test_bad_device_is_refused(bad):
    with pytest.raises(ValueError, match="HostTuner.device"):
        hcjax.HostTuner("random", SPACE, device=bad)


def test_host_tuners_built_alike_share_their_compiled_calls(monkeypatch):
    """A restored checkpoint or a pickled copy compiles nothing: HostTuners of one name,
    space and options run the same jitted calls; any other option or space field, even a
    default, gets its own, and only the last SHARED_PROGRAMS sets are kept."""
    first = hcjax.HostTuner("hypercontroller", SPACE, seed=1, d=4)
    again = hcjax.HostTuner("hypercontroller", hcjax.ppo_space(), seed=9, d=4, device="cpu")
    assert (again._ask, again._tell) == (first._ask, first._tell)

    def programs(name, space=SPACE, **options):  # what a HostTuner would run, compiling nothing yet
        return hcjax.host.shared_programs(hcjax.make_tuner(name, space, **options), options)

    assert programs("hypercontroller", d=4).ask is first._ask
    moved = hcjax.Space([p if p.name != "gae_lambda" else hcjax.Hyperparameter("gae_lambda", 0.9, 1.0, default=0.97)
                         for p in SPACE.hyperparameters])  # only a default differs
    others = [programs("hypercontroller", d=5), programs("hypercontroller", d=4, s=2),
              programs("hypercontroller", hcjax.ppo_space(batch_size=(1000, 7000)), d=4), programs("random"),
              programs("hypercontroller", moved, d=4)]
    assert len({first._ask, *(p.ask for p in others)}) == 6
    monkeypatch.setattr(hcjax.host, "SHARED_PROGRAMS", 2)
    for d in (6, 7):  # two sets not built before
        programs("hypercontroller", d=d)
    assert programs("hypercontroller", d=4).ask is not first._ask  # dropped: compiled anew
