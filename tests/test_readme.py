"""What README.md, results/README.md and DESIGN.md tell a user to type still exists: every dotted `kvsim.*`
name resolves (the package was regrouped into model/, engine/, analysis/ once, and the docs must follow),
every `python -m MODULE` names a module, and the README's block-manager example prints what it says."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "results" / "README.md", ROOT / "DESIGN.md"]


def _text() -> str:
    return "\n".join(p.read_text() for p in DOCS)


def _dotted_names() -> list[str]:
    names = set(re.findall(r"\bkvsim(?:\.[A-Za-z_][A-Za-z0-9_]*)+", _text()))
    # a file path written with dots (kvsim/engine/metrics.py is a path, kvsim.engine.metrics a module)
    return sorted(n for n in names if not n.endswith((".py", ".md", ".json", ".png", ".rs")))


def _resolve(name: str) -> object:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


# Names the docs give that are None in some builds: the extension's profile, in a build without one
# (DESIGN.md's profile-guided build; `_core.pyi`: `str | None`). They must still resolve.
MAY_BE_NONE = {"kvsim._core.PGO_PROFILE"}


@pytest.mark.parametrize("name", _dotted_names())
def test_every_dotted_name_in_the_docs_resolves(name):
    value = _resolve(name)  # a missing module or attribute raises
    assert value is not None or name in MAY_BE_NONE


def test_the_names_that_may_be_none_are_in_the_docs():
    assert set(_dotted_names()) >= MAY_BE_NONE


@pytest.mark.parametrize("module", sorted(set(re.findall(r"python -m ((?:kvsim|bench)(?:\.\w+)+)", _text()))))
def test_every_python_dash_m_names_a_module(module):
    assert importlib.util.find_spec(module) is not None, module


def test_the_lab_is_reachable_from_import_kvsim():
    """README: `kvsim.lab.snapshot("copilot", step=1)` after `import kvsim` (no `import kvsim.lab`); the
    lab's server stack is not imported by it."""
    code = (
        "import sys, kvsim; s = kvsim.lab.snapshot('copilot', step=1); "
        "print(round(s['concurrency_multiplier'], 2), 'starlette' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["2.19", "False"]


def test_the_block_manager_example_prints_what_the_readme_says():
    import kvsim

    m = kvsim.KVCacheManager(num_blocks=11, block_size=16)
    shared = (1, 48)
    assert m.allocate(0, [shared, (100, 7)], 55) == [1, 2, 3, 4]
    assert m.lookup([shared, (101, 5)]) == 48
    assert m.allocate(1, [shared, (101, 5)], 5) == [5]
    m.free(0)
    m.free(1)
    assert m.free_block_ids() == [6, 7, 8, 9, 10, 4, 5, 3, 2, 1]
    readme = (ROOT / "README.md").read_text()
    assert "# -> [6, 7, 8, 9, 10, 4, 5, 3, 2, 1]" in readme


def test_the_readme_pool_line_is_the_configs():
    import kvsim

    cfg = kvsim.SimConfig(model="opt-13b", gpu="a100-40gb", kv_cache_bytes="12GiB", block_size=16)
    text = (ROOT / "README.md").read_text()
    assert 'kvsim.SimConfig(model="opt-13b", gpu="a100-40gb", kv_cache_bytes="12GiB", block_size=16)' in text
    assert f"cfg.pool.line()  # '{cfg.pool.line()}'" in text


def test_the_readme_startup_table_is_what_its_command_prints():
    """README's table of models x GPUs is `python -m kvsim.analysis.startup_table`'s output, verbatim."""
    from kvsim.analysis.startup_table import table

    readme = (ROOT / "README.md").read_text()
    assert "python -m kvsim.analysis.startup_table" in readme
    assert table() in readme


def _run_examples() -> list[tuple[str, list[str]]]:
    """README's `kvsim run` examples followed by what they print: the command (its continuation lines
    joined) and its `# ` lines, those saying `...` elided there."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S):
        lines = block.splitlines()
        i = next((i for i, line in enumerate(lines) if line.startswith("kvsim run")), None)
        if i is None:
            continue
        cmd = lines[i]
        while cmd.endswith("\\"):
            i += 1
            cmd = cmd[:-1] + lines[i].strip()
        shown = []
        for line in lines[i + 1 :]:
            if not line.startswith("# "):
                break
            shown.append(line[2:])
        if shown:
            out.append((cmd.split("#")[0], shown))
    return out


@pytest.mark.parametrize(
    ("cmd", "shown"), _run_examples(), ids=lambda v: v[:70] if isinstance(v, str) else ""
)
def test_the_readme_run_examples_print_what_it_shows(cmd, shown, capsys):
    """Each line the README shows under a `kvsim run` example is in what the command prints now (a `...`
    stands for what the README leaves out), so that no figure there outlives the code that made it."""
    import shlex

    from kvsim.cli import main
    from kvsim.workloads import traces_dir

    args = shlex.split(cmd)[1:]
    if any("mooncake" in a for a in args) and not (traces_dir() / "mooncake").is_dir():
        pytest.skip("the Mooncake traces are absent")
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert len(shown) > 2
    # An example runs what vLLM would: no request longer than the model's context, which vLLM refuses or
    # cuts short and kvsim runs whole (Llama-3-8B's 8,192 tokens on Mooncake once: 1,015 of 2,000 too long).
    assert "need more than the model's context" not in printed, printed[-800:]
    for line in shown:
        if line.startswith("..."):
            continue
        pattern = ".*?".join(re.escape(part.strip()) for part in line.split("...") if part.strip())
        assert re.search(pattern, printed), f"README shows {line!r}; {cmd} prints:\n{printed}"


def test_the_readme_plan_sentence_prints_what_it_says(capsys):
    """The capacity search's sentence quotes a `kvsim plan` run's last line (its rate went stale once, 8.473
    beside a run that printed 8.398): each part of the quote between `...` is in what it prints now."""
    import shlex

    from kvsim.cli import main
    from kvsim.workloads import traces_dir

    text = " ".join((ROOT / "README.md").read_text().split())
    m = re.search(r"\(`(kvsim plan [^`]+)` ends `(converged: [^`]+)`", text)
    assert m, "the README's plan sentence"
    if not (traces_dir() / "mooncake").is_dir():
        pytest.skip("the Mooncake traces are absent")
    assert main(shlex.split(m.group(1))[1:]) == 0
    out = capsys.readouterr().out
    printed = " ".join(out.split())
    for part in m.group(2).split("..."):
        assert part.strip() in printed, (part, printed[-600:])
    # The quote "ends" the answer's line: nothing after it (an example once showed an answer whose line went
    # on to say NOT A STEADY STATE, a burst's answer standing as the example of a valid one).
    answer = next(line for line in out.splitlines() if line.startswith("converged:"))
    assert " ".join(answer.split()).endswith(m.group(2).split("...")[-1].strip()), answer


@pytest.mark.parametrize("status", ["burst", "above-cap"])
def test_the_readme_plan_burst_and_plateau_sentences_print_what_they_say(capsys, status):
    """user52 findings 8 and 10: the README quotes a plan whose knee passed only as a burst (`burst:`, the
    highest steady pass its answer) and a replica search that stops below its cap (`above-cap:`): each
    part of the quote between `...` is in the answer's line the command prints now."""
    import shlex

    from kvsim.cli import main
    from kvsim.workloads import traces_dir

    text = " ".join((ROOT / "README.md").read_text().split())
    found = list(re.finditer(rf"`(kvsim plan [^`]+)` ends `({status}: [^`]+)`", text))
    assert found, f"the README's {status} sentence"
    for m in found:  # (above-cap: the queue-free plateau and the queued one, user audit 54 #3)
        if "mooncake" in m.group(1) and not (traces_dir() / "mooncake").is_dir():
            pytest.skip("the Mooncake traces are absent")
        assert main(shlex.split(m.group(1))[1:]) == 0
        out = capsys.readouterr().out
        answer = " ".join(next(line for line in out.splitlines() if line.startswith(f"{status}:")).split())
        for part in m.group(2).split("..."):
            assert part.strip() in answer, (part, answer)
        assert answer.endswith(m.group(2).split("...")[-1].strip()), answer
    assert len(found) == {"burst": 1, "above-cap": 2}[status]


def test_the_readme_state_layers_sentence_is_its_runs(capsys):
    """The sentence before the Qwen3-Next example quotes that run's prefix hit rate and, without prefix
    caching, its concurrency and mean TTFT (two of them went stale once, 8.6 % and 17.78x): each is what
    the command prints now."""
    import shlex

    from kvsim.cli import main
    from kvsim.workloads import traces_dir

    text = " ".join((ROOT / "README.md").read_text().split())
    m = re.search(
        r"Qwen3-Next hits ([\d.]+ %) of its prompt tokens with prefix caching on\. With "
        r"`--no-enable-prefix-caching` it hits none, its concurrency is ([\d.]+x) .*? and its mean TTFT "
        r"([\d.,]+) ms",
        text,
    )
    assert m, "the README's Qwen3-Next sentence"
    if not (traces_dir() / "mooncake").is_dir():
        pytest.skip("the Mooncake traces are absent")
    cmd = "kvsim run --model qwen3-next-80b-a3b --gpu h200 -tp 2 --workload mooncake-conversation --requests 1000"
    assert cmd in text
    assert main(shlex.split(cmd)[1:]) == 0
    assert re.search(rf"prefix hit rate\s+{re.escape(m.group(1))}", capsys.readouterr().out)
    assert main([*shlex.split(cmd)[1:], "--no-enable-prefix-caching"]) == 0
    out = capsys.readouterr().out
    assert f"Maximum concurrency for 262,144 tokens per request: {m.group(2)}" in out
    assert re.search(rf"TTFT\s+{re.escape(m.group(3))}\s", out)
    assert re.search(r"prefix hit rate\s+off\n", out)  # (caching off: not a measured 0.0 %)


def test_the_readme_hybrid_fleet_sentence_is_its_runs(capsys):
    """The Fleets section's sentence on a hybrid model's replicas quotes two runs of its example's command
    with gpt-oss-120b, behind prefix-affinity and round-robin: each rate is what `kvsim run` prints now."""
    import shlex

    from kvsim.cli import main
    from kvsim.workloads import traces_dir

    text = " ".join((ROOT / "README.md").read_text().split())
    m = re.search(
        r"gpt-oss-120b on the same run hits ([\d.]+ %) behind prefix-affinity and ([\d.]+ %) behind round-robin",
        text,
    )
    assert m, "the README's hybrid fleet sentence"
    if not (traces_dir() / "mooncake").is_dir():
        pytest.skip("the Mooncake traces are absent")
    cmd = (
        "kvsim run --model llama-3.1-8b --gpu h100-80gb --workload mooncake-conversation --requests 3000 "
        "--replicas 4 --router prefix-affinity"
    )
    assert cmd.replace("--replicas", "\\ --replicas") in text  # the example the sentence says it reruns
    args = shlex.split(cmd)[1:]
    args[args.index("llama-3.1-8b")] = "gpt-oss-120b"
    for router, rate in (("prefix-affinity", m.group(1)), ("round-robin", m.group(2))):
        args[args.index("--router") + 1] = router
        assert main(args) == 0
        assert re.search(rf"prefix hit rate\s+{re.escape(rate)}", capsys.readouterr().out), router


def test_the_readmes_verdict_summary_is_claims_md():
    """README's summary of the claims' verdicts (its counts, the DIFFERS claims by id, Fig. 13's batch sizes
    and the Fig. 12 knees it explains them with) is what results/claims.md, written by `python -m
    bench.sweep`, says: a count must not outlive the run that made it (the README once gave none)."""
    text = " ".join((ROOT / "README.md").read_text().split())
    claims = (ROOT / "results" / "claims.md").read_text()
    total = re.search(
        r"\*\*(\d+) claims: (\d+) CONFIRMED, (\d+) INCONCLUSIVE, (\d+) DIFFERS, (\d+) NOT TESTABLE\.\*\*",
        claims,
    )
    assert total, "claims.md's summary line"
    m = re.search(
        r"Of its (\d+) claims (\d+) are CONFIRMED, (\d+) are INCONCLUSIVE, (\d+) DIFFER and (\d+) are NOT TESTABLE "
        r"\([^)]*\)\..*?the INCONCLUSIVE claims: (.*?)\. The DIFFERS claims: ((?:`[A-Za-z0-9.-]+`,? ?)+)\.",
        text,
    )
    assert m, "the README's verdict summary"
    assert m.groups()[:5] == total.groups()
    rows = dict(re.findall(r"^\| ([A-Za-z0-9.-]+) \|.*\| \*\*([A-Z ]+)\*\* \|$", claims, re.M))
    differs = {k for k, v in rows.items() if v == "DIFFERS"}
    assert set(re.findall(r"`([A-Za-z0-9.-]+)`", m.group(7))) == differs
    assert len(differs) == int(total.group(4))
    inconclusive = {k for k, v in rows.items() if v == "INCONCLUSIVE"}
    named = set(re.findall(r"`([A-Za-z0-9.-]+)`", m.group(6))) & set(rows)
    assert named == inconclusive
    assert len(inconclusive) == int(total.group(3))

    def ours(cid: str) -> str:
        row = next(line for line in claims.splitlines() if line.startswith(f"| {cid} |"))
        return row.split(" | ")[4].split()[0]

    fig13 = re.search(
        r"vLLM batches ([\d.]+) requests at once against the paper's 30\.42 on ShareGPT and ([\d.]+) against "
        r"its 132\.44 on Alpaca",
        text,
    )
    assert fig13, "the README's Fig. 13 sentence"
    assert fig13.groups() == (ours("P-fig13a-sharegpt-vllm"), ours("P-fig13b-alpaca-vllm"))
    knees = re.search(r"its Fig\. 12 knees, ([\d.]+) and ([\d.]+) req/s", text)
    assert knees, "the README's Fig. 12 knees"
    for ds, knee in zip(("sharegpt", "alpaca"), knees.groups(), strict=True):
        assert f"**P-fig12-{ds}-orca-oracle** (" in claims
        note = claims.split(f"**P-fig12-{ds}-orca-oracle** (", 1)[1].split("\n", 1)[0]
        assert f"vLLM {knee}," in note
    assert float(knees.group(1)) > 2 * 2.0
    assert float(knees.group(2)) > 2 * 30.0


def test_the_readme_sweep_note_is_what_its_command_prints(capsys, tmp_path):
    """rev46 #12: the README quoted the sweep's too-short note (0.67 times, about 179 requests) without the
    command, whose one-seed run prints 0.82 and 150; now the command (with `--seeds 2`) stands above the
    note, and the note is what it prints, word for word."""
    import shlex

    from kvsim.cli import main

    text = (ROOT / "README.md").read_text()
    m = re.search(
        r"\$ (kvsim sweep --grid max_num_seqs=2,64 (?:[^\n]*\\\n)+[^\n]*)\n(?:[^\n]*\n)*?(note: not a steady [^\n]*)\n",
        text,
    )
    assert m, "the README's sweep note example"
    cmd = re.sub(r"\\\n\s*", " ", m.group(1))
    assert main([*shlex.split(cmd)[1:], "--output", str(tmp_path / "s.parquet")]) == 0
    (note,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: not a steady")]
    assert note == m.group(2)


def _session_examples() -> list[tuple[str, list[str]]]:
    """README's `text` blocks that show a `$ kvsim ...` session: the command (its continuation lines joined)
    and the lines it prints there, a `...` standing for what the README leaves out."""
    out = []
    for block in re.findall(r"```text\n(\$ kvsim .*?)```", (ROOT / "README.md").read_text(), re.S):
        lines = block.splitlines()
        i, cmd = 0, lines[0][2:]
        while cmd.endswith("\\"):
            i += 1
            cmd = cmd[:-1] + " " + lines[i].strip()
        out.append((cmd, [line for line in lines[i + 1 :] if line.strip()]))
    return out


@pytest.mark.parametrize(
    ("cmd", "shown"), _session_examples(), ids=lambda v: v[:70] if isinstance(v, str) else ""
)
def test_the_readme_sessions_print_what_they_show(cmd, shown, capsys, tmp_path, monkeypatch):
    """rev48 #2: the README's `kvsim plan --split` session left out, behind a `...`, the two lines saying its
    runs were too short to reach a steady state, and its caveat's wording had gone stale unseen: each line a
    `$ kvsim` session shows is now a line its command prints, in order (a `...` inside a line stands for
    what is left out of it; a line `...` for lines left out)."""
    import shlex

    from kvsim.cli import main

    args = shlex.split(cmd)[1:]
    if args[0] == "sweep":
        args += ["--output", str(tmp_path / "s.parquet")]
    monkeypatch.chdir(tmp_path)  # where a --plot lands
    assert main(args) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len([line for line in shown if line != "..."]) >= 1
    at, matched = 0, set()
    for line in shown:
        if line == "...":
            continue
        pattern = ".*?".join(re.escape(part) for part in line.split("...")) + "$"
        found = next((j for j in range(at, len(printed)) if re.match(pattern, printed[j])), None)
        assert found is not None, f"README shows {line!r} (after line {at}); {cmd} prints:\n" + "\n".join(
            printed
        )
        at = found + 1
        matched.add(found)
    # A warning the command prints in capitals (NOT A STEADY STATE, THE VERDICT RESTS ON THE SAMPLE) is shown.
    warnings = [j for j, line in enumerate(printed) if re.search(r"\b[A-Z]{3,}(?: [A-Z]+){2,}:", line)]
    assert warnings or "plan" not in args[0]
    hidden = [printed[j] for j in warnings if j not in matched]
    assert not hidden, f"README hides what {cmd} warns: {hidden}"
