# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for get-pip.py, used only by `make sanity` (scripts/sanity.sh). Not part of the collection's runtime.

Why it exists: `ansible-test sanity --requirements` creates a virtual environment per test and bootstraps pip in it
by running https://ci-files.testing.ansible.com/ansible-test/get-pip-<version>.py. That host cannot be reached from
this project's build network, and ansible-test only skips the download when it finds a cached copy at
~/.ansible/test/cache/get_pip_<version>.py. scripts/sanity.sh copies this file there (only where no real get-pip.py
is cached) so the sanity run works offline from ci-files.

What it does instead: bootstrap pip from the Python's own bundled wheel (ensurepip), then `pip install` the
packages ansible-test asked for (pip==<version> and friends), from the package index pip is configured for.
It drops --no-setuptools/--no-wheel (get-pip.py options that `pip install` does not know). ansible-test's
environments do not read the machine's pip configuration, so where the system CA bundle exists it is passed
with --cert (needed behind TLS-intercepting proxies).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ensurepip
import os
import subprocess
import sys

CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
GET_PIP_ONLY_OPTIONS = ("--no-setuptools", "--no-wheel")


def main(argv):
    ensurepip.bootstrap(upgrade=True)
    args = [arg for arg in argv if arg not in GET_PIP_ONLY_OPTIONS]
    if not args:
        return
    if os.path.exists(CA_BUNDLE):
        args = ["--cert", CA_BUNDLE] + args
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet"] + args, check=True)


if __name__ == "__main__":
    main(sys.argv[1:])
