"""Limits on every whole input file, in one place (`cpbcg.inputs` and its YAML loader
`cpbcg.yaml_input` both read them; neither imports the other's module at import time)."""

from __future__ import annotations

MAX_INPUT_BYTES = 16 << 20
"""Largest config, bucket file, preset or manifest read whole (16 MiB); traces are streamed instead."""
MAX_DEPTH = 64
"""Deepest nesting of lists/mappings accepted in a YAML or JSON input."""
MAX_YAML_NODES = 100_000
"""Most YAML nodes a document may expand to once its aliases are followed."""
MAX_INT_DIGITS = 20
"""Longest integer literal accepted (20 digits holds any 64-bit integer)."""
