"""site.yml and the next kernel (driver_next_kernel, driver_kernel_hold; docs/driver.md "The next kernel"): lab nodes
whose scratch roots are throwaway apt/dpkg roots (tests/support/driver_rig.py), each with a newer kernel installed and
made the boot loader's default (R/boot/grub/grub.cfg, entry 0) and no NVIDIA modules for it; nouveau loaded, so the
driver's first install needs the one guarded reboot. The simulated reboot boots the boot loader's default kernel
(_simulator_host.boot_loader_kernel); DKMS is tests/support/dkms_standin.py.

What a user would notice: check mode says what would be built for the next kernel and changes nothing; ensure builds
the modules for the next kernel (its headers installed by apt) before the reboot, and the node comes back on the new
kernel with the driver loaded; refuse stops before the reboot naming the kernel and the fix, and the node is not
rebooted; a held kernel (driver_kernel_hold) is kept back by a package transaction that would upgrade it; a re-run
changes nothing."""
import os
import subprocess

import pytest

from tests.integration.test_site_driver import driver_site, loaded
from tests.support import apt_rig, driver_files, driver_rig

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    bool(apt_rig.missing_tools()), reason="needs Debian's %s" % ", ".join(apt_rig.missing_tools()))]

NEW, KERNEL, NEXT = driver_rig.NEW, driver_rig.KERNEL, driver_rig.NEXT_KERNEL
GRUB_CFG = """set default="0"
menuentry 'Ubuntu' --class ubuntu $menuentry_id_option 'gnulinux-simple-lab' {
    linux    /boot/vmlinuz-%(next)s root=UUID=lab ro
}
submenu 'Advanced options for Ubuntu' $menuentry_id_option 'gnulinux-advanced-lab' {
    menuentry 'Ubuntu, with Linux %(next)s' $menuentry_id_option 'gnulinux-%(next)s-advanced-lab' {
        linux    /boot/vmlinuz-%(next)s root=UUID=lab ro
    }
    menuentry 'Ubuntu, with Linux %(running)s' $menuentry_id_option 'gnulinux-%(running)s-advanced-lab' {
        linux    /boot/vmlinuz-%(running)s root=UUID=lab ro
    }
}
"""


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    yield from driver_rig.module_rig(tmp_path_factory)


def newer_kernel_installed(root):
    """An upgrade's result: kernel NEXT installed (its own modules directory) and the boot loader's default."""
    driver_files.write(root, "boot/grub/grub.cfg", (GRUB_CFG % {"next": NEXT, "running": KERNEL}).replace("    ", "\t"))
    driver_files.write(root, "lib/modules/%s/modules.dep" % NEXT, "")


def apt(root, *args):
    return subprocess.run(["apt-get", "-q"] + list(args), env=dict(os.environ, **root.env), check=False,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True).stdout


def test_next_kernel_ensure_refuse_and_hold(tmp_path, rig):
    site, args = driver_site(tmp_path, rig, {
        "drv-kernel-ensure": ("driver=none,nouveau", {"driver_kernel_hold": True}),
        "drv-kernel-refuse": ("driver=none,nouveau", {"driver_next_kernel": "refuse"})})
    roots = dict((n, str(site.state / n)) for n in ("drv-kernel-ensure", "drv-kernel-refuse"))
    for root in roots.values():
        newer_kernel_installed(root)
    ensure = apt_rig.Root(roots["drv-kernel-ensure"])
    ensure.dpkg_install([rig.debs[(driver_rig.KERNEL_META, driver_rig.KERNEL_META_VERSIONS[0])]])

    res = site.run(check=True, args=args + ("-e", "gpuops_max_fail_percentage=100"))
    said = " ".join(str(t.get("msg")) for t in res.task("Report the next kernel's modules a real run would install",
                                                        "drv-kernel-ensure"))
    assert "kernel %s: build them with DKMS (install linux-headers-%s, then dkms install nvidia/%s -k %s)" % (
        NEXT, NEXT, NEW, NEXT) in said, said
    for root in roots.values():
        assert not os.path.exists(os.path.join(root, "lib/modules", NEXT, "updates"))   # nothing built
        assert driver_files.running_kernel(root) == KERNEL
    assert driver_rig.installed(ensure, ["linux-headers-%s" % NEXT]) == {}
    boots = dict((n, site.gpus(n)["boot_id"]) for n in roots)

    res = site.run(args=args + ("-e", "gpuops_max_fail_percentage=100"))
    # ensure: the headers installed and the modules built for the next kernel before the one reboot; the node runs
    # the new kernel with the driver loaded from that build
    assert site.gpus("drv-kernel-ensure")["boot_id"] == boots["drv-kernel-ensure"] + 1
    root = roots["drv-kernel-ensure"]
    assert driver_files.running_kernel(root) == NEXT
    assert loaded(site, "drv-kernel-ensure") == NEW
    assert driver_files.find_module_file(root, "nvidia", NEXT).endswith("/%s/updates/dkms/nvidia.ko" % NEXT)
    assert "linux-headers-%s" % NEXT in driver_rig.installed(ensure)
    # refuse: stopped before the reboot, the kernel and the fix named; not rebooted, nothing built for NEXT
    failed = [t for t in res.task("Refuse the reboot (the next kernel has no NVIDIA modules", "drv-kernel-refuse")
              if t.get("failed")]
    assert failed and "the next boot runs kernel %s" % NEXT in failed[0]["msg"], res
    assert "dkms install nvidia/%s -k %s" % (NEW, NEXT) in failed[0]["msg"]
    assert site.gpus("drv-kernel-refuse")["boot_id"] == boots["drv-kernel-refuse"]
    assert driver_files.running_kernel(roots["drv-kernel-refuse"]) == KERNEL
    assert not os.path.exists(os.path.join(roots["drv-kernel-refuse"], "lib/modules", NEXT, "updates"))

    # the kernel hold: the metapackage is held, and a transaction that would upgrade it keeps it back
    meta = driver_rig.KERNEL_META
    assert driver_rig.installed(ensure, [meta])[meta][1].startswith("hold ")
    upgrade = apt(ensure, "-y", "dist-upgrade")
    assert "kept back" in upgrade and meta in upgrade.split("kept back", 1)[1], upgrade
    assert driver_rig.installed(ensure, [meta])[meta][0] == driver_rig.KERNEL_META_VERSIONS[0]

    again = site.run(args=args + ("-e", "gpuops_max_fail_percentage=100"))
    assert again.changed("drv-kernel-ensure") == 0, again
    assert site.gpus("drv-kernel-ensure")["boot_id"] == boots["drv-kernel-ensure"] + 1
