#!/usr/bin/env bash
# The GPU standing list (see docs/benchmarks.md) as one device call: install the carried
# wheels (.gpu_wheels/, made by `pip download` for cp312), then each step under its own
# time cap, every output under $OUT (study/ and bench/ as study.tgz and bench.tgz). A capped
# study resumes when its directory is brought back to the next call.
#   PRESET (default gpu), STUDY_CAP / BENCH_CAP: seconds for the study and `hcjax bench --quick`;
#   BENCH_ONLY: a list of bench scripts (default all); TESTS_CAP: seconds for the tests that
#   need the device (HostTuner's state on the GPU); HOST_CAP: the HostTuner rows, timed first;
#   PLOT=1: also draw the study's figures there (by default they are drawn afterwards).
#   Run from the repository root: OUT=/some/dir bash experiments/benchmarks/gpu_session.sh
set -u
OUT=${OUT:?set OUT}
STUDY_CAP=${STUDY_CAP:-330}
PRESET=${PRESET:-gpu}
BENCH_CAP=${BENCH_CAP:-200}
DEPS=${DEPS:-/tmp/hcjax_deps}
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$OUT/session.log"; }

if [ ! -d "$DEPS" ]; then
  pip install --no-index --no-deps --target "$DEPS" .gpu_wheels/*.whl > "$OUT/install.log" 2>&1 \
    || { stamp "wheel install failed"; tail -5 "$OUT/install.log"; }
fi
export PYTHONPATH="$DEPS:$PWD"
export PYTHONUNBUFFERED=1
python3 -m experiments info > "$OUT/info.txt" 2>&1; stamp "info: $(grep -m1 '^jax ' "$OUT/info.txt"), $(grep -m1 -i 'device' "$OUT/info.txt")"

stamp "device tests (cap ${TESTS_CAP:-90} s)"
timeout -s INT -k 10 "${TESTS_CAP:-90}" python3 -m pytest -q -p no:cacheprovider tests/test_host_tuner.py \
  -k "accelerator or device" > "$OUT/device_tests.log" 2>&1
stamp "device tests exit $?: $(tail -1 "$OUT/device_tests.log")"

stamp "HostTuner rows (cap ${HOST_CAP:-60} s)"
timeout -s INT -k 10 "${HOST_CAP:-60}" python3 -m experiments.benchmarks.bench_tuners --host-only --quick \
  --out "$OUT/bench_host.json" > "$OUT/bench_host.log" 2>&1
stamp "HostTuner rows exit $?"

stamp "bench --quick (cap $BENCH_CAP s)"
timeout -s INT -k 10 "$BENCH_CAP" python3 -m experiments bench --quick ${BENCH_ONLY:+--only $BENCH_ONLY} \
  --out "$OUT/bench" > "$OUT/bench.log" 2>&1
stamp "bench exit $?"

stamp "preset $PRESET (cap $STUDY_CAP s)"
timeout -s INT -k 20 "$STUDY_CAP" python3 -m experiments run --preset "$PRESET" --no-progress --out "$OUT/study" \
  > "$OUT/study.log" 2>&1
stamp "study exit $?"
if [ -n "${PLOT:-}" ]; then  # `hcjax plot` redraws the same bytes on any machine: skipped on the device by default
  python3 -m experiments plot "$OUT/study" > "$OUT/plot.log" 2>&1; stamp "plot exit $?"
fi
rm -f "$OUT/study/.lock" "$OUT/study/.lock.owner"
# the device tool returns at most 16 files of a folder: one archive per directory
for d in study bench; do
  [ -d "$OUT/$d" ] && tar czf "$OUT/$d.tgz" -C "$OUT" "$d" && rm -rf "${OUT:?}/$d"
done
stamp "done"
