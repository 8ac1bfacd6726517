"""The commands the docs show exist: every `ringfeed …` and `ringfeed-operator …` invocation (in code blocks and inline
code of README.md, CONTRIBUTING.md and docs/**/*.md) names real subcommands and options, every `make <target>` a
target of the Makefile, and every e2e/cluster/cluster.sh exec|run the RINGFEED_CACHE it needs."""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ringfeed.cli import main as ringfeed_main
from ringfeed_operator.cli import main as operator_main

REPO = Path(__file__).resolve().parents[3]
COMMANDS = {"ringfeed": ringfeed_main, "ringfeed-operator": operator_main}
# Shell code blocks (and unlabelled ones); other languages (python, yaml, text drawings) hold no commands.
SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def documents() -> list[Path]:
    return sorted({REPO / "README.md", *(REPO / "docs").rglob("*.md"),
                   *([REPO / "CONTRIBUTING.md"] if (REPO / "CONTRIBUTING.md").exists() else [])})


@dataclasses.dataclass(frozen=True)
class Invocation:
    where: str  # file:line
    env: tuple[str, ...]  # NAME=value before the command
    program: str
    args: tuple[str, ...]


def snippets(text: str) -> Iterator[tuple[int, str]]:
    """(line number, code) of the shell code blocks (one snippet per logical line, continuations joined) and of
    the inline code spans outside code blocks."""
    fence, language, pending, start = None, "", "", 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence is None and (match := re.match(r"^(```+|~~~+)\s*(\S*)", stripped)):
            fence, language = match[1], match[2].lower()
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
                continue
            if language not in SHELL_LANGUAGES:
                continue
            if not pending:
                start = number
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            yield start, pending + line
            pending = ""
            continue
        for span in re.findall(r"(?<!`)`([^`\n]+)`(?!`)", line):
            yield number, span


