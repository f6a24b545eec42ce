"""quantgate.conf (see DESIGN.md for what lives here)."""

# Installed as `quantgate.conf`. Under its bare folder name (the repo root on sys.path) this
# would shadow or impersonate other packages -- `kernels` is a real PyPI package that
# transformers probes for -- so refuse.
if __name__ != "quantgate.conf":
    raise ImportError(f"import quantgate.conf, not {__name__!r}: the repo folders are not packages")
