# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The character-device views of a simulated node's loaded NVIDIA modules (PRIVATE to gpuops.nvidia): R/proc/devices and
R/proc/driver/nvidia-caps/mig-minors, which nvidia-ctk's ``system create-dev-char-symlinks --create-all`` reads (issue
51). No imports and no I/O, so that the simulator (_simulator_host) and the lab's kmod stand-in
(tests/support/driver_files.py, which loads this file by its path) render the same text.

Facts: the majors are those of the real H100 host of tests/fixtures/nvidia-ctk/h100-machine.txt (driver 580: nvidia 195,
fixed; nvidia-uvm 238 and nvidia-caps 241, dynamic); the name ``nvidia`` is the driver's since 550 (``nvidia-frontend``
before: NVIDIA/nvidia-container-toolkit v1.20.0 internal/info/proc/devices/devices.go). mig-minors is written by the
nvidia module whether MIG is on or not, in the layout of that host's file (4322 lines): ``config 1``, ``monitor 2``,
then for GPU 0..31 and GPU instance 0..14 its access minor followed by compute instances 0..7.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

PROC_DEVICES = "proc/devices"
MIG_MINORS = "proc/driver/nvidia-caps/mig-minors"
# (module that registers it, major, name in /proc/devices)
# nvidia-caps-imex-channels: the IMEX channels the nvidia module registers with NVreg_ImexChannelCount minors (2048 by
# default; NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-caps-imex.c, alloc_chrdev_region, so its major is
# dynamic: 234 here is this simulator's choice, and the collection reads the number from the file as NVIDIA's DRA
# driver does). A simulated node's driver registers it always (NVreg_ImexChannelCount is not modelled).
MAJORS = (("nvidia", 195, "nvidia"), ("nvidia_uvm", 238, "nvidia-uvm"), ("nvidia", 241, "nvidia-caps"),
          ("nvidia", 234, "nvidia-caps-imex-channels"))
_OTHERS = ((1, "mem"), (4, "/dev/vc/0"), (5, "/dev/tty"), (10, "misc"))


def proc_devices_text(loaded):
    """/proc/devices for these loaded module names (a kernel's own character devices, the NVIDIA ones sorted by major
    as the kernel lists them, and its block devices)."""
    rows = list(_OTHERS) + [(major, name) for module, major, name in MAJORS if module in loaded]
    lines = ["Character devices:"] + ["%3d %s" % row for row in sorted(rows)]
    return "\n".join(lines) + "\n\nBlock devices:\n  8 sd\n259 blkext\n"


def mig_minors_text(gpus=32, gpu_instances=15, compute_instances=8):
    lines = ["config 1", "monitor 2"]
    per_gi = 1 + compute_instances
    for gpu in range(gpus):
        for gi in range(gpu_instances):
            base = 3 + (gpu * gpu_instances + gi) * per_gi
            lines.append("gpu%d/gi%d/access %d" % (gpu, gi, base))
            lines.extend("gpu%d/gi%d/ci%d/access %d" % (gpu, gi, ci, base + 1 + ci) for ci in range(compute_instances))
    return "\n".join(lines) + "\n"


def files(loaded):
    """{relative path: text, or None to remove} of the views for these loaded module names."""
    return {PROC_DEVICES: proc_devices_text(loaded),
            MIG_MINORS: mig_minors_text() if "nvidia" in loaded else None}
