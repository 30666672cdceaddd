"""The model store's eviction policies: the registry. Each picks, among the resident models no
client holds, the ones to evict next; none picked means nothing may go, and a model that does not
fit then fails.

never, flush and all are the original TrIMS server's policies (rai-project/trims-tools,
pkg/server/utils.go; semantics from the uprd server of rai-project/trims_mxnet): never evicts
nothing; flush and all evict every unused model at once; its lcu (least commonly used) is lfu.
"""


def _least(key):
    """The one unused model with the smallest key."""
    return lambda unused: [min(unused, key=key)] if unused else []


POLICIES = {
    "lru": _least(lambda entry: (entry.last_used, entry.order)),
    "lfu": _least(lambda entry: (entry.uses, entry.last_used, entry.order)),
    "fifo": _least(lambda entry: entry.order),
    "never": lambda unused: [],
    "flush": list,
    "all": list,
}
POLICY_ALIASES = {"lcu": "lfu"}
