"""Knowledge from documents: the stages that turn text into triples with provenance
(``documents``, ``triple_extract``) and restore each triple's source sentence
(``triple_context``), with the extraction backends they choose by name."""
