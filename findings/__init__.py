"""What attnref found in released kernels: the findings catalog (`FINDINGS.md` is rendered from it)."""
