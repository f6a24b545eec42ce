"""quantgate.flows (see DESIGN.md for what lives here). Installed as `quantgate.flows` only."""
