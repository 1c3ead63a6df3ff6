"""Launch scripts started as processes of their own, forked from a server that has imported the
libraries they import (JAX, flax, orbax, MuJoCo, dm_control), so that each saves the 2 s of a
new interpreter importing them and is otherwise what `python launch/<name> args...` starts: its
own pid, signals, exit code, working directory, environment and file descriptors 0, 1 and 2.

    proc = forkserver.popen([sys.executable, script, *args], cwd=REPO, stderr=subprocess.PIPE,
                            text=True)

`popen` and `run` take what the tests pass to subprocess.Popen and subprocess.run and answer as
they do (pid, poll, wait, communicate, send_signal, kill, returncode, stdout and stderr). The
server is a new interpreter, started on first use, one per test process, that imports PRELOAD
(no JAX computation, no thread) and forks a child for each script; it exits with that process.
TESTS_FORKSERVER=0 starts every process with subprocess instead.

Only commands `[sys.executable, <a .py file>, args...]` go through the server, and only with an
environment (`env`, or this process's) whose AT_START variables are those the server started
with: the interpreter and the preloaded libraries read them as they start and import
(PYTHONHASHSEED, JAX_PLATFORMS, XLA_FLAGS, ...). The rest go to subprocess. A forked script
shares the server's hash seed."""

import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

ENABLED = os.environ.get("TESTS_FORKSERVER", "1") != "0"
PRELOAD = ("numpy", "scipy.linalg", "jax", "jax.numpy", "flax.linen", "optax", "chex",
           "orbax.checkpoint", "mujoco", "dm_control.suite", "absl.app", "absl.flags", "tqdm",
           "submitit")
# Prefixes of the environment variables that the interpreter and PRELOAD's libraries read as
# they start or import; a process that needs other values of these needs an interpreter of its
# own. Any other variable (WANDB_*, NETRC, SINGULARCLIP_CACHE) a child reads when it runs.
AT_START = ("PYTHON", "JAX_", "XLA_", "TF_", "MUJOCO_", "PYOPENGL", "EGL", "DISPLAY", "OMP_",
            "OPENBLAS_", "MKL_", "NPY_", "NUMPY_", "LD_", "CUDA", "NVIDIA", "TPU_", "ABSL",
            "TQDM", "SUBMITIT", "ORBAX", "TENSORSTORE", "GRPC", "HOME", "TMP", "TEMP", "LANG",
            "LC_")


# --- the server: a process of its own, `python tests/helpers/forkserver.py FD` ---

_WAKE: list[int] = []  # the server's pipe for SIGCHLD, closed in each child


def _streams() -> None:
    """sys.stdin, stdout and stderr on the new file descriptors 0, 1 and 2, buffered as the
    interpreter buffers them at its start (PYTHONUNBUFFERED, a terminal or not)."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    encoding, errors = sys.__stdout__.encoding, sys.__stdout__.errors
    sys.stdin = io.TextIOWrapper(os.fdopen(0, "rb", closefd=False), encoding, errors)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0 if unbuffered else -1,
                                            closefd=False), encoding, errors,
                                  line_buffering=os.isatty(1), write_through=unbuffered)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0 if unbuffered else -1,
                                            closefd=False), encoding, "backslashreplace",
                                  line_buffering=True, write_through=unbuffered)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def exit_code(e: SystemExit) -> int:
    """The exit code of a process ended by `e`: sys.exit("message") prints the message and is
    1, as the interpreter does."""
    if e.code is None or isinstance(e.code, int):
        return e.code or 0
    print(e.code, file=sys.stderr)
    return 1


def _script_frames(traceback, script: str):
    """The traceback from the script's own frame on (not this module's or runpy's)."""
    path = os.path.abspath(script)
    frames = traceback
    while frames is not None and os.path.abspath(frames.tb_frame.f_code.co_filename) != path:
        frames = frames.tb_next
    return frames or traceback


