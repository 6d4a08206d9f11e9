#!/usr/bin/env python3
# run-on-pty.py OUT INTERRUPT_AFTER_TEXT|- COMMAND...: runs COMMAND on a pseudo-terminal, writes
# what it printed to OUT, sends Ctrl-C (the terminal's ^C) once INTERRUPT_AFTER_TEXT was
# printed; exits with the command's status.
# (Named with a hyphen: a tests/pty.py would shadow the standard pty module it imports.)
import os, pty, select, signal, sys, time
out_path, after, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
pid, fd = pty.fork()
if pid == 0:
    os.environ["COLUMNS"] = "120"
    os.execvp(argv[0], argv)
out, sent, t0 = b"", False, time.time()
while True:
    if after != "-" and not sent and after.encode() in out:
        time.sleep(0.3)
        os.write(fd, b"\x03")
        sent = True
    if time.time() - t0 > 120:
        os.kill(pid, signal.SIGKILL)
    r, _, _ = select.select([fd], [], [], 0.1)
    if r:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        out += data
_, status = os.waitpid(pid, 0)
open(out_path, "wb").write(out)
sys.exit(os.waitstatus_to_exitcode(status))
