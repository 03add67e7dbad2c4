"""exit_without_teardown: what a normal exit does (thread joins, atexit handlers, flushed output, the exit
status), without the interpreter's module teardown."""

import subprocess
import sys
import textwrap


def test_exit_runs_threads_atexit_and_flushes_but_skips_teardown(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""
        import atexit, pathlib, threading, time
        from tinygpt.runtime.fast_exit import exit_without_teardown

        out = pathlib.Path({str(tmp_path)!r})

        class Teardown:  # a module global: freed (and __del__ run) only by the interpreter's teardown
            def __del__(self):
                (out / "teardown").write_text("ran")

        keep = Teardown()
        atexit.register(lambda: (out / "atexit").write_text("ran"))

        def writer():  # a non-daemon thread still working when the script ends
            time.sleep(0.3)
            (out / "thread").write_text("done")

        threading.Thread(target=writer).start()
        print("buffered output", end="")  # block-buffered: stdout is a pipe
        exit_without_teardown(3)
        print("never printed")
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "buffered output"
    assert (tmp_path / "thread").read_text() == "done"  # joined before the end
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not (tmp_path / "teardown").exists()  # the module teardown was skipped
