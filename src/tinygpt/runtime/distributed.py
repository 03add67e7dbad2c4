"""Several processes per machine under Hydra: a Hydra-safe start for DDP and FSDP, and what only rank 0 does.

Lightning's own launcher starts each extra process by running ``sys.argv`` again (with rank 0's run dir): under
``-m`` that starts the whole sweep once per rank, the ranks all print to the terminal, and its observer kills rank 0
when a rank exits with a signal's status (docs/scaling-out.md, "Why not Lightning's launcher"). Here the Hydra
job itself is rank 0: after checking the config and preparing the data it starts ranks 1..N-1 of this node
as single runs of *this job's* overrides into *this job's* dir::

    python train.py <the job's overrides> hydra.run.dir=<job dir> hydra.output_subdir=null \
        hydra.job.name=train_rank<k>        # LOCAL_RANK=k NODE_RANK WORLD_SIZE MASTER_ADDR MASTER_PORT

with the environment Lightning reads for processes started outside it, so Lightning starts none itself.
Ranks > 0 write only their log (``<run dir>/train_rank<k>.log``); rank 0 writes .hydra/, config.yaml,
checkpoints, maps, samples, summary.json and the one W&B run. A sweep job starts and stops its own ranks,
so ``-m`` works unchanged. Under SLURM (srun starts one task per device) or torchrun the processes exist
already and nothing is started here.

Batches: data.batch_size is per process; step s's global batch is world_size x batch_size windows drawn
from one seeded stream and rank r trains on its r-th slice (data.RandomWindows), so N processes with batch
b take the same steps as one process with batch N x b, up to rounding in the gradient all-reduce.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig
from rich.console import Console

console = Console(stderr=True)
# how a rank ends when a stop signal reached it: 128 + SIGINT, SIGUSR1, SIGUSR2, SIGTERM once its handler is in
# (the ranks agreed to stop and checkpoint), or killed by the signal itself before that (-signum: Ctrl-C to the
# process group while the ranks start up)
STOPPED = (130, 138, 140, 143, -signal.SIGINT, -signal.SIGUSR1, -signal.SIGUSR2, -signal.SIGTERM)
# strategies whose processes we start: ddp, fsdp, and auto, which Lightning makes ddp on several devices (its own
# launcher would rerun the whole command line in each rank, a whole sweep under -m, and its observer SIGKILLs rank 0
# when a rank stops on Ctrl-C); ddp_spawn/ddp_fork start their own
SELF_LAUNCHED = {"ddp", "fsdp", "auto"}


def strategy_name(trainer_cfg: DictConfig) -> str:
    """'ddp', 'fsdp', 'auto', ... from trainer.strategy (a string or a config with a _target_)."""
    strategy = trainer_cfg.get("strategy", "auto")
    if isinstance(strategy, DictConfig):
        target = str(strategy.get("_target_", "")).rsplit(".", 1)[-1].lower()
        return "fsdp" if "fsdp" in target else "ddp" if "ddp" in target else target
    return str(strategy).lower()


def processes_per_node(trainer_cfg: DictConfig) -> int:
    """How many processes this node runs for the trainer config (1 unless DDP/FSDP on several devices)."""
    devices = trainer_cfg.get("devices", 1)
    if strategy_name(trainer_cfg) not in SELF_LAUNCHED or not isinstance(devices, int):
        return 1
    return max(devices, 1)


def check_launch(trainer_cfg: DictConfig) -> None:
    """Several nodes need their processes started by a scheduler: one sentence, before any work."""
    nodes = trainer_cfg.get("num_nodes", 1)
    if isinstance(nodes, int) and nodes > 1 and not started_externally():
        raise ValueError(
            f"trainer.num_nodes={nodes} needs one process per device started on every node by SLURM "
            "(hydra/launcher=slurm) or torchrun; on one machine use trainer.devices instead."
        )


def started_externally() -> bool:
    """The ranks exist already: started by us (LOCAL_RANK set), by torchrun, or as SLURM tasks (srun)."""
    slurm_tasks = int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1
    return "LOCAL_RANK" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ or slurm_tasks


def env_rank() -> int:
    """This process's global rank as its environment says (0 when it says nothing), before Lightning knows."""
    for key in ("RANK", "SLURM_PROCID"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def is_rank_zero() -> bool:
    return env_rank() == 0


def requeued() -> bool:
    """A SLURM job started again after a requeue (it resumes from its run dir's last.ckpt)."""
    return os.environ.get("SLURM_RESTART_COUNT", "0") not in ("", "0")


def cluster_plugins() -> list:
    """Under SLURM: Lightning's SLURMEnvironment (ranks, world size and the main address from SLURM), with
    its auto-requeue off, because graceful_stop.GracefulStop requeues at a step boundary instead."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRanks:
    """Ranks 1..N-1 of this node for one run (a context manager around the run, in rank 0).

    ``start(overrides)`` sets this process's rank environment and starts the others; leaving the context
    waits for them (they end with rank 0, as the last collective returns), restores the environment and
    closes the process group, so the next job of a sweep starts afresh. A rank that fails stops the run:
    the others are ended and its log is named in one line.

    Signals: Ctrl-C reaches every rank of the process group. In training the ranks agree after the step and stop
    together, rank 0 saving (``stop``: the run's GracefulStop, its ``signum``, ``training`` and ``stopping``). A rank
    that stops on a signal while rank 0 cannot follow (blocked in a collective, such as the start-up's rendezvous,
    where its own handler never runs) would leave rank 0 waiting for ever: ``abandon(signum)`` then ends rank 0 as a
    stop. And when rank 0 leaves with an error or a stop, the others are asked to stop at once (SIGTERM), so none is
    left waiting for a rank 0 that is gone.
    """

    GRACE_S = 2.0  # after a rank ends: time for rank 0's own handler to note a signal that reached both
    STOP_S = 30.0  # rank 0 signalled in training: time to finish its step and leave before it counts as blocked

    def __init__(self, n: int, run_dir: Path, script: Path, stop=None, abandon: Callable[[int], None] | None = None):
        self.n, self.run_dir, self.script = n, Path(run_dir), Path(script)
        self.stop, self.abandon = stop, abandon
        self.procs: list[subprocess.Popen] = []
        self._saved_env: dict[str, str | None] = {}
        self._watch: threading.Thread | None = None
        self._done = threading.Event()
        self.failed: str | None = None

    def command(self, overrides: list[str], rank: int) -> list[str]:
        keep = [o for o in overrides if not o.startswith(("hydra.run.dir=", "hydra.sweep.dir=", "hydra.output_subdir=",
                                                          "hydra.job.name="))]
        return [sys.executable, str(self.script), *keep, f"hydra.run.dir={self.run_dir}", "hydra.output_subdir=null",
                f"hydra.job.name=train_rank{rank}"]

    def log_path(self, rank: int) -> Path:
        return self.run_dir / f"train_rank{rank}.log"

    def start(self, overrides: list[str]) -> None:
        env = {"LOCAL_RANK": "0", "NODE_RANK": os.environ.get("NODE_RANK", "0"), "WORLD_SIZE": str(self.n),
               "MASTER_ADDR": os.environ.get("MASTER_ADDR", "127.0.0.1"),
               "MASTER_PORT": os.environ.get("MASTER_PORT") or str(free_port())}
        for key, value in env.items():
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = value
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for rank in range(1, self.n):
            with open(self.log_path(rank), "a") as log:
                self.procs.append(subprocess.Popen(self.command(overrides, rank), stdout=log, stderr=subprocess.STDOUT,
                                                   env={**os.environ, "LOCAL_RANK": str(rank)}))
        ranks = "rank 1" if self.n == 2 else f"ranks 1-{self.n - 1}"
        console.print(f"DDP: started {ranks} of {self.n} on this machine (logs "
                      f"{self.log_path(1).name}..., port {env['MASTER_PORT']})", soft_wrap=True)  # one line
        self._watch = threading.Thread(target=self._watch_ranks, name="rank-watch", daemon=True)
        self._watch.start()

    def _watch_ranks(self) -> None:
        """A rank that ends while rank 0 may wait for it in a collective would leave it waiting: end the run."""
        while not self._done.wait(0.5):
            codes = [(rank, proc.poll()) for rank, proc in enumerate(self.procs, start=1)]
            ended = [(rank, code) for rank, code in codes if code]
            if not ended:
                continue
            rank, code = ended[0]
            if self._done.wait(self.GRACE_S) or getattr(self.stop, "stopping", False):
                return  # rank 0 has left, or is saving and leaving by its own stop
            signum = getattr(self.stop, "signum", None)
            if signum is not None and getattr(self.stop, "training", False) and self._done.wait(self.STOP_S):
                return  # rank 0 was signalled too and stopped after its step
            if code in STOPPED or signum is not None:  # a stop, with rank 0 unable to follow: end it as one
                by = signum or (code - 128 if code > 0 else -code)
                if self.abandon is not None:
                    self._end_all()
                    self.abandon(by)  # ends the process
                    return
            self.failed = f"rank {rank} exited with status {code}; its log: {self.log_path(rank)}"
            console.print(f"[bold red]error:[/] {self.failed}", soft_wrap=True)
            self._end_all()
            os.kill(os.getpid(), signal.SIGKILL)  # rank 0 may be blocked in a collective: end it too
            return

    def _end_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()

    def __enter__(self) -> LocalRanks:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._done.set()
        if exc_type is not None:  # rank 0 leaves early: the others may be waiting for it in a collective
            self._end_all()
        try:
            for rank, proc in enumerate(self.procs, start=1):
                try:
                    code = proc.wait(timeout=120 if exc_type is None else 10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    code = proc.wait()
                if code and code not in STOPPED and exc_type is None and self.failed is None:
                    self.failed = f"rank {rank} exited with status {code}; its log: {self.log_path(rank)}"
        finally:
            self._end_all()
            for key, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            destroy_process_group()
        if self.failed and exc_type is None:
            raise RuntimeError(self.failed)


def destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def launch_ranks(cfg: DictConfig, run_dir: Path, overrides: list[str], script: Path, stop=None,
                 abandon: Callable[[int], None] | None = None) -> LocalRanks | None:
    """Start this node's other ranks when the trainer asks for several processes and none exist yet (``stop`` and
    ``abandon``: LocalRanks)."""
    n = processes_per_node(cfg.trainer)
    if n < 2 or started_externally():
        return None
    ranks = LocalRanks(n, run_dir, script, stop, abandon)
    ranks.start(overrides)
    return ranks
