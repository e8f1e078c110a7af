#!/usr/bin/python3
"""cgacctctl's manual page and bash completion (issue 26, item 7: there were
none), made by cgacctctl from the table its --help comes from
(client/ctl/help.h), checked against each other and for real:

  docs_test.py CGACCTCTL MAN_FILE BASH_FILE

- the files the build made (MAN_FILE, BASH_FILE: installed by cmake
  --install) are what `cgacctctl --man` and `--completion=bash` print;
- every command --help lists is in the completion's commands and in the
  man page's COMMANDS, every flag --help lists is in the completion's flags
  and the man page's OPTIONS, and the exit statuses of --help are the man
  page's;
- the man page renders with groff's man macros without a warning (-ww);
- the completion script passes `bash -n`, and sourced in a real bash,
  completes: the commands from a prefix, --flags (with '=' for those that
  take a value), the cgroup files after `cat PATH`, the limit files after
  `set PATH`, anon|file as charge's fourth word, nothing where nothing
  applies;
- --completion=zsh is a usage error (exit 2).
"""
import re
import shutil
import subprocess
import sys
import unittest

CTL, MAN_FILE, BASH_FILE = sys.argv[1:4]
del sys.argv[1:4]


def run(*args):
    return subprocess.run([CTL] + list(args), capture_output=True, text=True, timeout=30)


def help_commands_and_flags():
    text = run("--help").stdout
    commands = re.findall(r"(?m)^  ([a-z]+)(?: |$)", text.split("exit status:")[0])
    flags = re.findall(r"(?m)^  --([a-z_]+)", text.split("\nflags:\n")[1])
    return text, commands, flags


def complete(words, cword):
    """COMPREPLY of _cgacctctl for COMP_WORDS=words, COMP_CWORD=cword, in a
    real bash with the built script sourced."""
    script = ("source %s\nCOMP_WORDS=(%s)\nCOMP_CWORD=%d\n_cgacctctl\n"
              "printf '%%s\\n' \"${COMPREPLY[@]}\"\n" % (
                  BASH_FILE, " ".join("'%s'" % w for w in words), cword))
    out = subprocess.run(["bash", "--norc", "--noprofile", "-c", script],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise AssertionError("bash: %s" % out.stderr)
    return sorted(w for w in out.stdout.splitlines() if w)


class DocsTest(unittest.TestCase):
    def test_built_files_are_what_cgacctctl_prints(self):
        with open(MAN_FILE) as f:
            self.assertEqual(f.read(), run("--man").stdout)
        with open(BASH_FILE) as f:
            self.assertEqual(f.read(), run("--completion=bash").stdout)

    def test_one_table_for_help_man_and_completion(self):
        _, commands, flags = help_commands_and_flags()
        self.assertIn("charge", commands)
        self.assertIn("health", commands)
        self.assertIn("target", flags)
        with open(MAN_FILE) as f:
            man = f.read()
        with open(BASH_FILE) as f:
            bash = f.read()
        completion_commands = re.search(r'local commands="([^"]*)"', bash).group(1).split()
        completion_flags = re.search(r'local flags="([^"]*)"', bash).group(1).split()
        self.assertEqual(sorted(completion_commands), sorted(commands))
        man_commands = re.findall(r"(?m)^\.TP\n\\fB([a-z]+)\\fR", man)
        self.assertEqual(sorted(man_commands), sorted(commands))
        for flag in flags:
            dashed = ("-" if len(flag) == 1 else "--") + flag
            self.assertTrue(dashed in completion_flags or dashed + "=" in completion_flags,
                            flag)
            self.assertIn("\\fB%s\\fR" % dashed.replace("-", "\\-"), man, flag)
        help_text = run("--help").stdout
        statuses = re.findall(r"(?m)^  ([0-9]) ", help_text.split("exit status:")[1])
        man_statuses = re.findall(r"(?m)^\.TP\n([0-9])\n", man.split(".SH EXIT STATUS")[1])
        self.assertEqual(statuses, man_statuses)
        self.assertEqual(statuses, ["0", "1", "2", "3", "4", "5"])

    def test_man_page_renders_without_warnings(self):
        groff = shutil.which("groff")
        self.assertTrue(groff, "groff is not installed (deploy/install-deps.sh installs groff-base)")
        out = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", MAN_FILE],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual((out.returncode, out.stderr), (0, ""))
        text = subprocess.run([groff, "-man", "-Tutf8", MAN_FILE], capture_output=True,
                              text=True, timeout=30).stdout
        text = re.sub(r".\x08", "", text)  # overstrike (bold, underline)
        for heading in ("NAME", "SYNOPSIS", "COMMANDS", "OPTIONS", "ENVIRONMENT",
                        "EXIT STATUS"):
            self.assertIn("\n" + heading + "\n", text)
        self.assertIn("CGACCT_TARGET", text)

    def test_bash_completes_commands_flags_files_and_kinds(self):
        out = subprocess.run(["bash", "-n", BASH_FILE], capture_output=True, text=True)
        self.assertEqual((out.returncode, out.stderr), (0, ""))
        self.assertEqual(complete(["cgacctctl", "ch"], 1), ["charge"])
        self.assertEqual(complete(["cgacctctl", "c"], 1),
                         ["cat", "charge", "cluster", "create"])
        self.assertEqual(complete(["cgacctctl", "--json", "t"], 2), ["top", "tree"])
        self.assertEqual(complete(["cgacctctl", "--ta"], 1), ["--target="])
        self.assertEqual(complete(["cgacctctl", "--js"], 1), ["--json"])
        self.assertEqual(complete(["cgacctctl", "cat", "/a", "memory.ev"], 3),
                         ["memory.events", "memory.events.local"])
        self.assertEqual(complete(["cgacctctl", "cat", "/a", "memory.current", "memory.p"], 4),
                         ["memory.peak"])
        self.assertEqual(complete(["cgacctctl", "set", "/a", "memory.m"], 3),
                         ["memory.max=", "memory.min="])
        self.assertEqual(complete(["cgacctctl", "charge", "/a", "10", ""], 4), ["anon", "file"])
        self.assertEqual(complete(["cgacctctl", "uncharge", "/a", "8M", "f"], 4), ["file"])
        self.assertEqual(complete(["cgacctctl", "charge", "/a", ""], 3), [])
        self.assertEqual(complete(["cgacctctl", "info", ""], 2), [])

    def test_only_bash(self):
        out = run("--completion=zsh")
        self.assertEqual(out.returncode, 2)
        self.assertIn("only bash", out.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
