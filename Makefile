# gpuops.nvidia — the two commands a new user needs are `make lab` and `make test`.
# Both install what they need first (into .venv and tools/ inside this repository).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(BIN):$(CURDIR)/tools/bin:$(PATH)

.PHONY: setup setup-dev lab test pytest check sanity lint changelog-lint publish-check paths-check docs unit bench build clean molecule compat
# Two tiers (scripts/setup.sh): `setup` is what `make lab` needs and nothing more; `setup-dev` adds the tests' and
# quality gates' tools (pytest, molecule, ansible-lint, the other ansible-core versions, the publishing tools, ...).
setup: .setup-done

.setup-done: requirements-lab.txt requirements.txt scripts/setup.sh $(wildcard scripts/setup.d/*.sh) $(wildcard scripts/lib/*.sh)
	PYTHON=$(PYTHON) bash scripts/setup.sh lab
	touch $@

setup-dev: .setup-dev-done

# The dev tier installs everything the lab tier does (requirements-dev.txt includes requirements-lab.txt; the lab
# pieces run too) in one run, so that the dev pieces' installs start with it instead of after the lab tier's.
.setup-dev-done: requirements-lab.txt requirements.txt scripts/setup.sh $(wildcard scripts/setup.d/*.sh) $(wildcard scripts/lib/*.sh) \
		requirements-dev.txt requirements-publish.txt $(wildcard requirements-compat-*.txt)
	PYTHON=$(PYTHON) bash scripts/setup.sh dev
	touch .setup-done $@

# The main job: site.yml against the simulated `lab` inventory. With ARGS='-e gpuops_device_plugin_provider=gpu_operator'
# (or =chart) and no cluster given, the run gets a FAKE cluster: a FAKE GPU Operator, or the fixture chart with FAKE
# DaemonSet pods (tests/support/lab_cluster.py).
LAB_CLUSTER := $(if $(findstring gpuops_device_plugin_provider=,$(ARGS)),$(BIN)/python -m tests.support.lab_cluster --)
lab: setup
	$(LAB_CLUSTER) $(BIN)/ansible-playbook -i inventories/lab site.yml $(ARGS)

# The whole test suite: the quality gates (`make check`), the oldest and newest ansible-core of requires_ansible
# (`make compat`) and every unit and integration test on the main one (pytest), the gates and compat running beside
# pytest (scripts/test.sh: their output in build/test-logs/, one line each after pytest's summary says how they ended).
# `make pytest` runs the tests alone, `make check` the gates alone.
test: setup-dev
	bash scripts/test.sh $(ARGS)

pytest: setup-dev
	$(BIN)/python -m pytest -n 2 --dist worksteal $(ARGS)

# Quality gates (issue 7): ansible-test sanity, ansible-lint's production profile, changelog fragments, and what
# Galaxy and the Ansible docs toolchain say of the built collection (scripts/publish_check.py).
check: paths-check sanity lint changelog-lint publish-check

# No tracked file names a directory of the machine it was written on (home, workspace, mirror or build folders):
# sources are named as public repositories at a tag or commit, instructions use relative or temporary paths.
paths-check: setup-dev
	$(BIN)/python scripts/paths_check.py

# ansible-test sanity on a copy laid out as ansible_collections/gpuops/nvidia (see scripts/sanity.sh).
# One test: make sanity SANITY_ARGS="--test pylint"
sanity: setup-dev
	bash scripts/sanity.sh $(SANITY_ARGS)

lint: setup-dev
	$(BIN)/ansible-lint $(LINT_ARGS)

changelog-lint: setup-dev
	$(BIN)/antsibull-changelog lint
	$(BIN)/antsibull-changelog lint-changelog-yaml changelogs/changelog.yaml

# galaxy-importer on the built artifact, antsibull-docs lint-collection-docs, and the docs site (tools/publish/).
publish-check: setup-dev
	$(BIN)/python scripts/publish_check.py check

# The documentation site (antsibull-docs + Sphinx) into build/docs/html (open build/docs/html/index.html).
docs: setup-dev
	$(BIN)/python scripts/publish_check.py docs

# The other ansible-core versions of meta/runtime.yml's requires_ansible (requirements-compat-<version>.txt: 2.16, the
# oldest, and 2.21, the newest), each from its own virtualenv tools/compat/<version>/: ansible-test sanity, the lab's
# converge and re-run (changed=0 on every node), the molecule default scenario (scripts/compat.py). The two versions
# run side by side: about 7 minutes on 2 cores from a clean HOME, 5 with ansible-test's sanity venvs cached (beside
# pytest, niced, they take as long as pytest leaves them CPU: one deadline for the run, --deadline, guards a hang).
# One version or some steps: make compat COMPAT_ARGS='2.16 --steps lab,molecule'
compat: setup-dev
	$(BIN)/python scripts/compat.py $(COMPAT_ARGS)

# The molecule default scenario (simulated lab: converge, idempotence, verify); about 1 minute.
molecule: setup-dev
	cd extensions && ../$(BIN)/molecule test -s default

bench: setup-dev
	$(BIN)/python bench/run.py $(ARGS)

build: setup
	$(BIN)/ansible-galaxy collection build --force --output-path build .

clean:
	rm -rf $(VENV) .collections tools .setup-done .setup-dev-done build lab-state
