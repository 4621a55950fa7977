"""docs/benchmarks.md and its plots, rendered from docs/bench/*.json only (`python -m bench doc`).

One module per section of the document (document.py assembles them, format.py holds what they share); pure: the
renderers read the runners' JSON and import neither the runners nor wg_mesh, and plots.py (matplotlib, a bench-only
dependency) is imported only when plots are drawn.
"""
