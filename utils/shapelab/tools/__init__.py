"""Tools run from the shell: python -m shapelab.tools.preflight | fullrun | warmup | gpucheck | doctor (each has --help)."""
