# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for get-pip.py, used only by `make sanity` (scripts/sanity.sh). Not part of the collection's runtime.

Why it exists: `ansible-test sanity --requirements` creates a virtual environment per test and bootstraps pip in it
by running https://ci-files.testing.ansible.com/ansible-test/get-pip-<version>.py. That host cannot be reached from
this project's build network, and ansible-test only skips the download when it finds a cached copy at
~/.ansible/test/cache/get_pip_<version>.py. scripts/sanity.sh copies this file there (only where no real get-pip.py
is cached) so the sanity run works offline from ci-files.

What it does instead: runs pip from the wheel the Python bundles for ensurepip and installs, in that one run, the
packages ansible-test asked for (pip==<version> and friends, from the package index pip is configured for) and what
ensurepip would have installed besides pip (setuptools, bundled before Python 3.12) where ansible-test did not ask for
it: the environment ends with what ensurepip followed by `pip install` gave it, with one install instead of two
(ensurepip installed the bundled pip, which then replaced itself: 1.7-3.7 CPU s more for each new environment, some
30 of them when make test runs in a HOME without them; issue 49). A Python without a bundled pip wheel is
bootstrapped with ensurepip as before. It drops --no-setuptools/--no-wheel (get-pip.py options that `pip install`
does not know). ansible-test's environments do not read the machine's pip configuration, so where the system CA
bundle exists it is passed with --cert (needed behind TLS-intercepting proxies).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ensurepip
import os
import re
import subprocess
import sys

CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
GET_PIP_ONLY_OPTIONS = ("--no-setuptools", "--no-wheel")


def bundled_wheels():
    """{project: wheel path} of the wheels ensurepip bundles with this Python (pip; setuptools before 3.12)."""
    folder = os.path.join(os.path.dirname(ensurepip.__file__), "_bundled")
    if not os.path.isdir(folder):
        return {}
    return dict((name.split("-", 1)[0], os.path.join(folder, name)) for name in sorted(os.listdir(folder))
                if name.endswith(".whl"))


def install_command(argv, wheels):
    """The one pip command that gives a new environment what ensurepip and then `pip install argv` would (pip run
    from its bundled wheel), or None where this Python bundles no pip wheel."""
    if "pip" not in wheels:
        return None
    asked = _asked(argv)
    named = set(re.split(r"[<>=!~ \[;]", arg, maxsplit=1)[0].lower() for arg in asked if not arg.startswith("-"))
    bundled = [path for project, path in sorted(wheels.items()) if project.lower() not in named and project != "pip"]
    own_pip = [] if "pip" in named else [wheels["pip"]]
    pip = [sys.executable, os.path.join(wheels["pip"], "pip"), "install", "--quiet"]
    return pip + _cert() + bundled + asked + own_pip


def _asked(argv):
    """ansible-test's arguments without the get-pip.py options that `pip install` does not know."""
    return [arg for arg in argv if arg not in GET_PIP_ONLY_OPTIONS]


def _cert():
    return ["--cert", CA_BUNDLE] if os.path.exists(CA_BUNDLE) else []


def main(argv):
    command = install_command(argv, bundled_wheels())
    if command is not None:
        subprocess.run(command, check=True)
        return
    ensurepip.bootstrap(upgrade=True)
    args = _asked(argv)
    if args:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet"] + _cert() + args, check=True)


if __name__ == "__main__":
    main(sys.argv[1:])
