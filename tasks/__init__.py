"""quantgate.tasks (see DESIGN.md for what lives here). Installed as `quantgate.tasks` only."""
