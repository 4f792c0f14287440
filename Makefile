# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
EXTRAS ?= train,rm,server,io,trl,ops,clickhouse,dev
PYTEST_WORKERS ?= 2

.PHONY: demo test lint install clean bench

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# torch is pinned and installed first: an unpinned torch would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e ".[$(EXTRAS)]" torch==2.13.0
	touch $(STAMP)

install: $(STAMP)

# Browser tests (tests/e2e) drive Debian's chromium: Playwright's own browser download does not work
# here. sudo only when not root. A CJK font makes Chinese labels readable in the test screenshots.
BROWSER := $(VENV)/.browser
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
$(BROWSER): | $(PY)
	command -v chromium >/dev/null || ($(SUDO) apt-get update && $(SUDO) apt-get install -y chromium)
	-fc-list :lang=zh | grep -q . || $(SUDO) apt-get install -y fonts-wqy-microhei
	touch $(BROWSER)

# The ops tests (tests/test_ops_*.py, docs/ops.md) start Debian's Prometheus and Alertmanager on
# loopback and talk to them through their HTTP APIs. Debian has no Grafana Loki (its `loki` package is
# an unrelated genetics program) and no OTLP collector: see docs/ops.md for how those are tested.
OPS_DAEMONS := $(VENV)/.ops-daemons
$(OPS_DAEMONS): | $(PY)
	command -v prometheus >/dev/null && command -v prometheus-alertmanager >/dev/null || \
		($(SUDO) apt-get update && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y \
		--no-install-recommends prometheus prometheus-alertmanager)
	touch $(OPS_DAEMONS)

demo: $(STAMP)
	$(VENV)/bin/rlcockpit demo

lint: $(STAMP)
	$(VENV)/bin/ruff check --no-cache src tests benchmarks
	cd src && ../$(VENV)/bin/lint-imports ../pyproject.toml --no-cache

# verl's real Tracking class and OpenRLHF's real logging module (tests/test_verl_real.py,
# tests/test_openrlhf_real.py) in a venv of their own: verl pins transformers < 5.11, the project's
# venv has the latest TRL. Both are installed --no-deps after only the packages their logging code
# imports on a CPU (tests/requirements-verl-real.txt): their full sets pull ray[default], wandb,
# datasets, flash-attn (CUDA) and deepspeed. torch is pinned first, as for the project venv.
VERL_VENV    := .venv-verl
VERL_PIN     := $(shell grep -m1 '^verl==' benchmarks/requirements-verl.txt)
OPENRLHF_PIN := openrlhf==0.11.2
$(VERL_VENV)/.installed: tests/requirements-verl-real.txt benchmarks/requirements-verl.txt pyproject.toml
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/pip install --quiet torch==2.13.0
	$(VERL_VENV)/bin/pip install --quiet -r tests/requirements-verl-real.txt -e . torch==2.13.0
	$(VERL_VENV)/bin/pip install --quiet --no-deps $(VERL_PIN) $(OPENRLHF_PIN)
	touch $@

test: $(STAMP) $(BROWSER) $(OPS_DAEMONS) $(VERL_VENV)/.installed lint
	$(PY) -m pytest -n $(PYTEST_WORKERS) --timeout 900 --durations 15 tests

# The edit loop: everything but the tests marked slow (training, browsers, TRL, Prometheus and
# Alertmanager, the chDB store, subprocess pipelines; tests/conftest.py); under 3 minutes, so it
# needs neither chromium nor the ops daemons. `make test` (what CI runs) is the whole suite.
.PHONY: test-fast
test-fast: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --timeout 300 -m "not slow" tests

clean:
	rm -rf $(VENV) $(VERL_VENV) .pytest_cache .ruff_cache

# Trainer benchmarks (benchmarks/README.md). The project's [trl] extra (the TRL callback, its tests)
# takes any TRL 1.x; the benchmarks pin theirs in their own venvs:
# .benchvenv-trl has the latest TRL (GRPOTrainer), .benchvenv-trl-ppo has TRL 1.12, the last
# release that ships trl.experimental.ppo.PPOTrainer. torch is pinned first, as for the project venv.
# BENCH_ARGS passes flags through, e.g. `make bench-learning BENCH_ARGS="--algo grpo"`.
TRL_VENV     := .benchvenv-trl
TRL_PPO_VENV := .benchvenv-trl-ppo
.PHONY: bench-trainer bench-learning

# One recipe for every benchmark venv: .benchvenv-NAME gets torch (pinned first), the project with
# its [train] extra, and benchmarks/requirements-NAME.txt.
.benchvenv-%/.installed: benchmarks/requirements-%.txt pyproject.toml
	$(PYTHON) -m venv .benchvenv-$*
	.benchvenv-$*/bin/pip install --quiet torch==2.13.0
	.benchvenv-$*/bin/pip install --quiet -e ".[train]" -r $<
	touch $@

bench-trainer: $(STAMP) $(TRL_VENV)/.installed $(TRL_PPO_VENV)/.installed
	$(PY) benchmarks/trainer_speed.py --trl-python $(TRL_VENV)/bin/python \
		--trl-ppo-python $(TRL_PPO_VENV)/bin/python $(BENCH_ARGS)

