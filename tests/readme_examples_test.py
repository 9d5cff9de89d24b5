"""Runs every fenced code block of README.md against a depotd of its own, so that the front page
cannot drift from the code.

Each block is run as a reader would run it:
  ```sh        (the quick start) each command, its trailing `# comment` and comment-only
               continuation lines removed, in bash with depotctl on PATH;
  ```          (no language: a shell session) each `$ ` line, its prompt and trailing comment
               removed, the same way;
  ```cpp       compiled into a program, the `#include` lines at file scope and the rest as the
               body of main(), against the build's libdepot.so, then run: it must exit 0 (a
               Result read without a value throws, and so fails it). -Werror=unused-result, as
               the build: a Status the example drops would warn whoever copies it. The block's
               program defines `text` (the bytes it puts); PRELUDE below says so;
  ```python    run with the interpreter the module was built for, the build's package on
               PYTHONPATH.
A block of any other language fails the test: a new kind of example needs a rule here.

Every command runs with DEPOT_SOCKET naming the test's daemon, and must exit 0.

Commands not run, each with its reason (the test fails if one of them is no longer in the README,
so that this list stays the README's):
  ./scripts/run    installs packages, builds build-release/ and runs a daemon in the foreground
                   until Ctrl-C: that is this test's own setup, done here with the build's depotd;
  ./scripts/test   runs the whole suite, this test included.

Usage: readme_examples_test.py SOURCE_DIR DEPOTD DEPOTCTL LIBDEPOT CXX PYTHON_DIR [SANITIZER]
  PYTHON_DIR: the build's python/ folder, or empty where the binding is not built (the Python
  block is then reported skipped). Exits 0 when every block ran, 1 when one failed (saying
  which, with its output), 77 (skipped) in a sanitizer build or when a block could not run.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

EXCLUDED = {
    "./scripts/run": "builds and runs a daemon in the foreground: this test's own setup",
    "./scripts/test": "runs the whole suite, this test included",
}

# What the README's C++ block takes from the program around it (examples/put_get.cc).
PRELUDE_INCLUDES = "#include <cstring>\n#include <span>\n#include <string_view>\n"
PRELUDE = '  [[maybe_unused]] std::string_view text = "hello from the README";\n'

TIMEOUT = 120  # seconds for one command: generous, the machine may be loaded


def blocks(readme):
    """(line number, language, text) of each fenced block."""
    found, lang, start, body = [], None, 0, []
    for number, line in enumerate(readme.splitlines(), 1):
        fence = re.match(r"^```(\S*)\s*$", line)
        if lang is None and fence:
            lang, start, body = fence.group(1), number, []
        elif lang is not None and line.rstrip() == "```":
            found.append((start, lang, "\n".join(body) + "\n"))
            lang = None
        elif lang is not None:
            body.append(line)
    if lang is not None:
        raise SystemExit(f"README.md:{start}: a code block that is never closed")
    return found


def strip_comment(line):
    """The command without its trailing `# comment` (a # after a space, outside quotes)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def shell_commands(lang, text):
    """The commands of a shell block: for a session (no language) only the `$ ` lines."""
    commands = []
    for line in text.splitlines():
        if lang == "":
            if not line.startswith("$ "):
                continue  # a command's output, shown in the README
            line = line[2:]
        command = strip_comment(line)
        if command:  # a blank line, or a comment continued from the line above
            commands.append(command)
    return commands


class Runner:
    def __init__(self, args):
        # Absolute: the commands run in a temporary directory.
        self.source, self.depotd, self.depotctl, self.libdepot = map(os.path.abspath, args[:4])
        self.cxx = args[4]
        self.python_dir = args[5] and os.path.abspath(args[5])
        self.tmp = tempfile.mkdtemp(prefix="depot-readme-")
        self.socket = os.path.join(self.tmp, "depot.sock")
        self.env = dict(os.environ, DEPOT_SOCKET=self.socket, PYTHONDONTWRITEBYTECODE="1",
                        PATH=os.path.dirname(self.depotctl) + os.pathsep + os.environ["PATH"])
        self.env.pop("PYTHONPATH", None)
        self.daemon = None
        self.failures, self.skips, self.ran = [], [], 0

    def start_daemon(self):
        log = open(os.path.join(self.tmp, "depotd.log"), "wb")
        self.daemon = subprocess.Popen([self.depotd, "--socket", self.socket,
                                        "--capacity", "256MiB"], stdout=log,
                                       stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while subprocess.run([self.depotctl, "ping", "--count", "1"], env=self.env,
                             capture_output=True).returncode != 0:
            if self.daemon.poll() is not None or time.monotonic() > deadline:
                sys.exit("FAIL: depotd did not start:\n" + self.daemon_log())
            time.sleep(0.05)

    def daemon_log(self):
        with open(os.path.join(self.tmp, "depotd.log"), errors="replace") as f:
            return f.read()

    def stop(self):
        if self.daemon and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            self.daemon.wait(timeout=30)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def check(self, where, what, argv, **kwargs):
        """Runs argv; a failure is recorded with its output."""
        try:
            done = subprocess.run(argv, env=kwargs.pop("env", self.env), cwd=self.tmp,
                                  capture_output=True, text=True, timeout=TIMEOUT, **kwargs)
            output, rc = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired as e:
            output, rc = f"{e}\n", "timeout"
        self.ran += 1
        if rc == 0:
            print(f"  ok   {where}: {what}")
            return True
        print(f"  FAIL {where}: {what} (exit {rc})\n" + re.sub(r"(?m)^", "       | ", output))
        self.failures.append(f"{where}: {what}")
        return False

    def shell(self, where, lang, text):
        commands = shell_commands(lang, text)
        if not commands:
            self.failures.append(f"{where}: a shell block with no command")
        for command in commands:
            if command in EXCLUDED:
                print(f"  not run {where}: {command} ({EXCLUDED[command]})")
                self.excluded_seen.add(command)
                continue
            self.check(where, command, ["bash", "-euo", "pipefail", "-c", command])

    def cpp(self, where, text):
        lines = text.splitlines()
        includes = [line for line in lines if line.startswith("#include")]
        body = [line for line in lines if not line.startswith("#include")]
        program = os.path.join(self.tmp, "readme_cpp.cc")
        with open(program, "w") as f:
            f.write(f"// README.md, the C++ block of line {where}.\n" + PRELUDE_INCLUDES)
            f.write("\n".join(includes) + "\n\nint main() {\n" + PRELUDE)
            f.write("".join(f"  {line}\n" for line in body) + "  return 0;\n}\n")
        binary = os.path.join(self.tmp, "readme_cpp")
        libdir = os.path.dirname(self.libdepot)
        if self.check(where, "the C++ block compiles against libdepot",
                      [self.cxx, "-std=c++20", "-Werror=unused-result",
                       "-I", os.path.join(self.source, "include"), program, "-o", binary,
                       self.libdepot, f"-Wl,-rpath,{libdir}"]):
            self.check(where, "the C++ block runs", [binary])

    def python(self, where, text):
        if not self.python_dir:
            print(f"  SKIPPED {where}: the Python block (the binding is not built here)")
            self.skips.append(f"{where}: the Python block")
            return
        script = os.path.join(self.tmp, "readme_python.py")
        with open(script, "w") as f:
            f.write(text)
        self.check(where, "the Python block runs", [sys.executable, script],
                   env=dict(self.env, PYTHONPATH=self.python_dir))

    def run(self):
        path = os.path.join(self.source, "README.md")
        with open(path) as f:
            found = blocks(f.read())
        self.excluded_seen = set()
        self.start_daemon()
        for line, lang, text in found:
            where = f"README.md:{line}"
            if lang in ("sh", "bash", "shell", ""):
                self.shell(where, lang, text)
            elif lang in ("cpp", "c++"):
                self.cpp(where, text)
            elif lang == "python":
                self.python(where, text)
            else:
                print(f"  FAIL {where}: no rule here to run a ```{lang} block")
                self.failures.append(f"{where}: ```{lang}")
        for command in sorted(set(EXCLUDED) - self.excluded_seen):
            print(f"  FAIL: {command} is excluded here but no longer in the README: update "
                  "EXCLUDED")
            self.failures.append(f"EXCLUDED lists {command}")
        if self.daemon.poll() is not None:
            self.failures.append("depotd exited during the test:\n" + self.daemon_log())


def main():
    if len(sys.argv) < 7:
        sys.exit(__doc__.split("Usage: ")[1].split("\n")[0])
    sanitizer = sys.argv[7] if len(sys.argv) > 7 else ""
    if sanitizer:
        print(f"SKIP: not run in a sanitizer build (DEPOT_SANITIZE={sanitizer}): the README's "
              "programs would need the sanitizer's runtime, and the Python binding is not built")
        return 77
    runner = Runner(sys.argv[1:])
    try:
        runner.run()
    finally:
        runner.stop()
    if runner.failures:
        print(f"FAIL: {len(runner.failures)} of the README's examples failed:\n  " +
              "\n  ".join(runner.failures))
        return 1
    if runner.skips:
        print("SKIPPED: not every example ran: " + "; ".join(runner.skips))
        return 77
    print(f"PASS: {runner.ran} commands and programs of README.md ran, each exiting 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
