"""Mutants of solution.py that behave exactly like it (see practice/mutation.py): id -> why."""

EQUIVALENT = {
    "_device_leaf: 'return node.parent is not None and node.on_device and (node.lock_ref == 0) an...': "
    "'node.parent is not None' -> 'node.parent'":
        "a Node defines neither __bool__ nor __len__, so any parent is truthy and only None is falsy",
}
