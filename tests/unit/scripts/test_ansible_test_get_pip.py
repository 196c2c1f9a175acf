"""scripts/ansible-test-get-pip.py: the stand-in for get-pip.py that `make sanity` gives ansible-test. A new
environment gets, in one pip run from the Python's bundled pip wheel, what ensurepip and then `pip install` of
ansible-test's packages gave it."""
import importlib.util
import os
import subprocess
import sys
import venv

from tests.support.ansible_run import ROOT

_SPEC = importlib.util.spec_from_file_location("ansible_test_get_pip",
                                               os.path.join(ROOT, "scripts", "ansible-test-get-pip.py"))
get_pip = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(get_pip)

PIP = "/bundled/pip-24.2-py3-none-any.whl"
SETUPTOOLS = "/bundled/setuptools-65.5.0-py3-none-any.whl"


def _packages(command):
    """The command's words after `install --quiet` and the optional --cert pair."""
    assert command[0] == sys.executable and command[1] == os.path.join(PIP, "pip"), command
    assert command[2:4] == ["install", "--quiet"], command
    rest = command[4:]
    if rest[:1] == ["--cert"]:
        rest = rest[2:]
    return rest


def test_the_pip_ansible_test_asks_for_is_installed_by_the_bundled_pip_in_one_run():
    # ansible-core 2.21's request on Python 3.13, whose ensurepip bundles pip alone
    command = get_pip.install_command(["--disable-pip-version-check", "pip==25.2", "--no-setuptools", "--no-wheel"],
                                      {"pip": PIP})
    assert _packages(command) == ["--disable-pip-version-check", "pip==25.2"]


def test_setuptools_that_ensurepip_would_install_is_installed_with_it_unless_ansible_test_asks_for_its_own():
    # Python 3.11 (ensurepip bundles setuptools too): the environment ends as ensurepip + pip install left it
    command = get_pip.install_command(["--disable-pip-version-check", "pip==24.2", "--no-setuptools"],
                                      {"pip": PIP, "setuptools": SETUPTOOLS})
    assert _packages(command) == [SETUPTOOLS, "--disable-pip-version-check", "pip==24.2"]
    # ansible-core 2.16 on Python 3.10 asks for its own setuptools and wheel: the bundled setuptools is not added
    command = get_pip.install_command(["pip==23.1.2", "setuptools==67.7.2", "wheel==0.37.1"],
                                      {"pip": PIP, "setuptools": SETUPTOOLS})
    assert _packages(command) == ["pip==23.1.2", "setuptools==67.7.2", "wheel==0.37.1"]


def test_without_a_pip_package_asked_the_bundled_one_is_installed():
    assert _packages(get_pip.install_command([], {"pip": PIP})) == [PIP]
    assert _packages(get_pip.install_command(["--disable-pip-version-check"], {"pip": PIP})) == [
        "--disable-pip-version-check", PIP]


def test_a_python_without_a_bundled_pip_wheel_is_left_to_ensurepip():
    assert get_pip.install_command(["pip==25.2"], {}) is None
    assert get_pip.install_command(["pip==25.2"], {"setuptools": SETUPTOOLS}) is None


def test_this_pythons_bundled_wheels_install_into_a_new_environment(tmp_path):
    """A real run, offline: with no package asked, the stand-in installs the bundled wheels themselves (files, no
    index), as ensurepip would; the new environment's pip is the bundled one."""
    wheels = get_pip.bundled_wheels()
    assert "pip" in wheels, "this Python bundles no pip wheel for ensurepip: %s" % wheels
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(str(env_dir))
    python = str(env_dir / "bin" / "python")
    subprocess.run([python, os.path.join(ROOT, "scripts", "ansible-test-get-pip.py"), "--no-setuptools"],
                   check=True, capture_output=True, timeout=300)
    shown = subprocess.run([python, "-m", "pip", "--version"], check=True, capture_output=True, text=True).stdout
    bundled = os.path.basename(wheels["pip"]).split("-")[1]
    assert shown.startswith("pip %s from %s" % (bundled, env_dir)), shown
