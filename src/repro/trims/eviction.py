"""The model store's eviction policies: the registry. Each maps a resident entry to a sort key;
among the models no client holds, the one with the smallest key is evicted first."""

POLICIES = {
    "lru": lambda entry: (entry.last_used, entry.order),
    "lfu": lambda entry: (entry.uses, entry.last_used, entry.order),
    "fifo": lambda entry: entry.order,
}
