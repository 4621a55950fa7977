"""docs/benchmarks.md and its plots, rendered from docs/bench/*.json only (`python -m bench doc`)."""
