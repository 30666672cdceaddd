"""The mutation score of each core module after `mutmut run` (what `make mutation` prints).

Reads mutmut's results (mutants/<module>.meta) for the modules in pyproject.toml's
[tool.mutmut] only_mutate, leaves out the equivalent mutants listed in
tests/mutation-equivalents.yaml (edits that cannot change behaviour, each with its reason) and
prints one row per module: mutants, killed, survived, equivalent, score. The score is
killed / (mutants - equivalent); a timeout counts as killed (the tests noticed).

Exits 1 when a module scores under the threshold, when a mutant was not run, or when an entry of
the equivalents list no longer names that edit (the code changed: look at it again).
Run from the repository root: python tools/mutation_report.py [--markdown] [--threshold 90] [--mutants GLOB ...]
--mutants: score only the mutants whose names match (after `mutmut run GLOB ...`, which runs only those:
new code, without the whole `make mutation`); equivalents of other mutants are not checked then.
"""

import argparse
import fnmatch
import json
import sys
import tomllib
from pathlib import Path

import yaml
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code

EQUIVALENTS = Path("tests/mutation-equivalents.yaml")
DETECTED = {"killed", "timeout", "segfault"}  # the tests failed, ran out of time, or crashed


def changed_lines(mutant, path):
    """The edit a mutant makes: its removed and added lines, '-' or '+' then the stripped text."""
    diff = get_diff_for_mutant(mutant, path=path).splitlines()
    return [line[0] + " " + line[1:].strip() for line in diff
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def load_equivalents(path):
    """{mutant name: (change lines, reason)} from the equivalents list."""
    entries = yaml.safe_load(path.read_text()) or []
    listed = {}
    for entry in entries:
        missing = {"mutant", "change", "reason"} - set(entry)
        if missing:
            raise SystemExit(f"{path}: entry {entry.get('mutant', entry)!r} lacks {sorted(missing)}")
        listed[entry["mutant"]] = ([line.strip() for line in entry["change"].strip().splitlines()], entry["reason"])
    return listed


def module_results(module):
    meta = Path("mutants") / f"{module}.meta"
    if not meta.exists():
        raise SystemExit(f"{meta}: no results; run `mutmut run` first")
    return {name: status_by_exit_code[code] for name, code in json.loads(meta.read_text())["exit_code_by_key"].items()}


def module_of(name):
    """The source file of a mutant: repro.pecan.policies.x_f__mutmut_1 -> src/repro/pecan/policies.py."""
    return "src/" + name.split(".x_")[0].split(".x\u01c1")[0].replace(".", "/") + ".py"


def selected(statuses, patterns):
    """The statuses of the mutants whose names match one of `patterns` (every one without patterns)."""
    if not patterns:
        return statuses
    return {name: status for name, status in statuses.items() if any(fnmatch.fnmatch(name, p) for p in patterns)}


def report(modules, equivalents, patterns=()):
    """(rows, problems, survivors): one row per module and the lines that explain a failure."""
    rows, problems, survivors = [], [], []
    for module in modules:
        statuses = selected(module_results(module), patterns)
        if patterns and not statuses:
            continue
        counts = {"mutants": len(statuses), "killed": 0, "survived": 0, "equivalent": 0}
        for name, status in sorted(statuses.items()):
            if status == "not checked":
                problems.append(f"{name}: not run")
                counts["survived"] += 1
                continue
            if name in equivalents:
                change, _ = equivalents[name]
                if changed_lines(name, module) != change:
                    problems.append(f"{name}: listed as equivalent, but the mutant is now a different edit")
                elif status in DETECTED:
                    problems.append(f"{name}: listed as equivalent, but the tests kill it: not equivalent")
                else:
                    counts["equivalent"] += 1
                    continue
            if status in DETECTED:
                counts["killed"] += 1
            else:
                counts["survived"] += 1
                survivors.append(f"{name}: {status}")
        scored = counts["mutants"] - counts["equivalent"]
        counts["score"] = 100.0 * counts["killed"] / scored if scored else 100.0
        rows.append((module, counts))
    known = {name for module in modules for name in module_results(module)}
    # an entry of a module not mutated here (a subset run of new code lists its own) is not checked
    listed = {name for name in equivalents if module_of(name) in modules}
    unknown = listed - known if not patterns else set()
    problems += [f"{name}: listed as equivalent, but no such mutant" for name in sorted(unknown)]
    return rows, problems, survivors


def table(rows, markdown):
    header = ["module", "mutants", "killed", "survived", "equivalent", "score"]
    total = {key: sum(c[key] for _, c in rows) for key in ("mutants", "killed", "survived", "equivalent")}
    scored = total["mutants"] - total["equivalent"]
    total["score"] = 100.0 * total["killed"] / scored if scored else 100.0
    lines = [[module.removeprefix("src/repro/"), *(str(c[k]) for k in header[1:5]), f"{c['score']:.1f}%"]
             for module, c in rows + [("all", total)]]
    if markdown:
        return "\n".join("| " + " | ".join(cells) + " |" for cells in [header, ["---"] * len(header), *lines])
    widths = [max(len(cells[i]) for cells in [header, *lines]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(cells, widths)))
                     for cells in [header, *lines])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the table in Markdown (the README's form)")
    parser.add_argument("--threshold", type=float, default=90.0, help="lowest acceptable score per module, in percent")
    parser.add_argument("--mutants", nargs="+", default=(), metavar="GLOB", help="score only these mutants")
    args = parser.parse_args(argv)
    modules = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    rows, problems, survivors = report(modules, load_equivalents(EQUIVALENTS), args.mutants)
    print(table(rows, args.markdown))
    if survivors:
        print(f"\n{len(survivors)} surviving mutants (see one with `mutmut show NAME`):")
        print("\n".join("  " + line for line in survivors))
    low = [f"{module}: {c['score']:.1f}% < {args.threshold:g}%" for module, c in rows if c["score"] < args.threshold]
    for line in problems + low:
        print(f"mutation: {line}", file=sys.stderr)
    return 1 if problems or low else 0


if __name__ == "__main__":
    sys.exit(main())
