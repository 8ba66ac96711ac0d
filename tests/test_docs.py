"""The documentation holds: every relative link and anchor resolves, every `python -m` command
names a module that exists and parses its flags, and the README stays a front door."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").glob("*.md")])
README_LIMIT_BYTES = 12_000
PROJECT_PACKAGES = ("transformer_jax", "benchmarks", "experiments")
SHELL_LANGUAGES = ("bash", "sh", "shell", "console")

_FENCE = re.compile(r"^ *(```|~~~)")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")


def split_code(text: str) -> tuple[list[str], list[tuple[str, str]]]:
    """(prose lines, code blocks): fenced blocks and blocks indented by 4+ spaces after a blank
    line are code; each block is (its language, its text), an indented block's language "sh"."""
    prose, blocks, block, language = [], [], [], None
    previous_blank = True
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if fence:
            if language is not None:
                blocks.append((language, "\n".join(block)))
                block, language = [], None
            else:
                language = line.strip().lstrip("`~").strip()
            previous_blank = False
            continue
        if language is not None:
            block.append(line)
            continue
        indented = line.startswith("    ") and line.strip()
        if indented and (previous_blank or block):
            block.append(line)
            continue
        if block:
            blocks.append(("sh", "\n".join(block)))
            block = []
        prose.append(line)
        previous_blank = not line.strip()
    if block:
        blocks.append(("sh" if language is None else language, "\n".join(block)))
    return prose, blocks


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lower-cased, punctuation other than
    hyphens and underscores dropped, spaces turned into hyphens."""
    text = _INLINE_CODE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text
    text = text.replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    prose, _ = split_code(page.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    result = set()
    for line in prose:
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = github_slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def links(page: Path) -> list[str]:
    prose, _ = split_code(page.read_text(encoding="utf-8"))
    text = _INLINE_CODE.sub("", "\n".join(prose))
    return [m.group(1) for m in _LINK.finditer(text)]


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved.relative_to(REPO)}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with anchor #{anchor} in {resolved.name}")
    return broken


def commands(page: Path) -> list[dict]:
    """Every `python -m MODULE ...` of a page. In shell code blocks a command is whole (its
    continuation lines joined); in other code blocks (a layout) and in inline code it is
    `partial`: required flags may be left out."""
    prose, blocks = split_code(page.read_text(encoding="utf-8"))
    found = []
    for language, block in blocks:
        partial = language not in SHELL_LANGUAGES
        for line in block.replace("\\\n", " ").splitlines():
            found += _parse_commands(line, partial=partial)
    for paragraph in "\n".join(prose).split("\n\n"):  # inline code may span lines
        for match in _INLINE_CODE.finditer(paragraph.replace("\n", " ")):
            found += _parse_commands(match.group(2), partial=True)
    return [{**command, "page": page.relative_to(REPO).as_posix()} for command in found]


def _parse_commands(line: str, partial: bool) -> list[dict]:
    found = []
    for match in re.finditer(r"\bpython3? -m (\S+)", line):
        rest = line[match.end() :]
        try:
            tokens = shlex.split(rest, comments=True)
        except ValueError:  # the command ends a quoted string: --command="cd x && python -m ..."
            tokens = shlex.split(rest[: rest.rindex('"')], comments=True)
        args = []
        for token in tokens:
            if token in ("&&", "||", "|", ";"):
                break
            args.append(token)
        found.append({"module": match.group(1), "args": args, "partial": partial})
    return found


QUICK_START = (
    "pip install -r requirements.txt && python -m transformer_jax.sweep "
    "--sweep=experiments/quickstart.py --workdir=runs/quickstart --parallel=2",
    "pip install -r requirements.txt && python -m pytest -q",
)


def test_readme_is_a_front_door():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    size = len(readme.encode())
    assert size <= README_LIMIT_BYTES, f"README.md is {size} bytes; move detail into docs/"
    _, blocks = split_code(readme)
    for command in QUICK_START:  # verbatim, each a code block of its own
        assert ("bash", command) in blocks, command


def test_committed_text_names_no_directory_of_the_machine_that_wrote_it():
    """Docs and committed results give paths relative to the repository (recorded_command);
    the records of runs (runs.jsonl) name the machine's directories by placeholder
    (transformer_jax/sweep_record.py), the trainer's own output in failure.json included."""
    texts = [*PAGES, *(REPO / "results").rglob("*.md"), *(REPO / "results").rglob("*.json")]
    texts += [*(REPO / "results").rglob("command.txt"), *(REPO / "results").rglob("*.csv")]
    texts += [*(REPO / "results").rglob("runs.jsonl"), *(REPO / "results").rglob("*.tex")]

    def text(path):
        if path.name != "failure.json":
            return path.read_text(errors="replace")
        # Its stderr_tail, like run.log, is the trainer's own output, kept verbatim.
        failure = json.loads(path.read_text())
        failure.pop("stderr_tail", None)
        return json.dumps(failure)

    found = [
        f"{path.relative_to(REPO)}: {match.group(0)}"
        for path in texts
        for match in re.finditer(r"(?<![\w.~])/(?:work|tmp|home|root)/\S*", text(path))
    ]
    assert not found, "\n".join(found[:20])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_and_anchor_resolves(page):
    assert broken_links(page) == []


