"""quantgate.kernels (see DESIGN.md for what lives here). Installed as `quantgate.kernels` only."""
