"""python -m findings: print FINDINGS.md (the same as `attnref findings`)."""
from .render import render

print(render(), end="")
