"""Reading YAML files a user gives: bounded in size, nesting and alias expansion, duplicate keys refused.

PyYAML resolves an alias to the object its anchor made, so an "anchor bomb" (ten aliases of an
anchor that holds ten aliases of the one before, nine levels deep) loads quickly; it is everything
that walks the result afterwards (the schema check, JSON encoding) that visits 10^9 values.
Composing a document is recursive, so a few thousand nested levels end in RecursionError. And a key
written twice silently keeps its last value; an alias inside the collection its anchor names makes a
value that holds itself, which every walk of it recurses into without end; and an integer of thousands
of digits is beyond what int() converts. This module reads the file once, walks the parser's
events to measure the document as it would be expanded (values counted with every alias
expanded; nesting depth) before anything is built, then builds it with a loader that refuses a
key written twice, naming both lines. Every problem is a ReproError naming the file.

Standard library and PyYAML only (the Snakefile's start imports it through repro.config).
"""

import yaml

from repro.errors import ReproError, invalid_yaml
from repro.fsutil import read_bounded

MAX_BYTES = 4 << 20  # a config is a few kilobytes
MAX_DEPTH = 64  # nested mappings and lists; the workflow's config nests 7 deep
MAX_INT_CHARACTERS = 100  # an integer as written
MAX_VALUES = 200_000  # values with every alias expanded; the workflow's config holds about 300

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where installed: faster (but see _events)


# what PyYAML's constructors raise for a value their tag cannot make: Python's own errors, not YAMLError
_CONSTRUCTION_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError)


class _UniqueKeyLoader(_LOADER):
    """The safe loader, refusing a mapping key written twice (YAML 1.2 requires keys be unique)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may be written more than once
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: the constructor names it below
                continue
            if first is not key_node:
                raise ReproError(f"{self._label}: key {key!r} appears twice, at line {first.start_mark.line + 1} "
                                 f"and line {key_node.start_mark.line + 1}")
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node, deep=False):
        # a value its tag cannot make (`!!int abc`, `2001-02-30`, `!!bool maybe`): PyYAML's constructors
        # raise what Python raised, which would end the command in a traceback
        try:
            return super().construct_object(node, deep=deep)
        except _CONSTRUCTION_ERRORS:
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            value = f" {node.value[:40]!r}" if isinstance(node, yaml.ScalarNode) else ""
            raise ReproError(f"{self._label}: line {node.start_mark.line + 1}: not a {tag} value:{value}; "
                             "expected a value its tag can hold") from None

    def construct_yaml_int(self, node):
        # thousands of digits: beyond what int() converts (sys.set_int_max_str_digits), or, written in hex,
        # a number no message can print; no setting needs a number that long
        if len(node.value) > MAX_INT_CHARACTERS:
            raise ReproError(f"{self._label}: line {node.start_mark.line + 1}: an integer of {len(node.value)} characters; "
                             f"expected a number of at most {MAX_INT_CHARACTERS}")
        return super().construct_yaml_int(node)


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:map", _UniqueKeyLoader.construct_yaml_map)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _UniqueKeyLoader.construct_yaml_int)


def _measure(text, label, max_depth, max_values):
    """Walk the parser's events: refuse a document nested deeper than max_depth or holding more
    than max_values values once its aliases are expanded."""
    sizes = {}  # anchor -> the values its node holds, expanded
    frames = []  # per open collection: [anchor, values so far]
    total = 0
    for event in _events(text):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            frames.append([event.anchor, 1])
            if len(frames) > max_depth:
                line = event.start_mark.line + 1
                raise ReproError(f"{label}: line {line}: nested more than {max_depth} levels deep")
            continue
        if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, count = frames.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, count = event.anchor, 1
        elif isinstance(event, yaml.AliasEvent):
            if any(frame[0] == event.anchor for frame in frames):  # `a: &a [*a]`: a value that holds itself
                raise ReproError(f"{label}: line {event.start_mark.line + 1}: alias *{event.anchor} refers to a collection "
                                 "that holds it (a recursive alias); expected a value that ends")
            anchor, count = None, sizes.get(event.anchor, 1)
        else:
            continue
        if anchor is not None:
            sizes[anchor] = count
        if frames:
            frames[-1][1] += count
            if frames[-1][1] > max_values:
                raise ReproError(f"{label}: line {event.start_mark.line + 1}: more than {max_values} values with "
                                 "its aliases expanded (an anchor expanded over and over?)")
        else:
            total += count
            if total > max_values:
                raise ReproError(f"{label}: more than {max_values} values with its aliases expanded")


def _events(text):
    """The parser's events, from libyaml where installed (a twentieth of the time: every config check
    reads the config), unless the text holds a tab: libyaml takes a tab after a value, which PyYAML's
    own parser (Snakemake's, for --configfile) refuses. A document libyaml refuses is parsed again
    by PyYAML's parser, whose messages are yaml.safe_load's (they show the line); libyaml's is
    raised where that one accepts it."""
    if "\t" in text or _LOADER is yaml.SafeLoader:
        yield from yaml.parse(text, Loader=yaml.SafeLoader)
        return
    try:
        yield from yaml.parse(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        for _ in yaml.parse(text, Loader=yaml.SafeLoader):
            pass
        raise exc


def parse_yaml(text, label, max_depth=MAX_DEPTH, max_values=MAX_VALUES):
    """The data of the YAML document `text`, read from `label` (named in every error)."""
    try:
        _measure(text, label, max_depth, max_values)
        loader = _UniqueKeyLoader(text)
        loader._label = label
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise invalid_yaml(label, exc) from None
    except RecursionError:  # a parser deeper than its events showed: still one line
        raise ReproError(f"{label}: nested too deeply to read") from None
    except _CONSTRUCTION_ERRORS as exc:  # a collection its tag cannot make (`!!set [1]`), built after its node
        raise ReproError(f"{label}: a collection its tag cannot hold ({exc}); expected a mapping or list as "
                         "written, without a tag") from None


def read_yaml_file(path, what="a YAML file", max_bytes=MAX_BYTES, max_depth=MAX_DEPTH, max_values=MAX_VALUES):
    """The data of the YAML file `path`: a regular file of at most max_bytes of UTF-8 text, nested at
    most max_depth deep, at most max_values values with aliases expanded, no key twice in a
    mapping. ReproError naming the file (and, where it can, the line) otherwise; `what` says
    what the file should be, in the errors that cannot name a line."""
    data = read_bounded(path, str(path), what, max_bytes)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ReproError(f"{path}: not a text file (expected {what})") from None
    return parse_yaml(text, str(path), max_depth, max_values)
