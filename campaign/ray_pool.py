"""Ray plumbing: the same workers as Ray actors, on every node of a cluster, behind the same driver.

Each worker is an actor holding fractional GPU (1 / workers-per-GPU), so Ray packs N of them on
each GPU of each node. Messages come back through `ray.util.queue.Queue`s (one per four workers) that the driver
drains; its `put` returns only once the message is stored, so a message sent before an actor died
is already there when the driver learns of the death (its pending `run` call raises); a worker sends its
rows together with its next beat, and four workers share a queue. Rows, case
files and tensors therefore all land in the driver's output directory, wherever the actor ran.
The driver notices a hung actor by its heartbeat and kills it (`ray.kill`), as the local pool does.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from .allocator import keep_freed_memory
from .tasks import Task, WorkerConfig, cores
from .sticky import STICKY_EXIT

ROOT = Path(__file__).resolve().parent.parent

INSTALL_HINT = "Ray is not installed: pip install 'attnref[ray]' (ray==2.60.0), on the driver and on every node"


def _ray():
    try:
        import ray
    except ImportError:
        raise RuntimeError(INSTALL_HINT) from None
    return ray


class _WorkerActor:
    """Body of the Ray actor (wrapped with ray.remote at start-up, so importing this module needs no Ray)."""

    def __init__(self, config: dict, wid: int, outbox) -> None:
        import warnings

        from .caches import use_caches

        if config.get("cache_dir") is not None:  # before the libraries are imported (a reused Ray process may have some)
            use_caches(config["cache_dir"], config.get("threads", 1))
        import torch

        from .worker import Worker

        warnings.simplefilter("ignore")
        cfg = WorkerConfig.from_dict(config)
        torch.set_num_threads(cfg.threads)
        if cfg.keep_freed_memory:  # as a local worker (campaign.allocator)
            keep_freed_memory()
        self.wid, self.outbox = wid, outbox
        self.pending: list[dict] = []
        self.stop_flag = threading.Event()
        self.worker = Worker(cfg, self._send, should_stop=self.stop_flag.is_set)
        self._send({"type": "ready", "pid": os.getpid(), "node": _node_ip()})

    def _send(self, message: dict) -> None:
        """Rows wait for the next other message; a beat (before each kernel call), a minimal case or
        the end of a task flushes them, so a death still leaves its case's beat in the queue."""
        self.pending.append(message)
        if message.get("type") != "row":
            self.outbox.put((self.wid, self.pending))
            self.pending = []

    def run(self, task: dict, deadline: float | None) -> str:
        import traceback

        from .sticky import StickyDeviceError

        task_ = Task.from_dict(task)
        try:
            self.worker.run(task_, deadline)
        except StickyDeviceError:
            self._send({"type": "exit", "status": STICKY_EXIT})
            os._exit(STICKY_EXIT)  # the CUDA context is unusable: this actor must not run another case
        except Exception:
            self._send({"type": "error", "backend": task_.backend,
                        "message": f"harness error in {task_.label}:\n{traceback.format_exc()[-3000:]}"})
        return "done"

    def stop(self) -> None:
        self.stop_flag.set()


def _node_ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:
        return "?"


