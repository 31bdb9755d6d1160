"""Files: the one room that talks to the operating system's files. What comes from outside (a checkpoint folder,
a tokenizer, a run's saved state) is read with care: plain names inside the folder, bounded sizes, strict JSON, and
names from a file shown escaped. What is written goes to a temporary name first and is renamed into place, so a
killed process leaves the old file or the new one; a writer holds its folder by a lock."""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

MAX_JSON_BYTES = 64 * 2**20          # config.json and an index are kilobytes; a tokenizer.json tens of megabytes
MAX_DEPTH = 32                       # real configs nest 3 or 4 levels deep


# ---------------------------------------------------------------- names, shown
def shown(name, quote: bool = False, limit: int = 200) -> str:
    """A name read from a file (a tensor, a shard, an architecture), safe to put in a message or a report: as it is
    when every character prints (letters of any script, digits, punctuation, spaces) and there is no backslash, else
    (always, with `quote`) as a Python literal, 'a\\x1b[2J\\n', so an escape sequence, a newline or an invisible
    unicode control (Cc, Cf: a bidi override) is shown, never obeyed by the terminal. Past `limit` characters it is
    cut, saying how long it was."""
    name = str(name) if isinstance(name, Path) else name
    text = name if isinstance(name, str) else repr(name)               # a number, a list: its literal already
    cut = f"... ({len(text):,} characters)" if len(text) > limit else ""
    text = text[:limit]
    if isinstance(name, str) and (quote or not text.isprintable() or "\\" in text):
        text = repr(text)
    return text + cut


def shown_list(names, limit: int = 10, show: Callable = lambda name: shown(name, quote=True)) -> str:
    """Names read from a file as a list, each quoted by `shown` (or shown by `show`): the first `limit`, then how
    many more, so 200,000 names are one short line."""
    names = list(names)
    more = [f"... and {len(names) - limit:,} more"] if len(names) > limit else []
    return "[" + ", ".join([show(n) for n in names[:limit]] + more) + "]"


# ---------------------------------------------------------------- paths
def relative_path(target: Path, start: Path) -> str:
    """`target` as a path from folder `start`, with / between names (a link from a page saved in `start`)."""
    return Path(os.path.relpath(target, start)).as_posix()


def inside(folder: Path, name, op: str, what: str) -> Path:
    """folder / name, where `name` comes from a file in the folder: a plain file name (no folders, no '..', not
    absolute, nothing unprintable), whose real path, symlinks followed, lies in the folder. Anything else is
    refused, naming it."""
    if not isinstance(name, str) or not name.isprintable() or name in ("", ".", "..") or "/" in name or "\\" in name:
        raise ValueError(f"{op}: {what} names {shown(name, quote=True)}; expected the plain name of a file in "
                         f"{folder}")
    path = folder / name
    real, home = path.resolve(), folder.resolve()
    if home not in real.parents:
        raise ValueError(f"{op}: {path} is a link to {shown(real)}, outside the folder {folder}; a checkpoint's "
                         "files must lie in its own folder")
    return path


def readable(path: Path, op: str) -> bool:
    """Whether `path` exists (False: it does not); an entry that exists but is no readable file is an OSError."""
    if not os.path.lexists(path):
        return False
    if not path.is_file():
        kind = "a folder" if path.is_dir() else "not a regular file" if path.exists() else "a broken link"
        raise OSError(f"{op}: cannot read {path}: it is {kind}")
    return True


def read_bytes(path: Path, op: str, limit: int) -> bytes:
    """A file's bytes, at most `limit` of them (a bigger file is refused before it is read)."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise ValueError(f"{op}: {path} is {size:,} bytes; files of this kind are at most {limit:,}")
        with open(path, "rb") as f:
            return f.read(limit + 1)
    except (PermissionError, IsADirectoryError) as e:
        raise OSError(f"{op}: cannot read {path}: {e.strerror}") from None


# ---------------------------------------------------------------- JSON
def _no_repeats(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"the key {shown(next(k for k in keys if keys.count(k) > 1), quote=True)} appears twice")
    return dict(pairs)


def _depth(value) -> int:
    """How deeply lists and objects nest (a number is 0), found without recursion."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        v, d = todo.pop()
        deepest = max(deepest, d)
        if isinstance(v, dict | list):
            todo += [(c, d + 1) for c in (v.values() if isinstance(v, dict) else v)]
    return deepest


