"""quantgate.conf (see DESIGN.md for what lives here). Installed as `quantgate.conf` only."""
