"""Find another Python by its version, the way scripts/setup.d/compat.sh does: pythonX.Y on PATH, else the versions
pyenv knows (`pyenv root`, or PYENV_ROOT), each asked for its own version, since a pyenv shim exists for every
installed version but runs only the selected ones. No path of any one machine is assumed."""
import glob
import os
import shutil
import subprocess


def _version_of(python):
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _pyenv_roots():
    roots = [os.environ.get("PYENV_ROOT")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        out = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=30, check=False)
        roots.append(out.stdout.strip() if out.returncode == 0 else None)
    return [root for root in dict.fromkeys(roots) if root]


def find_python(want):
    """The path of a working python``want`` (e.g. "3.9"), or None."""
    candidates = [shutil.which("python" + want)]
    for root in _pyenv_roots():
        candidates.extend(sorted(glob.glob(os.path.join(root, "versions", want + ".*", "bin", "python" + want))))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK) and _version_of(candidate) == want:
            return candidate
    return None
