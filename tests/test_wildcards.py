import re

import pytest

from repro.wildcards import one_of

NAMES = [
    ["ResNet50_v2-8"],
    ["a", "ab", "abc", "b"],
    ["ResNet50_v2-8", "ResNet50_v3-8", "ResNet50_v3-32", "MobileNet_v2-8"],
    ["x.y", "x-y", "x_y", "xy", "x"],
    [f"matrix{i:04d}" for i in range(417)],
    ["cpu", "gpu", "tpu", "cpu.gpu"],
]


def flat(names):
    return "|".join(re.escape(name) for name in names)


@pytest.mark.parametrize("names", NAMES)
def test_the_constraint_matches_exactly_the_names(names):
    pattern = re.compile(f"(?:{one_of(names, 'none')})")
    candidates = set(names)
    for name in names:  # near misses: every prefix, every name with a character more or changed
        candidates |= {name[:i] for i in range(len(name))}
        candidates |= {name + extra for extra in ("", "0", "a", ".", "-", "_", "|")}
        candidates |= {name[:i] + "." + name[i + 1:] for i in range(len(name))}
    alternation = re.compile(f"(?:{flat(names)})")  # the names as plain alternatives
    for candidate in candidates:
        matched = bool(pattern.fullmatch(candidate))
        assert matched == (candidate in names), candidate
        assert matched == bool(alternation.fullmatch(candidate))


@pytest.mark.parametrize("names", NAMES)
def test_inside_a_path_pattern_the_wildcard_takes_the_same_value(names):
    """As Snakemake uses it: a named group in an anchored pattern, next to another wildcard."""
    ours = re.compile(rf"results/(?P<name>{one_of(names, 'none')})/(?P<mode>[^/]+)/(?P=name)-(?P=mode)\.json$")
    theirs = re.compile(rf"results/(?P<name>{flat(names)})/(?P<mode>[^/]+)/(?P=name)-(?P=mode)\.json$")
    for name in names:
        for mode in ("local", "a-b", name):
            path = f"results/{name}/{mode}/{name}-{mode}.json"
            assert ours.match(path).groupdict() == theirs.match(path).groupdict() == {"name": name, "mode": mode}
        assert ours.match(f"results/{name}x/m/{name}x-m.json") is theirs.match(f"results/{name}x/m/{name}x-m.json")


def test_no_names_is_the_placeholder_and_shared_prefixes_are_written_once():
    assert one_of([], "no-experiments") == "no-experiments"
    assert one_of({}, "no-modes") == "no-modes"
    assert one_of(["a.b"], "none") == re.escape("a.b")
    assert one_of(["ab", "ac"], "none") == "a(?:b|c)"
    assert one_of(["a", "ab"], "none") == "a(?:b)?"
    names = [f"matrix{i:04d}" for i in range(417)]
    assert len(one_of(names, "none")) < len(flat(names)) / 3