bench-learning: $(STAMP)
	$(PY) benchmarks/learning.py $(BENCH_ARGS)

# Follow-mode latency (benchmarks/README.md): a writer process, `rlcockpit import --follow` and
# `rlcockpit serve`; written -> store and written -> live stream. Project venv only.
.PHONY: bench-follow
bench-follow: $(STAMP)
	$(PY) benchmarks/follow.py $(BENCH_ARGS)

# What the TRL callback costs a GRPO step on the tiny model (benchmarks/README.md); TRL from the
# project's [trl] extra.
.PHONY: bench-trl-callback
bench-trl-callback: $(STAMP)
	$(PY) benchmarks/trl_callback.py $(BENCH_ARGS)

# The detection benchmark's faults injected into TRL GRPO runs: do the same detectors fire?
.PHONY: bench-trl-faults
bench-trl-faults: $(STAMP)
	$(PY) benchmarks/trl_faults.py $(BENCH_ARGS)

# The TRL callback on TRL's PPOTrainer: TRL 1.12 (the last release with a PPO trainer) in its own venv.
.PHONY: bench-trl-ppo
bench-trl-ppo: $(TRL_PPO_VENV)/.installed
	$(TRL_PPO_VENV)/bin/python benchmarks/trl_ppo_watch.py $(BENCH_ARGS)

# Telemetry and store benchmarks (benchmarks/README.md). MLflow, W&B and TensorBoard(X) live ONLY in
# .benchvenv-trackers, never in the project's extras; torch is pinned first, as for the project venv.
# The [train] extra lets benchmarks/telemetry.py time real tiny-world PPO steps. BENCH_ARGS passes
# flags through, e.g. `make bench-telemetry BENCH_ARGS=--token-arrays`.
TRACKERS_VENV := .benchvenv-trackers
BENCH_ARGS    ?=
.PHONY: bench-telemetry bench-store

bench-telemetry: $(TRACKERS_VENV)/.installed
	$(TRACKERS_VENV)/bin/python benchmarks/telemetry.py $(BENCH_ARGS)

bench-store: $(TRACKERS_VENV)/.installed
	$(TRACKERS_VENV)/bin/python benchmarks/store_queries.py $(BENCH_ARGS)

# Detection benchmark (benchmarks/README.md, docs/detection.md): every fault x 5 seeds of a split
# (SPLIT=calibration: seeds 0-4; SPLIT=evaluation: seeds 600-604, refused while the detector code has
# uncommitted changes) against 200-step healthy twins, and the peers on the same recorded streams.
# ~50-60 min on 2 workers; the runs stay in benchmarks/.cache/detection-<split>/ and --reuse resumes
# an interrupted split. The peers live ONLY in .benchvenv-peers. Run it niced on a shared machine.
PEERS_VENV := .benchvenv-peers
SPLIT ?= calibration
.PHONY: bench-detection

bench-detection: $(STAMP) $(PEERS_VENV)/.installed
	nice -n 10 $(PY) benchmarks/detection.py --split $(SPLIT) --workers 2 --out benchmarks/.cache/detection-$(SPLIT) \
		--reuse --peers-python $(PEERS_VENV)/bin/python $(BENCH_ARGS)

# The real-run corpus (benchmarks/README.md, docs/detection.md): 25 real runs read from
# ../shared/real_runs (never copied here), imported and diagnosed offline. BENCH_ARGS passes flags,
# e.g. `make bench-real-runs BENCH_ARGS=--docs`.
.PHONY: bench-real-runs
bench-real-runs: $(STAMP)
	nice -n 10 $(PY) benchmarks/real_runs.py $(BENCH_ARGS)

# The web cockpit's speed (benchmarks/ui.py: API side on a 100k-step x 1M-sample store, cached in
# benchmarks/.cache/; live step -> chart in Chromium) and a ticket's measured effect
# (benchmarks/control_effect.py). Both use the project's own venv and browser.
.PHONY: bench-ui bench-control
bench-ui: $(STAMP) $(BROWSER)
	$(PY) benchmarks/ui.py $(BENCH_ARGS)

bench-control: $(STAMP)
	$(PY) benchmarks/control_effect.py $(BENCH_ARGS)

# What the ops stack (Prometheus /metrics, JSON logs, traces) costs a training step, side by side
# (benchmarks/ops_export.py; BENCH_ARGS="--stack prometheus" for /metrics alone).
.PHONY: bench-ops
bench-ops: $(STAMP)
	$(PY) benchmarks/ops_export.py $(BENCH_ARGS)

# What 50 dashboard clients cost a training run on the same machine (benchmarks/server_load.py):
# the trainer's s/step with and without `rlcockpit serve` + clients, as a ratio within one run.
# ~2.5 min; BENCH_ARGS="--clients 30 --window-s 60" changes the load and the windows.
.PHONY: bench-server-load
bench-server-load: $(STAMP)
	$(PY) benchmarks/server_load.py $(BENCH_ARGS)
