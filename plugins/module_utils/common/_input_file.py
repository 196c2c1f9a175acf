# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading a file a user named in a module option, safely: only a regular file, only up to a size limit, only
UTF-8 text, and YAML only up to a nesting depth and an expanded size.

Without these checks, a path to a FIFO blocks the module for ever (open() waits for a writer), a device such as
/dev/zero or a huge file is read until memory runs out, bytes that are not UTF-8 end in a UnicodeDecodeError
traceback, and YAML nested tens of thousands deep, or whose aliases expand exponentially ("billion laughs"),
exhausts Python's stack or the time of whoever walks it. Every problem is an InputFileError whose message names
the option, the path, what is wrong and what is valid.

The size limit is this collection's choice, not a limit of the formats: the files read here (mig-parted configs,
containerd configs, kubeconfigs) are kilobytes; 16 MiB leaves room for any real one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat

MAX_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 100         # nesting of YAML/JSON collections; real configs nest fewer than 10 deep
MAX_VALUES = 100000     # scalars and collections after aliases are expanded


class InputFileError(ValueError):
    """A file named by an option cannot be used; the message says why."""


def _kind(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def check_regular_file(path, option, limit=MAX_BYTES):
    """Raise InputFileError unless ``path`` names an existing regular file of at most ``limit`` bytes (symlinks
    are followed). Returns its os.stat result."""
    if not isinstance(path, str) or not path:
        raise InputFileError("%s must be a path to a file, got %r" % (option, path))
    if "\x00" in path:
        raise InputFileError("%s %r contains a NUL character; give the path of a regular file" % (option, path))
    try:
        st = os.stat(path)
    except (IOError, OSError) as exc:
        raise InputFileError("cannot read %s %s: %s" % (option, path, exc.strerror or exc))
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError("%s %s is %s; it must be a regular file" % (option, path, _kind(st.st_mode)))
    if st.st_size > limit:
        raise InputFileError("%s %s is %d bytes; files larger than %d bytes (%d MiB) are refused"
                             % (option, path, st.st_size, limit, limit // (1024 * 1024)))
    return st


def read_bytes(path, option, limit=MAX_BYTES):
    """The bytes of a regular file of at most ``limit`` bytes (never blocks on a FIFO, never reads past limit)."""
    check_regular_file(path, option, limit)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except (IOError, OSError) as exc:
        raise InputFileError("cannot read %s %s: %s" % (option, path, exc.strerror or exc))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):      # replaced between the stat and the open
            raise InputFileError("%s %s is %s; it must be a regular file" % (option, path, _kind(mode)))
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except (IOError, OSError) as exc:
        raise InputFileError("cannot read %s %s: %s" % (option, path, exc.strerror or exc))
    finally:
        os.close(fd)
    if size > limit:
        raise InputFileError("%s %s is larger than %d bytes (%d MiB): refused"
                             % (option, path, limit, limit // (1024 * 1024)))
    return b"".join(chunks)


def read_text(path, option, limit=MAX_BYTES):
    """The UTF-8 text of a regular file of at most ``limit`` bytes."""
    data = read_bytes(path, option, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError("%s %s is not UTF-8 text (byte 0x%02x at offset %d); give a text file"
                             % (option, path, bytearray(data[int(exc.start):int(exc.start) + 1])[0], exc.start))


def check_shape(value, what, max_depth=MAX_DEPTH, max_values=MAX_VALUES):
    """Raise InputFileError when ``value`` (parsed YAML/JSON) nests deeper than ``max_depth`` or holds more than
    ``max_values`` values once aliases are expanded. Stops counting at the limit: never walks more."""
    count = [0]
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        count[0] += 1
        if count[0] > max_values:
            raise InputFileError("%s holds more than %d values (with YAML aliases expanded); refused" % (
                what, max_values))
        if isinstance(item, dict):
            children = list(item.keys()) + list(item.values())
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > max_depth:
            raise InputFileError("%s nests more than %d levels deep; refused" % (what, max_depth))
        stack.extend((child, depth + 1) for child in children)


def load_yaml(text, what, yaml_module):
    """yaml.safe_load of ``text`` with its errors, and a too deep or too large result, as InputFileError."""
    try:
        value = yaml_module.safe_load(text)
    except yaml_module.YAMLError as exc:
        raise InputFileError("%s is not valid YAML: %s" % (what, exc))
    except RecursionError:
        raise InputFileError("%s nests too deeply to parse (more than Python's recursion limit); refused" % what)
    check_shape(value, what)
    return value
