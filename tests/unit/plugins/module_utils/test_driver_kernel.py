"""The next kernel's readings (_driver_kernel): the boot loader's default entry from GRUB's files, grubby's answer,
modinfo and dkms status for that kernel, and what driver_next_kernel does with them."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.driver import _driver_kernel as dk

# The shape grub-mkconfig writes on Ubuntu 24.04 (00_header's default block, 10_linux's first entry and its
# "Advanced options" submenu); the UUID and most lines shortened.
UBUNTU_CFG = """\
if [ -s $prefix/grubenv ]; then
  set have_grubenv=true
  load_env
fi
if [ "${next_entry}" ] ; then
   set default="${next_entry}"
   set next_entry=
   save_env next_entry
   set boot_once=true
else
   set default="%(default)s"
fi
function load_video {
  if [ x$feature_all_video_module = xy ]; then
    insmod all_video
  fi
}
menuentry 'Ubuntu' --class ubuntu --class gnu-linux $menuentry_id_option 'gnulinux-simple-1234' {
    recordfail
    linux    /boot/vmlinuz-6.8.0-90-generic root=UUID=1234 ro quiet
    initrd    /boot/initrd.img-6.8.0-90-generic
}
submenu 'Advanced options for Ubuntu' $menuentry_id_option 'gnulinux-advanced-1234' {
    menuentry 'Ubuntu, with Linux 6.8.0-90-generic' --class ubuntu $menuentry_id_option 'gnulinux-6.8.0-90-generic-advanced-1234' {
        linux    /boot/vmlinuz-6.8.0-90-generic root=UUID=1234 ro quiet
    }
    menuentry 'Ubuntu, with Linux 6.8.0-87-generic' --class ubuntu $menuentry_id_option 'gnulinux-6.8.0-87-generic-advanced-1234' {
        linux    /boot/vmlinuz-6.8.0-87-generic root=UUID=1234 ro quiet
    }
}
"""
GRUBENV = "# GRUB Environment Block\n%s\n" + "#" * 64


def cfg(default="0"):
    # grub-mkconfig indents with tabs
    return (UBUNTU_CFG % {"default": default}).replace("    ", "\t")


@pytest.mark.parametrize("default, env, kernel", [
    ("0", "", "6.8.0-90-generic"),                                          # GRUB_DEFAULT=0: the newest kernel
    ("1>1", "", "6.8.0-87-generic"),                                        # a path through the submenu
    ("gnulinux-advanced-1234>gnulinux-6.8.0-87-generic-advanced-1234", "", "6.8.0-87-generic"),   # ids
    ("Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-87-generic", "", "6.8.0-87-generic"),  # titles
    ("${saved_entry}", "saved_entry=1>1", "6.8.0-87-generic"),              # GRUB_DEFAULT=saved
    ("${saved_entry}", "", "6.8.0-90-generic"),                             # nothing saved yet: entry 0
    ("0", "next_entry=1>1\nsaved_entry=0", "6.8.0-87-generic"),             # grub-reboot's one-time entry wins
])
def test_the_default_entry_is_the_one_grub_boots(default, env, kernel):
    found, how = dk.next_from_grub(GRUBENV % env, cfg(default))
    assert found == kernel, how


@pytest.mark.parametrize("default, why", [
    ("7", "names no entry"),
    ("1", "is a submenu"),
    ("gnulinux-nothing", "names no entry"),
])
def test_a_default_that_boots_no_kernel_is_unknown_and_says_why(default, why):
    found, how = dk.next_from_grub(None, cfg(default))
    assert found is None and why in how


def test_without_boot_loader_files_the_next_kernel_is_unknown_never_guessed():
    # a machine booted by its hypervisor straight into a kernel (no /boot/grub, no grubby): what the GPU host of
    # docs/readings/kernel-readings-real-gpu.md is
    assert dk.next_from_grub(None, None) == (None, "no grub.cfg to read the menu from")
    found, how = dk.next_from_grub(None, None, 'GRUB_DEFAULT="saved"\n')
    assert found is None and "GRUB_DEFAULT=saved" in how


def test_bls_entries_by_saved_id_and_unknown_otherwise():
    bls_cfg = "load_env\nset default=\"${saved_entry}\"\nblscfg\n"
    entries = {"abc-5.14.0-427.el9.x86_64": "title RHEL\nversion 5.14.0-427.el9.x86_64\n"
                                            "linux /vmlinuz-5.14.0-427.el9.x86_64\n"}
    assert dk.next_from_grub("saved_entry=abc-5.14.0-427.el9.x86_64\n", bls_cfg, None, entries)[0] == \
        "5.14.0-427.el9.x86_64"
    found, how = dk.next_from_grub("", bls_cfg, None, entries)
    assert found is None and "grubby" in how


def test_unbalanced_grub_cfg_is_an_error_naming_the_line():
    with pytest.raises(dk.KernelReadError, match="line 1"):
        dk.parse_grub_cfg("}\n")
    with pytest.raises(dk.KernelReadError, match="ends inside"):
        dk.parse_grub_cfg("menuentry 'x' {\n linux /boot/vmlinuz-1\n")


def test_grubby_is_asked_on_the_real_root_only(tmp_path):
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, "/boot/vmlinuz-5.14.0-503.el9.x86_64\n", ""
    assert dk.next_kernel(run, "/", "/usr/sbin/grubby")[0] == "5.14.0-503.el9.x86_64"
    assert calls == [["/usr/sbin/grubby", "--default-kernel"]]
    assert dk.next_kernel(run, str(tmp_path), "/usr/sbin/grubby")[0] is None      # a lab root: its files only
    assert len(calls) == 1
    fail = dk.next_kernel(lambda argv: (1, "", "grubby: no default kernel"), "/", "/usr/sbin/grubby")
    assert fail == (None, "grubby --default-kernel exited 1: grubby: no default kernel")


def test_dkms_status_both_formats():
    text = ("nvidia/580.95.05, 6.8.0-87-generic, x86_64: installed\n"
            "nvidia, 570.195.03, 6.8.0-90-generic, x86_64: installed (WARNING! Diff between built and installed)\n"
            "nvidia/580.95.05: added\n"
            "Error! something dkms said\n")
    assert dk.parse_dkms_status(text) == [
        {"module": "nvidia", "version": "580.95.05", "kernel": "6.8.0-87-generic", "arch": "x86_64",
         "state": "installed"},
        {"module": "nvidia", "version": "570.195.03", "kernel": "6.8.0-90-generic", "arch": "x86_64",
         "state": "installed"},
        {"module": "nvidia", "version": "580.95.05", "kernel": None, "arch": None, "state": "added"}]


PIN = {"version": "580.95.05", "branch": "580", "flavour": "open"}


def test_modules_verdict():
    absent = dk.modules_verdict("6.8.0-90-generic", {"error": "modinfo: ERROR: Module nvidia not found."}, [], {}, PIN)
    assert not absent["present"] and "Module nvidia not found" in absent["detail"]
    ok = dk.modules_verdict("6.8.0-90-generic", {"version": "580.95.05", "license": "Dual MIT/GPL"},
                            dk.parse_dkms_status("nvidia/580.95.05, 6.8.0-90-generic, x86_64: installed"), {}, PIN)
    assert ok["present"] and ok["flavour"] == "open" and ok["how"].startswith("DKMS")
    wrong = dk.modules_verdict("6.8.0-90-generic", {"version": "580.95.05", "license": "NVIDIA"}, None, {}, PIN)
    assert not wrong["present"] and "proprietary modules, open declared" in wrong["detail"]
    old = dk.modules_verdict("k", {"version": "570.195.03", "license": "Dual MIT/GPL"}, None, {}, PIN)
    assert not old["present"] and "version 570.195.03, 580.95.05 declared" in old["detail"]
    branch = dk.modules_verdict("k", {"version": "580.82.07", "license": "Dual MIT/GPL"}, None,
                                {"linux-modules-nvidia-580-server-open-k": "1"}, dict(PIN, version=""))
    assert branch["present"] and "precompiled package" in branch["how"]


def readings(present):
    return {"running": "6.8.0-87-generic", "next": "6.8.0-90-generic", "next_source": "grub",
            "next_modules": {"present": present, "detail": "no nvidia module for kernel 6.8.0-90-generic"}}


def test_plan_ensure_refuse_ignore():
    pre = ["linux-modules-nvidia-580-server-open-6.8.0-90-generic"]
    assert dk.plan(readings(True), "ensure", "dkms", [], "580.95.05")["action"] == "none"
    build = dk.plan(readings(False), "ensure", "dkms", [], "580.95.05")
    assert build["action"] == "build" and build["packages"] == ["linux-headers-6.8.0-90-generic"]
    assert build["dkms"] == {"module": "nvidia", "version": "580.95.05", "kernel": "6.8.0-90-generic"}
    install = dk.plan(readings(False), "ensure", "precompiled", pre, "580.95.05")
    assert install["action"] == "install" and install["packages"] == pre
    refuse = dk.plan(readings(False), "refuse", "precompiled", pre, "580.95.05")
    assert refuse["action"] == "refuse"
    assert "kernel 6.8.0-90-generic" in refuse["msg"] and "install %s" % pre[0] in refuse["msg"]
    assert "not rebooting" in refuse["msg"]
    assert dk.plan(readings(False), "ignore", "dkms", [], "580.95.05")["action"] == "none"
    unknown = dk.plan({"running": "r", "next": None, "next_source": "no grub.cfg to read the menu from"},
                      "refuse", "dkms", [], "580.95.05")
    assert unknown["action"] == "unknown" and "no grub.cfg" in unknown["msg"]
    with pytest.raises(dk.KernelReadError, match="not one of ensure, refuse, ignore"):
        dk.plan(readings(True), "always", "dkms", [], "580.95.05")


def test_read_under_a_root(tmp_path):
    (tmp_path / "boot/grub").mkdir(parents=True)
    (tmp_path / "boot/grub/grub.cfg").write_text(cfg("0"))
    answers = {("modinfo", "-k", "6.8.0-90-generic", "-F", "version", "nvidia"): (1, "", "modinfo: ERROR: Module "
                                                                                  "nvidia not found.\n"),
               ("dkms", "status"): (0, "nvidia/580.95.05, 6.8.0-87-generic, x86_64: installed\n", "")}
    got = dk.read(lambda argv: answers[tuple(argv)], str(tmp_path), "6.8.0-87-generic", PIN,
                  {"modinfo": ["modinfo"], "dkms": ["dkms"]})
    assert got["next"] == "6.8.0-90-generic" and got["next_differs"]
    assert got["next_modules"]["present"] is False
    assert "Module nvidia not found" in got["next_modules"]["detail"]
