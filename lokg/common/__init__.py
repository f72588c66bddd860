"""What the build stages and the evaluation share, below all of them and above the runtime:
the stage kit every stage module is written with (``stage``), the question sets and the
answer metrics that both training and evaluation read (``datasets``, ``metrics``), the
names a store's tables give (``store_names``), and what two sibling packages both need:
whether a dump holds documents (``dumps``), relations' nearest neighbours (``neighbours``).

It imports only ``lokg.runtime``, the standard library and third-party packages; nothing
here imports pyspark or torch at module level.
"""