def test_github_slugs():
    assert github_slug("The report and Holm's correction") == "the-report-and-holms-correction"
    assert github_slug("Scaling out: devices, `train.fsdp`") == "scaling-out-devices-trainfsdp"
    assert github_slug("Runs: the run directory, resume") == "runs-the-run-directory-resume"
    assert github_slug("UT + ACT") == "ut--act"


def test_split_code_and_links_skip_code():
    page_text = (
        "See [a](a.md).\n\n```bash\n[b](b.md) python -m x\n```\n\n    [c](c.md)\n`[d](d.md)`\n"
    )
    prose, blocks = split_code(page_text)
    assert blocks == [("bash", "[b](b.md) python -m x"), ("sh", "    [c](c.md)")]
    assert "See [a](a.md)." in prose


# Commands the check must refuse, and commands it must accept: they ride in the same process as
# the documentation's commands, so that the check is shown to catch what it should.
REFUSED = [
    ("transformer_jax.no_such_module", [], False),
    ("transformer_jax.sweep", ["--no_such_flag=1"], False),
    ("transformer_jax.main", ["--config=configs/no_such.py", "--workdir=x"], False),
    (
        "transformer_jax.main",
        ["--config=configs/algorithmic.py", "--config.model.no_such=1"],
        False,
    ),
    ("transformer_jax.main", ["--workdir=x"], False),
    ("benchmarks.scale", ["--no_such"], False),
]
ACCEPTED = [
    ("transformer_jax.main", ["--workdir=x"], True),
    ("transformer_jax.main", ["--config=configs/algorithmic.py:copy,quick", "--workdir=x"], False),
    ("benchmarks.scale", ["--layers=2,4"], False),
]


@pytest.fixture(scope="module")
def checked_commands() -> list[tuple[dict, str | None]]:
    """(command, error or None) for every project command of the pages, then the canaries."""
    found = [command for page in PAGES for command in commands(page)]
    canaries = [
        {"module": m, "args": a, "partial": p, "page": "canary"} for m, a, p in REFUSED + ACCEPTED
    ]
    project = [c for c in found if c["module"].split(".")[0] in PROJECT_PACKAGES] + canaries
    others = {c["module"] for c in found} - {c["module"] for c in project}
    assert others <= {"pytest"}, f"modules the docs run that are not the project's: {others}"
    payload = [{k: c[k] for k in ("module", "args", "partial")} for c in project]
    result = subprocess.run(
        [sys.executable, str(REPO / "tests" / "docs_commands.py")],
        input=json.dumps(payload),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return list(zip(project, json.loads(result.stdout), strict=True))


def test_every_python_m_command_names_a_module_whose_flags_parse(checked_commands):
    documented = [(c, error) for c, error in checked_commands if c["page"] != "canary"]
    assert any(c["module"] == "transformer_jax.sweep" and not c["partial"] for c, _ in documented)
    failures = [
        f"{c['page']}: python -m {c['module']} {shlex.join(c['args'])}\n    {error}"
        for c, error in documented
        if error is not None
    ]
    failures += _missing_files([c for c, _ in documented])
    assert not failures, "\n".join(failures)


def test_the_command_check_refuses_what_it_should(checked_commands):
    canaries = [error for c, error in checked_commands if c["page"] == "canary"]
    refused, accepted = canaries[: len(REFUSED)], canaries[len(REFUSED) :]
    assert all(error is not None for error in refused), list(zip(REFUSED, refused, strict=True))
    assert accepted == [None] * len(ACCEPTED), list(zip(ACCEPTED, accepted, strict=True))


def _missing_files(project_commands: list[dict]) -> list[str]:
    """Flag values naming a file of the repository (a config, a sweep file) that is not there."""
    missing = []
    for c in project_commands:
        for arg in c["args"]:
            value = arg.partition("=")[2].split(":")[0]
            repository_file = value.startswith(("configs/", "experiments/", "benchmarks/"))
            if repository_file and not (REPO / value).exists():
                missing.append(f"{c['page']}: {arg}: no file {value}")
    return missing


def _python_blocks(page: Path, heading: str) -> list[str]:
    section = page.read_text(encoding="utf-8").split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    return [code for language, code in split_code(section)[1] if language == "python"]


@pytest.mark.parametrize(
    "heading, path",
    [
        ("Adding a component", "transformer_jax/layers/feedforward.py"),
        ("Adding a sweep", "experiments/quickstart.py"),
    ],
)
def test_the_shipped_examples_of_adding_md_are_the_shipped_code(heading, path):
    """docs/adding.md shows these as shipped: its block (after the line naming the file) is in
    the file verbatim. Its evaluator example is registered and trained by
    tests/train/test_evaluators.py, its dataset example by tests/data/test_api.py."""
    blocks = [b for b in _python_blocks(REPO / "docs" / "adding.md", heading) if path in b]
    assert len(blocks) == 1, (heading, path)
    head, _, code = blocks[0].partition("\n")
    assert head == f"# {path}"
    assert code.strip() in (REPO / path).read_text(encoding="utf-8")