def parse_json(text: bytes | str, where: str, op: str):
    """JSON text from `where` as Python values: valid JSON, no key twice in one object, no NaN or Infinity,
    nested at most MAX_DEPTH deep; else one ValueError naming `where`."""
    def refuse_constant(name):
        raise ValueError(f"{name} is not a JSON number")
    try:
        value = json.loads(text, object_pairs_hook=_no_repeats, parse_constant=refuse_constant)
    except RecursionError:
        raise ValueError(f"{op}: {where} nests lists or objects far deeper than any checkpoint file") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{op}: {where} is not valid JSON ({e})") from None
    if _depth(value) > MAX_DEPTH:
        raise ValueError(f"{op}: {where} nests lists or objects {_depth(value)} deep; real checkpoint files nest a "
                         f"few levels (at most {MAX_DEPTH})")
    return value


def read_json_object(path: Path, op: str, limit: int = MAX_JSON_BYTES) -> dict:
    """A JSON file that must hold an object ({...})."""
    value = parse_json(read_bytes(path, op, limit), str(path), op)
    if not isinstance(value, dict):
        raise ValueError(f"{op}: {path} holds a JSON {type(value).__name__}; expected an object ({{...}})")
    return value


def is_int(v) -> bool:
    """A JSON integer (JSON's true and false are Python bools, which are ints: not these)."""
    return isinstance(v, int) and not isinstance(v, bool)


# ---------------------------------------------------------------- writing, atomically
NAME_MAX = 255                                       # bytes in one file name (Linux, macOS)
TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.tmp")     # .<name>.<pid>.tmp: a writer's, until renamed
LOCK = ".lock"                                       # the file a writer holds a folder by (hold_folder)


class FolderInUse(OSError):
    """Another process holds the folder (hold_folder): `pid` is its process id (None when it could not be read)."""

    def __init__(self, folder: Path, pid: int | None, op: str):
        who = f"process {pid}" if pid is not None else "another process"
        super().__init__(errno.EBUSY, f"{op}: {folder} is in use by {who}, which is writing there; wait for it to "
                                      "end, or choose another folder")
        self.folder, self.pid = folder, pid

    def __str__(self) -> str:
        return self.strerror


def temporary(path: Path, pid: int | None = None) -> Path:
    """Where `path` is written before it is renamed into place: .<name>.<pid>.tmp beside it (the name cut to fit
    NAME_MAX bytes). The writer's pid in the name says whose it is: remove_stale clears away a dead writer's."""
    tail = f".{os.getpid() if pid is None else pid}.tmp"
    return path.with_name("." + os.fsdecode(os.fsencode(path.name)[:NAME_MAX - 1 - len(tail)]) + tail)


def stands_for(path) -> Path:
    """The path a temporary stands for, to name it to a person: each .<name>.<pid>.tmp part read as <name>."""
    return Path(*(m["name"] if (m := TEMPORARY.fullmatch(part)) else part for part in Path(path).parts))


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists (another user's counts: it may still be writing)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def remove_stale(folder: Path, name: str | None = None) -> list[Path]:
    """Remove what killed writers left in `folder`: the temporaries (files or folders; of the file `name` only,
    when given) whose writer's process is gone. A live process's are never touched. Returns what was removed."""
    try:
        entries = list(Path(folder).iterdir())
    except OSError:                                                  # no folder yet: nothing left behind in it
        return []
    removed = []
    for entry in entries:
        match = TEMPORARY.fullmatch(entry.name)
        if match is None or process_alive(pid := int(match["pid"])):
            continue
        if name is not None and entry != temporary(Path(folder) / name, pid):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


@contextmanager
def hold_folder(folder: Path, op: str):
    """While inside, `folder` is this process's to write: a lock file in it (LOCK), flock'ed and holding this
    process's id, refuses a second writer (FolderInUse, naming the holder's pid). The system lets go of the lock
    when the process ends, however it ends, so a killed run leaves no stale lock. On taking it, the temporaries that
    dead writers left in the folder and the folders in it are removed (remove_stale)."""
    import fcntl                                                     # POSIX only: loaded where a folder is held
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK, os.O_RDONLY | os.O_CREAT, 0o644)     # read-only: a folder remounted read-only
    try:                                                             # under a held lock is not "busy" because of it
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderInUse(folder, _holder(fd), op) from None
        with open(folder / LOCK, "r+b") as f:                        # the pid, for the refusal a second writer gets
            f.write(f"{os.getpid()}\n".encode())
            f.truncate()
        for inner in [folder, *(p for p in folder.iterdir() if p.is_dir() and not TEMPORARY.fullmatch(p.name))]:
            remove_stale(inner)
        yield folder
    finally:
        os.close(fd)                                                 # the lock goes with the last descriptor


