"""Wildcard constraints for the rules: the configured names, and nothing else, as one regex.

A constraint that lists the names as a flat alternation (`a|b|c`) costs Snakemake a compile of
every pattern that holds the wildcard, and a match against every name in turn, both growing with
the number of names: with hundreds of experiments the compiles alone take a tenth of a second
per invocation. The same set of names as a trie (shared prefixes written once: `matrix0(?:0|1)`)
compiles to a regex a quarter of the size that matches in time of the name's length. It matches
exactly the same strings.

Standard library only: the Snakefile imports it at every start.
"""

import re


def one_of(names, none):
    """A regex matching exactly `names` (as written), or `none` when there are none."""
    trie = {}
    for name in names:
        node = trie
        for char in name:
            node = node.setdefault(char, {})
        node[None] = {}  # a name ends here
    return _pattern(trie) if trie else none


def _pattern(node):
    ends = None in node
    branches = [re.escape(char) + _pattern(child) for char, child in sorted(node.items(), key=_order) if char is not None]
    if not branches:
        return ""
    if len(branches) == 1 and not ends:
        return branches[0]
    return "(?:" + "|".join(branches) + ")" + ("?" if ends else "")


def _order(item):
    return "" if item[0] is None else item[0]