def _run(script: str) -> int:
    """Run the script as `__main__` and end as the interpreter ends: its exit code, an uncaught
    exception through sys.excepthook (exit 1, or SIGINT for a KeyboardInterrupt), then the
    non-daemon threads joined, the atexit functions and the streams flushed."""
    import atexit
    import runpy

    code = 0
    try:
        runpy.run_path(os.path.abspath(script), run_name="__main__")  # as `python` does
    except SystemExit as e:
        code = exit_code(e)
    except BaseException as e:  # noqa: BLE001 - what the interpreter would report
        e.with_traceback(_script_frames(e.__traceback__, script))  # what the hook prints
        sys.excepthook(type(e), e, e.__traceback__)
        code = -signal.SIGINT if isinstance(e, KeyboardInterrupt) else 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # noqa: SLF001
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed pipe, as at exit
            pass
    return code


def _child(sock: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked process: become `python <script> args...`; never returns."""
    code = 1
    try:
        sock.close()
        for fd in _WAKE:
            os.close(fd)
        if request["new_session"]:
            os.setsid()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _streams()
        script = request["argv"][0]
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        code = _run(script)
    finally:
        if code < 0:  # an uncaught KeyboardInterrupt: the interpreter ends by the signal
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code & 0xFF)


def _serve(sock: socket.socket) -> None:
    for name in PRELOAD:
        __import__(name)
    wake_r, wake_w = _WAKE[:] = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the test process's Ctrl-C is its own
    sock.sendall(b'{"ready": true}\n')
    buffered = b""
    while True:
        readable, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                sock.sendall(json.dumps({"exited": pid,
                                         "code": os.waitstatus_to_exitcode(status)}).encode()
                             + b"\n")
        if sock in readable:
            fds = []
            while b"\n" not in buffered:  # one request at a time: the client waits for its pid
                message, more, _, _ = socket.recv_fds(sock, 65536, 3)
                if not message:
                    return
                buffered += message
                fds += more
            line, buffered = buffered.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _child(sock, request, fds)
            for fd in fds:
                os.close(fd)
            sock.sendall(json.dumps({"started": pid}).encode() + b"\n")


# --- the client, in the test process ---

class _Server:
    def __init__(self):
        ours, theirs = socket.socketpair()
        # Started as a file (sys.path[0] its folder, which a child replaces by its script's), so
        # that a child's sys.path is what `python script.py` would have.
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(theirs.fileno())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        theirs.close()
        self.at_start = _at_start(os.environ)
        self.sock = ours
        self.lock = threading.Lock()
        self.buffer = b""
        self.messages: list[dict] = []
        self.exits: dict[int, int] = {}
        self._take(lambda m: "ready" in m, timeout=None)

    def _pump(self, timeout: float | None) -> None:
        """Read what the server sent within `timeout` seconds (None: until something)."""
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return
        data = self.sock.recv(65536)
        if not data:
            raise RuntimeError("the fork server ended")
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            message = json.loads(line)
            if "exited" in message:
                self.exits[message["exited"]] = message["code"]
            else:
                self.messages.append(message)

    def _take(self, wanted, timeout: float | None) -> dict:
        while True:
            for message in self.messages:
                if wanted(message):
                    self.messages.remove(message)
                    return message
            self._pump(timeout)

    def start(self, argv: list[str], cwd: str, env: dict[str, str], fds: list[int],
              new_session: bool) -> int:
        with self.lock:
            request = json.dumps({"argv": argv, "cwd": cwd, "env": dict(env),
                                  "new_session": new_session}).encode()
            socket.send_fds(self.sock, [request + b"\n"], fds)
            return self._take(lambda m: "started" in m, timeout=None)["started"]

    def exit_code(self, pid: int) -> int | None:
        """The process's exit code (subprocess's convention), None while it runs."""
        with self.lock:
            self._pump(0)
            return self.exits.pop(pid, None)


_server: _Server | None = None


def _get_server() -> _Server:
    global _server
    if _server is None or _server.process.poll() is not None:
        _server = _Server()
    return _server


def _at_start(env) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.upper().startswith(AT_START)}


def _forkable(args, env, kwargs) -> bool:
    """`python <file>.py ...` with what Popen takes, in an environment whose AT_START variables
    are the server's (this process's, where no server runs yet)."""
    if not (ENABLED and isinstance(args, list | tuple) and len(args) >= 2
            and args[0] == sys.executable and str(args[1]).endswith(".py")
            and set(kwargs) <= {"stdin", "stdout", "stderr", "cwd", "text",
                                "start_new_session"}):
        return False
    at_start = _at_start(os.environ) if _server is None or _server.process.poll() is not None \
        else _server.at_start
    return _at_start(os.environ if env is None else env) == at_start


class Popen:
    """subprocess.Popen for `[sys.executable, script, args...]`, forked by the server."""

    def __init__(self, args, stdin=None, stdout=None, stderr=None, cwd=None, text=False,
                 start_new_session=False, env=None):
        self.args = list(map(str, args))
        self.returncode = None
        child, parent, close = [], [], []
        for i, spec in enumerate((stdin, stdout, stderr)):
            if spec == subprocess.STDOUT and i == 2:
                fd, end = child[1], None
            elif spec is None:
                fd, end = i, None
            elif spec == subprocess.DEVNULL:
                fd, end = os.open(os.devnull, os.O_RDWR), None
                close.append(fd)
            elif spec == subprocess.PIPE:
                r, w = os.pipe()
                fd, end = (r, w) if i == 0 else (w, r)
                close.append(fd)
            elif isinstance(spec, int):
                fd, end = spec, None
            else:
                fd, end = spec.fileno(), None
            child.append(fd)
            parent.append(end)
        self.pid = _get_server().start(self.args[1:], os.fspath(cwd or os.getcwd()),
                                       os.environ if env is None else env, child,
                                       start_new_session)
        for fd in close:
            os.close(fd)

        def wrap(fd, mode):
            if fd is None:
                return None
            f = os.fdopen(fd, mode)
            return io.TextIOWrapper(f, encoding="utf-8", errors="replace") if text else f

        self.stdin = wrap(parent[0], "wb")
        self.stdout = wrap(parent[1], "rb")
        self.stderr = wrap(parent[2], "rb")

    def poll(self):
        if self.returncode is None:
            self.returncode = _get_server().exit_code(self.pid)
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)
        return self.returncode

    def communicate(self, input=None, timeout=None):  # noqa: A002 - subprocess's name
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        results: dict[str, object] = {}
        threads = []
        for name in ("stdout", "stderr"):
            stream = getattr(self, name)
            if stream is not None:
                thread = threading.Thread(target=lambda n=name, s=stream: results.__setitem__(
                    n, s.read()), daemon=True)
                thread.start()
                threads.append(thread)
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for name in ("stdout", "stderr"):
            stream = getattr(self, name)
            if stream is not None:
                stream.close()
        return results.get("stdout"), results.get("stderr")

    def send_signal(self, sig):
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


def popen(args, env=None, **kwargs):
    """Popen from the server where it can start `args`, else subprocess.Popen."""
    if _forkable(args, env, kwargs):
        return Popen(args, env=env, **kwargs)
    return subprocess.Popen(args, env=env, **kwargs)


def run(args, capture_output=False, timeout=None, check=False, env=None, input=None,  # noqa: A002
        **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run, through the server where it can start `args`."""
    if not _forkable(args, env, kwargs):
        return subprocess.run(args, capture_output=capture_output, timeout=timeout,
                              check=check, env=env, input=input, **kwargs)
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    proc = Popen(args, env=env, **kwargs)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        result.check_returncode()
    return result


if __name__ == "__main__":
    _serve(socket.socket(fileno=int(sys.argv[1])))