def _holder(fd: int) -> int | None:
    """The pid the holder wrote into the lock file (it writes it just after taking the lock: wait a moment)."""
    for _ in range(20):
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return int(text)
        time.sleep(0.05)
    return None


def check_target(path: Path) -> None:
    """Refuse to write over what is not a regular file (a folder, a FIFO, a device, a socket), found by its name
    alone: opening a FIFO to write would wait for a reader forever. A missing file is fine."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder; expected a file name to write", str(path))
    kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    raise FileExistsError(errno.EEXIST, f"is {kind}, not a regular file; not written over", str(path))


def write_atomic(path: Path, write: Callable) -> None:
    """Call write(f) on a temporary file beside `path` (temporary), flush it to disk, then rename it over `path`:
    a process killed at any moment leaves either the old file or the new one, never half of one, and a failure
    (a full disk, a file-size limit, a read-only folder) removes the temporary and raises the OSError, naming
    `path`. What is there must be a regular file (check_target); a dead writer's temporary of it is removed first."""
    path = Path(path)
    check_target(path)
    remove_stale(path.parent, path.name)
    tmp = temporary(path)
    try:
        tmp.unlink(missing_ok=True)                                  # "x" below: never write through a link
        with open(tmp, "xb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e         # the file asked for, not its temporary
    finally:
        tmp.unlink(missing_ok=True)
    sync_folder(path.parent)


def rename_folder(tmp: Path, here: Path) -> None:
    """The folder `tmp`, written whole, renamed to `here`. A folder already there is moved aside first and removed
    after; the renames made durable."""
    aside = temporary(here.with_name(here.name + ".old"))
    if here.exists():
        os.replace(here, aside)
    os.replace(tmp, here)
    shutil.rmtree(aside, ignore_errors=True)
    sync_folder(here.parent)


def sync_folder(folder: Path) -> None:
    """Make renames and deletions in `folder` durable (where the platform allows opening a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_text(path: Path, text: str) -> None:
    """`text` as UTF-8 at `path`, written atomically (write_atomic)."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))


# ---------------------------------------------------------------- what native code prints
STDERR = threading.RLock()            # file descriptor 2 is the whole process's: one holder at a time


class HeldStderr:
    """`with HeldStderr() as held:` runs the body with the process's stderr (file descriptor 2, where native code
    such as a Rust library's panic handler writes) pointed at a temporary file; `held.drop()` discards what was
    printed, else it is passed on to stderr when the body ends. One thread holds it at a time (other threads'
    stderr waits in the file meanwhile). Nothing is held in a process that has no stderr."""

    def __enter__(self):
        STDERR.acquire()
        self.saved, self.file, self.keep = None, None, True
        if sys.stderr is not None:
            sys.stderr.flush()
        try:
            self.saved = os.dup(2)
        except OSError:
            return self
        self.file = tempfile.TemporaryFile()
        os.dup2(self.file.fileno(), 2)
        return self

    def drop(self) -> None:
        self.keep = False

    def __exit__(self, *exc):
        try:
            if self.saved is not None:
                os.dup2(self.saved, 2)
                os.close(self.saved)
                if self.keep:
                    self.file.seek(0)
                    os.write(2, self.file.read())
                self.file.close()
        finally:
            STDERR.release()
