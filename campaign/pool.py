"""Local plumbing: worker processes on this machine, their pipes, process groups and deaths.

Each worker is `python -m campaign.pool` in a session (process group) of its own, so a kill takes
its JIT-compiler children too and a terminal's Ctrl-C reaches only the driver, which stops the
workers itself. Commands go down the worker's stdin, messages come back as JSON lines on a pipe;
its stdout/stderr (kernel libraries print) go to out/logs/worker-<id>.log. A worker dies with
its driver: PR_SET_PDEATHSIG on Linux, and stdin closing everywhere.
"""
from __future__ import annotations

import json
import os
import queue
import selectors
import signal
import subprocess
import sys
import threading
import traceback
from pathlib import Path

from .allocator import keep_freed_memory
from .tasks import Task, WorkerConfig

ROOT = Path(__file__).resolve().parent.parent


class LocalPool:
    def __init__(self, config: WorkerConfig, slots: int, gpus: int, log_dir: Path, tag: str = "") -> None:
        self.config, self.slots, self.gpus = config, slots, gpus
        self.tag = tag  # ATTNREF_CAMPAIGN in each worker's environment: whose worker it is
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: dict[int, subprocess.Popen] = {}
        self.readers: dict[int, int] = {}
        self.buffers: dict[int, bytes] = {}
        self.selector = selectors.DefaultSelector()
        self.cwd = launch_directory()

    def start(self, wid: int, slot: int) -> None:
        read_fd, write_fd = os.pipe()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
                   PYTHONUNBUFFERED="1", ATTNREF_CAMPAIGN=self.tag)
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = str(_visible_ids()[slot % self.gpus])
        log = open(self.log_dir / f"worker-{wid}.log", "ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "campaign.pool", str(write_fd), json.dumps(self.config.to_dict())],
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, pass_fds=(write_fd,), env=env,
            start_new_session=True, cwd=self.cwd)
        os.close(write_fd)
        log.close()
        os.set_blocking(read_fd, False)
        self.procs[wid], self.readers[wid], self.buffers[wid] = proc, read_fd, b""
        self.selector.register(read_fd, selectors.EVENT_READ, wid)

    def _send(self, wid: int, message: dict) -> None:
        proc = self.procs.get(wid)
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died: its exit event follows

    def assign(self, wid: int, task: Task, deadline: float | None) -> None:
        self._send(wid, {"type": "task", "task": task.to_dict(), "deadline": deadline})

    def stop(self, wid: int) -> None:
        self._send(wid, {"type": "stop"})

    def kill(self, wid: int) -> None:
        proc = self.procs.get(wid)
        if proc is not None and proc.poll() is None:
            _kill_group(proc)

    def poll(self, timeout: float) -> list[tuple]:
        events: list[tuple] = []
        for key, _ in self.selector.select(timeout):
            wid = key.data
            try:
                chunk = os.read(key.fd, 1 << 20)
            except BlockingIOError:
                continue
            if chunk:
                data = self.buffers[wid] + chunk
                *lines, self.buffers[wid] = data.split(b"\n")
                events += [("msg", wid, json.loads(line)) for line in lines if line.strip()]
            else:  # EOF: the worker's end of the pipe closed, so it has exited (or is about to)
                events.append(self._reap(wid))
        return events

    def _reap(self, wid: int) -> tuple:
        fd = self.readers.pop(wid)
        self.selector.unregister(fd)
        os.close(fd)
        proc = self.procs.pop(wid)
        try:
            status = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            status = proc.wait()
        if proc.stdin:
            try:
                proc.stdin.close()
            except OSError:
                pass
        return ("exit", wid, status, _tail(self.log_dir / f"worker-{wid}.log"))

    def close(self) -> None:
        for wid in list(self.procs):
            self.kill(wid)
            try:
                self.procs[wid].wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for fd in self.readers.values():
            self.selector.unregister(fd)
            os.close(fd)
        self.readers.clear()
        self.procs.clear()


def launch_directory() -> str:
    """The directory workers start in, resolved once: the driver's own working directory may be replaced while
    it runs (a re-laid checkout), and os.getcwd() then raises. Its path, re-created, still works; attnref's
    root stands in when even the driver's start directory is already gone."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        return str(ROOT)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the worker and everything it started (it leads its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _visible_ids() -> list[str]:
    ids = os.environ.get("CUDA_VISIBLE_DEVICES")
    return [x for x in ids.split(",") if x.strip()] if ids else [str(i) for i in range(64)]


def _tail(path: Path, n: int = 3000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


# --- the worker process ----------------------------------------------------------------------------

def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the driver dies (a SIGKILLed driver runs no cleanup)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: stdin's EOF below still ends the worker


def serve(fd: int, config: WorkerConfig) -> int:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when a campaign stops
    parent = os.getppid()
    import warnings

    warnings.simplefilter("ignore")
    if config.cache_dir is not None:  # before any library is imported: they read their cache folders then
        from .caches import use_caches

        use_caches(config.cache_dir, config.threads)
    import torch

    torch.set_num_threads(config.threads)
    if config.keep_freed_memory:  # each case's tensors from the heap the last one left (campaign.allocator)
        keep_freed_memory()
    from .sticky import STICKY_EXIT, StickyDeviceError
    from .worker import Worker

    out = os.fdopen(fd, "w", buffering=1 << 16)
    lock = threading.Lock()

    def send(message: dict) -> None:
        with lock:
            out.write(json.dumps(message, default=str) + "\n")
            out.flush()

    commands: queue.Queue = queue.Queue()
    stop = threading.Event()

    def read_commands() -> None:
        for line in sys.stdin.buffer:
            message = json.loads(line)
            if message.get("type") == "stop":
                stop.set()
            commands.put(message)
        os._exit(0)  # stdin closed: the driver is gone

    threading.Thread(target=read_commands, daemon=True).start()
    worker = Worker(config, send, should_stop=lambda: stop.is_set() or os.getppid() != parent)
    send({"type": "ready", "pid": os.getpid()})
    while not stop.is_set():
        try:
            message = commands.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent:
                return 0
            continue
        if message.get("type") != "task":
            continue
        task = Task.from_dict(message["task"])
        try:
            worker.run(task, message.get("deadline"))
        except StickyDeviceError:
            out.flush()
            os._exit(STICKY_EXIT)
        except Exception:  # a harness error, not a finding: say so and end
            send({"type": "error", "backend": task.backend,
                  "message": f"harness error in {task.label}:\n{traceback.format_exc()[-3000:]}"})
            out.flush()
            return 4
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), WorkerConfig.from_dict(json.loads(sys.argv[2]))))
