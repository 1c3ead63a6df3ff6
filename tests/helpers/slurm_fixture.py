"""A real single-node SLURM cluster on localhost for the sweep's SLURM tests.

Debian's slurmctld, slurmd and munge (installed by .ci/install_slurm.sh), started as root
with every key, socket, state and log file under one temporary folder, and stopped after.
`SlurmCluster.env()` gives the environment (SLURM_CONF) that points clients at it.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol",
           "sinfo", "scancel")


def unavailable_reason() -> str:
    """Why a local cluster cannot start here, or '' when it can be tried."""
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        return (f"SLURM/munge not installed (missing {', '.join(missing)}); "
                "run .ci/install_slurm.sh")
    if os.geteuid() != 0:
        return "starting slurmd and munged needs root"
    return ""


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _memory_mb() -> int:
    with open("/proc/meminfo") as f:
        total_kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    return total_kb // 1024


class SlurmCluster:
    """slurmctld + slurmd + munged on this machine, one node with all its CPUs."""

    def __init__(self, root: Path):
        self.root = root
        self.node = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.socket = root / "munge.socket"

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=30)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: "
                               f"{proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def _write_conf(self) -> None:
        ctld_port, slurmd_port = _free_ports(2)
        r = self.root
        settings = {
            "ClusterName": "sweeptest", "SlurmctldHost": f"{self.node}(127.0.0.1)",
            "SlurmUser": "root", "SlurmdUser": "root",
            "SlurmctldPort": ctld_port, "SlurmdPort": slurmd_port,
            "AuthType": "auth/munge", "CredType": "cred/munge",
            # cred_expire also sets how long a requeued job waits before it may start again.
            "AuthInfo": f"socket={self.socket},cred_expire=5",
            "StateSaveLocation": r / "state", "SlurmdSpoolDir": r / "spool",
            "SlurmctldPidFile": r / "slurmctld.pid", "SlurmdPidFile": r / "slurmd.pid",
            "SlurmctldLogFile": r / "slurmctld.log", "SlurmdLogFile": r / "slurmd.log",
            "ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/none",
            "SchedulerType": "sched/builtin", "SchedulerParameters": "sched_interval=1",
            "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_Core",
            "ReturnToService": 2, "MpiDefault": "none", "MailProg": "/bin/true",
            "JobAcctGatherType": "jobacct_gather/none",
            "AccountingStorageType": "accounting_storage/none", "JobCompType": "jobcomp/none",
            "KillWait": 5, "MinJobAge": 300, "InactiveLimit": 0,
        }
        lines = [f"{k}={v}" for k, v in settings.items()]
        node = f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()}"
        lines += [f"{node} RealMemory={_memory_mb() * 9 // 10} State=UNKNOWN",
                  f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP"]
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self, timeout_s: float = 30.0) -> None:
        """Start munged, slurmctld and slurmd; return once the node is idle."""
        for folder in ("state", "spool"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        key = self.root / "munge.key"
        self._run("mungekey", "--create", f"--keyfile={key}")
        key.chmod(0o600)
        self._run("munged", "--force", f"--key-file={key}", f"--socket={self.socket}",
                  f"--pid-file={self.root / 'munged.pid'}",
                  f"--log-file={self.root / 'munged.log'}",
                  f"--seed-file={self.root / 'munged.seed'}")
        self._write_conf()
        self._run("slurmctld", "-c")
        self._run("slurmd")
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            state = self._run("sinfo", "--noheader", "--format=%t", check=False).stdout.strip()
            if state == "idle":
                return
            time.sleep(0.2)
        raise RuntimeError(f"SLURM node not idle after {timeout_s:.0f} s (sinfo: {state!r}); "
                           f"see {self.root / 'slurmctld.log'} and {self.root / 'slurmd.log'}")

    def stop(self) -> None:
        """Cancel every job, then stop slurmd, slurmctld and munged (by their pid files)."""
        if self.conf.exists():
            self._run("scancel", "--user=root", check=False)
            deadline = time.time() + 15
            while time.time() < deadline and self._run(
                    "squeue", "--noheader", check=False).stdout.strip():
                time.sleep(0.2)
        pids = []
        for name in ("slurmd", "slurmctld", "munged"):
            pid_file = self.root / f"{name}.pid"
            if pid_file.exists():
                pids.append(int(pid_file.read_text().split()[0]))
                try:
                    os.kill(pids[-1], signal.SIGTERM)
                except ProcessLookupError:
                    pids.pop()
        deadline = time.time() + 15
        while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
            time.sleep(0.1)
