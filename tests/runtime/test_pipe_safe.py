"""A run outlives the reader of its output (runtime/pipe_safe.py)."""

import io
import os
import subprocess
import sys

from tinygpt.runtime import pipe_safe
from tinygpt.runtime.pipe_safe import PipeSafe


class ClosedPipe(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_write_to_a_closed_pipe_goes_to_stderr_from_then_on(capsys):
    out = PipeSafe(ClosedPipe())
    out.write("step 1\n")
    out.write("step 2\n")
    out.flush()
    assert out.broken and capsys.readouterr().err == "step 1\nstep 2\n"


def test_a_working_stream_is_written_as_it_was():
    buf = io.StringIO()
    out = PipeSafe(buf)
    out.write("done\n")
    assert buf.getvalue() == "done\n" and not out.broken


def finishes_piped_into_head(tmp_path, stderr: str, *extra_lines: str) -> bool:
    """Whether a guarded script that prints 100 lines after `head -c 10` has gone (its stderr sent to ``stderr``:
    a redirection) still writes its file and exits 0."""
    marker = tmp_path / "finished"
    script = ("import sys, time\nfrom tinygpt.runtime.pipe_safe import guard_stdout\nguard_stdout()\n"
              "print('x' * 100000, flush=True)\ntime.sleep(0.5)\nfor _ in range(100):\n    print('more', flush=True)\n"
              + "".join(f"    {line}\n" for line in extra_lines) + f"open({str(marker)!r}, 'w').write('yes')\n")
    proc = subprocess.run(f"{sys.executable} -c \"$SCRIPT\" {stderr} | head -c 10 > /dev/null; "
                          "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                          env={**os.environ, "SCRIPT": script}, timeout=60)
    return proc.returncode == 0 and marker.exists() and marker.read_text() == "yes"


def test_a_script_whose_reader_stops_reading_still_finishes(tmp_path):
    """Without the guard, the print after `head` exits raises BrokenPipeError and the script ends with status 1
    before it writes its file; with it the script writes its file and ends with 0."""
    assert finishes_piped_into_head(tmp_path, "2>/dev/null")


def test_when_stderr_closes_too_the_rest_goes_nowhere_and_nothing_raises():
    err = PipeSafe(ClosedPipe(), fallback=pipe_safe._nowhere)
    out = PipeSafe(ClosedPipe(), fallback=lambda: err)
    assert out.write("step 1\n") == len("step 1\n")
    out.write("step 2\n")
    out.flush()
    err.flush()
    assert out.broken and err.broken


def test_a_run_piped_whole_into_head_still_finishes(tmp_path):
    """`2>&1 | head`: both streams' reader is gone after a few lines (stdout's fallback, stderr, is closed too);
    the script still writes its file and ends with 0."""
    assert finishes_piped_into_head(tmp_path, "2>&1", "print('note', file=sys.stderr, flush=True)")
