"""The model store's eviction policies: the registry. Each picks, among the resident models no
client holds, the ones to evict next; none picked means nothing may go, and a model that does not
fit then fails.

never, flush and all are the original TrIMS server's policies (rai-project/trims-tools,
pkg/server/utils.go; semantics from the uprd server of rai-project/trims_mxnet): never evicts
nothing; flush and all evict every unused model at once; its lcu (least commonly used) is lfu.
"""


def _least(unused, key):
    """The one unused model with the smallest key."""
    return [min(unused, key=key)] if unused else []


# Each policy does its work when called (not when the registry is built), so every line of it runs
# per eviction, where a test reaches it.
def lru(unused):
    """Least recently used; ties by load order."""
    return _least(unused, lambda entry: (entry.last_used, entry.order))


def lfu(unused):
    """Least frequently used (TrIMS's lcu); ties by recency, then load order."""
    return _least(unused, lambda entry: (entry.uses, entry.last_used, entry.order))


def fifo(unused):
    """First loaded."""
    return _least(unused, lambda entry: entry.order)


def never(unused):
    """Nothing may go."""
    return []


def every(unused):
    """Every unused model at once (flush and all)."""
    return list(unused)


POLICIES = {"lru": lru, "lfu": lfu, "fifo": fifo, "never": never, "flush": every, "all": every}
POLICY_ALIASES = {"lcu": "lfu"}
