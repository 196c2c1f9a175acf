"""The collection builds into a tarball that installs, and its module docs render."""
import os
import subprocess
import tarfile

from tests.support.ansible_run import BIN, ROOT, ansible_env


def test_build_install_and_doc(tmp_path):
    out = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--force",
                          "--output-path", str(tmp_path), ROOT], env=ansible_env(), cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert out.returncode == 0, out.stdout
    tarball = [f for f in os.listdir(str(tmp_path)) if f.endswith(".tar.gz")]
    assert tarball == ["gpuops-nvidia-0.1.0.tar.gz"]
    names = tarfile.open(str(tmp_path / tarball[0])).getnames()
    assert "plugins/modules/gpu_info.py" in names
    assert not [n for n in names if n.startswith((".venv", ".collections", "tools/", "lab-state"))]

    dest = tmp_path / "installed"
    out = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--force", "-p", str(dest),
                          str(tmp_path / tarball[0])], env=ansible_env(), cwd=str(tmp_path),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert out.returncode == 0, out.stdout
    assert (dest / "ansible_collections" / "gpuops" / "nvidia" / "plugins" / "modules" / "gpu_info.py").exists()

    env = ansible_env({"ANSIBLE_COLLECTIONS_PATH": str(dest)})
    doc = subprocess.run([os.path.join(BIN, "ansible-doc", ), "gpuops.nvidia.gpu_info"], env=env,
                         cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert doc.returncode == 0, doc.stdout
    assert "GPUOPS_SIMULATED_GPUS" in doc.stdout and str(dest) in doc.stdout