class RayPool:
    def __init__(self, config: WorkerConfig, per_gpu: int, gpus: int, address: str | None, log_dir: Path) -> None:
        ray = _ray()
        self.ray = ray
        self.started_ray = False
        if not ray.is_initialized():
            if address in (None, "", "local"):
                path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
                ray.init(runtime_env={"env_vars": {"PYTHONPATH": path}}, include_dashboard=False, num_cpus=cores(),
                         log_to_driver=False, configure_logging=False)
            else:  # a cluster: ship this checkout to every node (the nodes need attnref's dependencies)
                ray.init(address=address, log_to_driver=False, configure_logging=False,
                         runtime_env={"working_dir": str(ROOT), "excludes": [".git", ".venv", ".whl", "*-results",
                                                                            "benchmarks/results", "docs"]})
            self.started_ray = True
        resources = ray.cluster_resources()
        self.gpus = int(resources.get("GPU", 0))
        cpus = int(resources.get("CPU", 1))
        self.per_gpu = per_gpu if isinstance(per_gpu, int) else 1
        self.slots = self.per_gpu * self.gpus if self.gpus else max(1, min(self.per_gpu, cpus))
        self.config = config
        from ray.util.queue import Queue

        # One queue per 4 workers: each put is a call into its queue's actor, which one queue for all
        # workers of a GPU turned into the campaign's bottleneck (H200 x2: Ray at 60% of the local pool).
        self.outboxes = [Queue(actor_options={"num_cpus": 0}) for _ in range(max(1, -(-self.slots // 4)))]
        self.actor_cls = ray.remote(_WorkerActor)
        self.actors: dict[int, object] = {}
        self.refs: dict[int, object] = {}
        self.stopping: set[int] = set()
        self.sticky: set[int] = set()

    def start(self, wid: int, slot: int) -> None:
        options = {"num_cpus": 1, "max_concurrency": 2, "max_restarts": 0}
        if self.gpus:
            options["num_gpus"] = 1.0 / self.per_gpu
        outbox = self.outboxes[wid % len(self.outboxes)]
        self.actors[wid] = self.actor_cls.options(**options).remote(self.config.to_dict(), wid, outbox)

    def assign(self, wid: int, task: Task, deadline: float | None) -> None:
        self.refs[wid] = self.actors[wid].run.remote(task.to_dict(), deadline)

    def stop(self, wid: int) -> None:
        if wid in self.actors:
            self.stopping.add(wid)
            self.actors[wid].stop.remote()

    def kill(self, wid: int) -> None:
        actor = self.actors.get(wid)
        if actor is not None:
            self.ray.kill(actor, no_restart=True)
            if wid not in self.refs:  # idle: no pending call will tell us it is gone
                self.refs[wid] = None

    def poll(self, timeout: float) -> list[tuple]:
        ray = self.ray
        pending = {ref: wid for wid, ref in self.refs.items() if ref is not None}
        ended: dict[int, int] = {}
        if pending:
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            for ref in done:
                wid = pending[ref]
                try:
                    ray.get(ref)
                    del self.refs[wid]
                    if wid in self.stopping:
                        ended[wid] = 0
                except Exception:
                    ended[wid] = -9
        for wid, ref in list(self.refs.items()):
            if ref is None:
                ended[wid] = -9
        for wid in self.stopping:
            if wid not in self.refs and wid in self.actors:
                ended.setdefault(wid, 0)  # stopped while idle
        events: list[tuple] = []
        # After looking at the refs: a dead actor's last messages are already queued. One call drains
        # what is there; wait for the first batch only when nothing else happened.
        batches = self._drain()
        if not batches and not ended:
            time.sleep(min(timeout, 0.05))
            batches = self._drain()
        for wid, messages in batches:
            for message in messages:
                if message.get("type") == "exit":
                    self.sticky.add(wid)
                    continue
                events.append(("msg", wid, message))
        for wid, status in ended.items():
            if status != 0:
                status = STICKY_EXIT if wid in self.sticky else status
            actor = self.actors.pop(wid, None)
            if actor is not None and status == 0:
                self.ray.kill(actor, no_restart=True)
            self.refs.pop(wid, None)
            self.stopping.discard(wid)
            self.sticky.discard(wid)
            events.append(("exit", wid, status, ""))
        return events

    def _drain(self) -> list:
        """Every (worker, messages) batch waiting in the queues, two calls per queue."""
        batches = []
        for queue in self.outboxes:
            waiting = queue.qsize()
            if waiting:
                batches += queue.get_nowait_batch(waiting)
        return batches

    def close(self) -> None:
        for actor in self.actors.values():
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:
                pass
        self.actors.clear()
        if self.started_ray:
            self.ray.shutdown()