def commands(code: str) -> Iterator[list[str]]:
    """The simple commands of a snippet, as tokens (comments dropped; split at ; && || | and command
    substitutions)."""
    try:
        lexer = shlex.shlex(code, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote in prose-like code: plain words
        tokens = code.split()
    command: list[str] = []
    for token in tokens:
        if token and set(token) <= set(";&|()"):
            if command:
                yield command
            command = []
        elif token.startswith("$(") and len(token) == 2:
            continue
        else:
            command.append(token)
    if command:
        yield command


def invocations(path: Path, programs: set[str]) -> Iterator[Invocation]:
    where = path.relative_to(REPO)
    for number, code in snippets(path.read_text()):
        for tokens in commands(code):
            env = []
            while tokens and ASSIGNMENT.match(tokens[0]):
                env.append(tokens.pop(0))
            if tokens and any(runs(tokens[0], program) for program in programs):
                yield Invocation(f"{where}:{number}", tuple(env), tokens[0], tuple(tokens[1:]))


def runs(token: str, program: str) -> bool:
    """`ringfeed`, `.venv/bin/ringfeed`, `e2e/cluster/cluster.sh` run the program; `charts/ringfeed` does not."""
    return token == program or token.endswith(f"/bin/{program}") or (program.endswith(".sh")
                                                                     and token.endswith(f"/{program}"))


def check_cli(command: click.Command, args: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """(the command path, a problem or None): subcommands must exist and each option belongs to the command it
    follows, as click reads them (a group's options go before its subcommand); values and arguments are not
    checked."""
    path: list[str] = []
    chain = [command]
    tokens = list(args)
    while tokens:
        token = tokens.pop(0)
        if token == "--":
            break
        if token.startswith("-") and len(token) > 1 and not re.fullmatch(r"-?\d+(\.\d+)?", token):
            name = token.split("=", 1)[0]
            option = next((p for p in chain[-1].params
                           if isinstance(p, click.Option) and name in (*p.opts, *p.secondary_opts)), None)
            if name in ("-h", "--help", "--version"):
                continue
            if option is None:
                return tuple(path), f"`{' '.join(('…', *path))}` has no option {name}"
            if not option.is_flag and not option.count and "=" not in token and tokens:
                tokens.pop(0)
            continue
        current = chain[-1]
        if isinstance(current, click.Group):
            if token in ("…", "..."):  # `ringfeed local …`: any of the group's commands
                break
            sub = current.commands.get(token)
            if sub is None:
                return tuple(path), f"no command `{' '.join(('…', *path, token))}`"
            chain.append(sub)
            path.append(token)
            continue
        # an argument of a leaf command: the options after it still belong to it
    return tuple(path), None


def ringfeed_problems(docs: list[Path]) -> tuple[set[tuple[str, tuple[str, ...]]], list[str]]:
    paths, problems = set(), []
    for doc in docs:
        for call in invocations(doc, set(COMMANDS)):
            program = call.program.rsplit("/", 1)[-1]
            path, problem = check_cli(COMMANDS[program], call.args)
            paths.add((program, path))
            if problem:
                problems.append(f"{call.where}: {program} {' '.join(call.args)} — {problem}")
    return paths, problems


def make_targets() -> set[str]:
    targets = set()
    for line in (REPO / "Makefile").read_text().splitlines():
        if match := re.match(r"^([A-Za-z0-9_.\-/$()]+(?:\s+[A-Za-z0-9_.\-/$()]+)*)\s*:(?![=:])", line):
            targets.update(match[1].split())
    return targets


def make_problems(docs: list[Path]) -> list[str]:
    targets, problems = make_targets(), []
    for doc in docs:
        for call in invocations(doc, {"make"}):
            if call.program != "make" or any(arg in ("-C", "-f") or arg.startswith(("-C", "-f")) for arg in call.args):
                continue
            for arg in call.args:
                if arg.startswith("-") or ASSIGNMENT.match(arg) or arg in ("…", "..."):
                    continue
                if not fnmatch.filter(targets, arg):  # a pattern (bench-*) names at least one
                    problems.append(f"{call.where}: make {' '.join(call.args)} — no target {arg!r} in the Makefile")
    return problems


def cluster_problems(docs: list[Path]) -> list[str]:
    problems = []
    for doc in docs:
        for call in invocations(doc, {"cluster.sh"}):
            if call.program == "e2e/cluster/cluster.sh" and call.args[:1] in (("exec",), ("run",)) \
                    and not any(env.startswith("RINGFEED_CACHE=") for env in call.env):
                problems.append(f"{call.where}: {call.program} {' '.join(call.args)} — stops at 'set RINGFEED_CACHE "
                                "(the Makefile does)': prefix RINGFEED_CACHE=$PWD/.cache or use make cluster-shell")
    return problems


def test_the_docs_are_scanned():
    docs = documents()
    assert REPO / "README.md" in docs and REPO / "docs" / "loader.md" in docs and REPO / "docs" / "api" / "ring.md" \
        in docs
    paths, _ = ringfeed_problems(docs)
    assert {("ringfeed", ("local", "up")), ("ringfeed", ("split", "create")), ("ringfeed", ("load",))} <= paths
    assert len(paths) > 25, sorted(paths)


def test_every_ringfeed_command_in_the_docs_exists():
    _, problems = ringfeed_problems(documents())
    assert not problems, "\n".join(problems)


def test_every_documented_command_path_answers_help():
    paths, _ = ringfeed_problems(documents())
    failed = []
    for program, path in sorted(paths):
        result = CliRunner().invoke(COMMANDS[program], [*path, "--help"], prog_name=program)
        if result.exit_code != 0:
            failed.append(f"{program} {' '.join(path)} --help: exit {result.exit_code} {result.output[-200:]}")
    assert not failed, "\n".join(failed)


def test_every_make_target_in_the_docs_exists():
    problems = make_problems(documents())
    assert not problems, "\n".join(problems)


def test_cluster_commands_in_the_docs_run_as_shown():
    problems = cluster_problems(documents())
    assert not problems, "\n".join(problems)


BOGUS = """\
# A page with mistakes

```bash
ringfeed dataset ingest pets ./pets --concurrency 4096     # no `dataset ingest`
ringfeed --hosts 10.0.0.1 load demo by-patient --no-such-flag
RINGFEED_HOSTS=x .venv/bin/ringfeed split create d s \\
    --ratio 7,2,1
make demo && make no-such-target
e2e/cluster/cluster.sh exec kubectl get pods
ringfeed-operator --job-image x --no-such-operator-flag
```

Inline too: `ringfeed cache up --tls-ca-file ca.crt ./ring` and `make bench-nothing`.
Fine ones are not reported: `ringfeed --tls-ca-file ca.crt cache up ./ring`, `make demo`, `ringfeed local down --purge`,
`RINGFEED_CACHE=$PWD/.cache e2e/cluster/cluster.sh exec kubectl get pods`.
```python
from ringfeed import Loader   # not a command
```
"""


@pytest.fixture
def bogus_page(tmp_path, monkeypatch):
    page = tmp_path / "docs" / "bogus.md"
    page.parent.mkdir()
    page.write_text(BOGUS)
    (tmp_path / "Makefile").write_text((REPO / "Makefile").read_text())
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    return page


def test_the_checks_find_bogus_commands(bogus_page):
    """The tests above can fail: each kind of mistake on a page is reported, with its line; correct ones are not."""
    _, problems = ringfeed_problems([bogus_page])
    assert [p.split(" — ")[1] for p in problems] == [
        "no command `… dataset ingest`",
        "`… load` has no option --no-such-flag",
        "`… split create` has no option --ratio",
        "`…` has no option --no-such-operator-flag",
        "`… cache up` has no option --tls-ca-file",
    ], problems
    assert [p.split(":")[1] for p in problems] == ["4", "5", "6", "10", "13"]
    assert [p.split(" — ")[1] for p in make_problems([bogus_page])] == [
        "no target 'no-such-target' in the Makefile", "no target 'bench-nothing' in the Makefile"]
    assert len(cluster_problems([bogus_page])) == 1
